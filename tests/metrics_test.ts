/**
 * Unit tests of {@linkcode Metrics} and {@linkcode renderPrometheus} (issue 13): counters,
 * the sampled latency histogram and its buckets, the per-second grant ring on a fake clock,
 * rejection reasons, and the Prometheus text format. No sockets, no timers.
 *
 * @module
 */

import assert from "node:assert/strict";
import { NO_ACTIVE_NODE, type NodeStatus, SHUTTING_DOWN } from "../client/codec.ts";
import { LockTable } from "../server/engine/lock_table.ts";
import { LATENCY_BUCKETS, Metrics, reasonOf, renderPrometheus } from "../server/metrics.ts";
import { buildStatus } from "../server/status.ts";

/** Metrics on a fake clock (ms), both clocks the same. */
function fake(sampleEvery = 1): { metrics: Metrics; at(ms: number): void } {
  let now = 0;
  return {
    metrics: new Metrics({ clock: () => now, sampleEvery }),
    at: (ms) => now = ms,
  };
}

function statusOf(metrics: Metrics, overrides: Partial<NodeStatus> = {}): NodeStatus {
  return {
    ...buildStatus({
      address: "127.0.0.1:7321",
      version: "0.1.0",
      now: 2500,
      startedAt: 0,
      stopping: false,
      table: { held: 2, waiting: 1 },
      tokens: { last: 18446744073709551615n, reserved: 18446744073709551615n },
      metrics,
      connections: 3,
      sessions: 1,
      cluster: undefined,
    }),
    ...overrides,
  };
}

Deno.test("Metrics counts what the lock table does into its counts", () => {
  const { metrics } = fake();
  let token = 0n;
  const now = 0;
  const table = new LockTable<string>({
    clock: () => now,
    nextToken: () => ++token,
    hooks: { granted() {}, timedOut() {} },
    counts: metrics.counts,
  });
  table.acquire("k", 1000, 0, "a");
  table.acquire("k", 1000, 0, "b");
  assert.ok(table.extend("k", 1n, 1000));
  assert.ok(table.release("k", 1n));
  assert.ok(!table.release("k", 1n));
  assert.deepEqual(metrics.counts, {
    grants: 2,
    releases: 1,
    extends: 1,
    expirations: 0,
    timeouts: 0,
  });
});

Deno.test("Metrics times one request in sampleEvery, from the start of its read to its reply", () => {
  let turn = 100;
  let fresh = 100;
  const metrics = new Metrics({ clock: () => turn, now: () => fresh, sampleEvery: 4 });
  const starts: number[] = [];
  for (let i = 0; i < 8; i++) starts.push(metrics.request());
  assert.deepEqual(starts, [-1, -1, -1, 100, -1, -1, -1, 100]);
  assert.equal(metrics.requests, 8);
  fresh = 100.03; // 30 µs later
  metrics.answered(starts[3]);
  turn = fresh = 200;
  metrics.answered(200); // 0 s: the first bucket
  const h = metrics.histogram();
  assert.equal(h.count, 2);
  assert.equal(h.sampleEvery, 4);
  assert.ok(Math.abs(h.sum - 0.00003) < 1e-9);
  assert.equal(h.buckets[0], 1, "0 s is at most 25 µs");
  assert.equal(h.buckets[1], 1, "30 µs is in the 50 µs bucket");
});

Deno.test("Metrics.observe() puts each latency in the first bucket it fits, above 1 s in +Inf", () => {
  const { metrics } = fake();
  for (const s of [0.000025, 0.001, 0.0011, 1, 1.5, -1]) metrics.observe(s);
  const buckets = metrics.histogram().buckets;
  assert.equal(buckets.length, LATENCY_BUCKETS.length + 1);
  assert.equal(buckets[0], 2, "25 µs exactly, and a negative clock step as 0");
  assert.equal(buckets[LATENCY_BUCKETS.indexOf(0.001)], 1);
  assert.equal(buckets[LATENCY_BUCKETS.indexOf(0.0025)], 1);
  assert.equal(buckets[LATENCY_BUCKETS.indexOf(1)], 1);
  assert.equal(buckets[LATENCY_BUCKETS.length], 1);
});

Deno.test("grantsPerSecond() holds complete seconds only, oldest first, idle seconds as 0, at most 300", () => {
  const { metrics, at } = fake();
  assert.deepEqual(metrics.grantsPerSecond(), []);
  metrics.counts.grants += 5;
  at(999);
  metrics.tick();
  assert.deepEqual(metrics.grantsPerSecond(), [], "the first second is not over");
  at(1000);
  metrics.counts.grants += 2; // in the batch that ends in second 1: counted for second 0
  metrics.tick();
  metrics.counts.grants += 3;
  at(4200);
  assert.deepEqual(metrics.grantsPerSecond(), [7, 3, 0, 0]);
  at(1_000_000);
  const rates = metrics.grantsPerSecond();
  assert.equal(rates.length, 300);
  assert.ok(rates.every((r) => r === 0));
});

Deno.test("reasonOf() files the retryable refusals under their own reasons", () => {
  assert.equal(reasonOf(NO_ACTIVE_NODE), "no_active");
  assert.equal(reasonOf(SHUTTING_DOWN), "shutting_down");
  assert.equal(reasonOf("anything else"), "other");
  const { metrics } = fake();
  metrics.reject("prefix");
  metrics.reject("prefix");
  metrics.promoted("failover");
  metrics.promoted("handoff");
  metrics.promoted("handoff");
  const counts = statusOf(metrics).counts;
  assert.equal(counts.rejections.prefix, 2);
  assert.equal(counts.rejections.bad_request, 0);
  assert.equal(counts.failovers, 1);
  assert.equal(counts.handoffs, 2);
});

/** The value of the sample `name{labels}` in `text`. */
function sample(text: string, name: string): string | undefined {
  const line = text.split("\n").find((l) => l.startsWith(`${name} `));
  return line?.slice(name.length + 1);
}

Deno.test("renderPrometheus() writes HELP and TYPE for every lockd_* metric, counters as _total", () => {
  const { metrics } = fake();
  metrics.counts.grants = 12;
  metrics.reject("auth");
  const text = renderPrometheus(statusOf(metrics), metrics.histogram(), 40);
  assert.ok(text.endsWith("\n"));
  const lines = text.trimEnd().split("\n");
  const names = new Set<string>();
  for (const line of lines) {
    if (line.startsWith("#")) {
      assert.match(line, /^# (HELP|TYPE) lockd_[a-z_]+ \S/);
      continue;
    }
    const match = /^(lockd_[a-z_]+)(\{[a-z]+="[^"]*"\})? (\S+)$/.exec(line);
    assert.ok(match, `not a sample: ${line}`);
    assert.ok(Number.isFinite(Number(match[3])), `value of ${line}`);
    names.add(match[1].replace(/_(bucket|sum|count)$/, ""));
  }
  for (const name of names) {
    assert.ok(lines.some((l) => l.startsWith(`# HELP ${name} `)), `${name} has a HELP`);
    const type = lines.find((l) => l.startsWith(`# TYPE ${name} `))?.split(" ")[3];
    assert.ok(type, `${name} has a TYPE`);
    if (type === "counter") assert.ok(name.endsWith("_total"), name);
  }
  assert.equal(sample(text, "lockd_grants_total"), "12");
  assert.equal(sample(text, "lockd_requests_total"), "40");
  assert.equal(sample(text, 'lockd_rejections_total{reason="auth"}'), "1");
  assert.equal(sample(text, 'lockd_role{role="active"}'), "1");
  assert.equal(sample(text, 'lockd_role{role="standby"}'), "0");
  assert.equal(sample(text, 'lockd_replication_mode{mode="none"}'), "1");
  assert.equal(sample(text, "lockd_holders"), "2");
  assert.equal(sample(text, "lockd_waiters"), "1");
  assert.equal(sample(text, "lockd_connections"), "3");
  assert.equal(sample(text, "lockd_token_mark"), "18446744073709551615");
  assert.equal(sample(text, "lockd_uptime_seconds"), "2.5");
});

Deno.test("renderPrometheus() writes the latency histogram with cumulative buckets up to +Inf", () => {
  const { metrics } = fake();
  for (const s of [0.00001, 0.0003, 0.0003, 2]) metrics.observe(s);
  const text = renderPrometheus(statusOf(metrics), metrics.histogram(), 4);
  const name = "lockd_request_duration_seconds";
  assert.match(text, new RegExp(`# TYPE ${name} histogram`));
  assert.equal(sample(text, `${name}_bucket{le="0.000025"}`), "1");
  assert.equal(sample(text, `${name}_bucket{le="0.00025"}`), "1");
  assert.equal(sample(text, `${name}_bucket{le="0.0005"}`), "3");
  assert.equal(sample(text, `${name}_bucket{le="1"}`), "3");
  assert.equal(sample(text, `${name}_bucket{le="+Inf"}`), "4");
  assert.equal(sample(text, `${name}_count`), "4");
  assert.ok(Math.abs(Number(sample(text, `${name}_sum`)) - 2.00061) < 1e-9);
});

Deno.test("renderPrometheus() labels each peer, with the lag only where it is known", () => {
  const { metrics } = fake();
  const text = renderPrometheus(
    statusOf(metrics, {
      role: "active",
      replication: { mode: "sync", degraded: true, inSync: [] },
      peers: [
        { address: "b:1", role: "standby", live: true, synced: true, lagMs: 1500, lastHeardMs: 5 },
        {
          address: 'c"\\:2',
          role: "starting",
          live: false,
          synced: false,
          lagMs: null,
          lastHeardMs: null,
        },
      ],
    }),
    metrics.histogram(),
    0,
  );
  assert.equal(sample(text, 'lockd_replication_lag_seconds{peer="b:1"}'), "1.5");
  assert.ok(!text.includes('lockd_replication_lag_seconds{peer="c'));
  assert.equal(sample(text, 'lockd_peer_up{peer="c\\"\\\\:2"}'), "0");
  assert.equal(sample(text, "lockd_replication_degraded"), "1");
  assert.equal(sample(text, 'lockd_replication_mode{mode="sync"}'), "1");
});

Deno.test("Metrics counts a table's expirations only while countsExpirations() says so", () => {
  let serving = false;
  const metrics = new Metrics({ clock: () => 0, countsExpirations: () => serving });
  const counts = metrics.counts;
  counts.expirations++;
  counts.grants++;
  assert.deepEqual(
    { ...metrics.counts },
    { grants: 1, releases: 0, extends: 0, expirations: 0, timeouts: 0 },
  );
  serving = true;
  counts.expirations++;
  assert.equal(metrics.counts.expirations, 1);
  assert.equal(JSON.parse(JSON.stringify(metrics.counts)).expirations, 1);
});
