/**
 * The chaos checker (chaos/checker.ts) and the fence (chaos/fence.ts) on small synthetic
 * histories: one of each violation, and the cases that must not count as one (a release
 * sent before the next grant, lease-expiry jitter, a split brain during a partition, lost
 * grants in async mode).
 */

import assert from "node:assert/strict";
import { analyze, type CheckRow, formatTable, LEASE_JITTER_MS, MUST } from "../chaos/checker.ts";
import { Fence } from "../chaos/fence.ts";
import type { Fault, History, WorkerEvent, WriteRecord } from "../chaos/history.ts";

/** A history with nothing in it; `extra` overrides fields. */
function history(extra: Partial<History> = {}): History {
  return {
    startedAt: 0,
    replication: "async",
    syncApplies: false,
    failoverTimeoutMs: 1000,
    faults: [],
    events: [],
    writes: [],
    convergenceMs: 100,
    badExits: [],
    badWorkers: [],
    ...extra,
  };
}

/** Options of {@linkcode grant}. */
interface GrantOptions {
  /** When the acquire began (default: `at`). */
  start?: number;
  /** Lease in seconds (default 2). */
  lease?: number;
  /** Wait in seconds (default 1). */
  wait?: number;
  /** When the release was sent (default: never). */
  release?: number;
}

/** The events of one granted acquire by `worker` (op `op`) of `key` at time `at` (ms). */
function grant(
  who: [worker: number, op: number],
  what: [key: string, token: number, at: number],
  o: GrantOptions = {},
): WorkerEvent[] {
  const [worker, op] = who;
  const [key, n, at] = what;
  const token = String(n);
  const start = o.start ?? at;
  const events: WorkerEvent[] = [
    { type: "acquire", worker, op, key, lease: o.lease ?? 2, wait: o.wait ?? 1, t: start },
    { type: "grant", worker, op, key, token, t: at },
    { type: "acquired", worker, op, outcome: "grant", t: at },
  ];
  if (o.release !== undefined) {
    events.push({ type: "release", worker, op, key, token, t: o.release });
    events.push({ type: "released", worker, op, ok: true, t: o.release + 1 });
  }
  return events;
}

function fault(kind: Fault["kind"], start: number, end: number): Fault {
  return { kind, node: 0, wasActive: true, start, end };
}

function row(rows: CheckRow[], id: string): CheckRow {
  const found = rows.find((r) => r.id === id);
  assert.ok(found, `no row ${id}`);
  return found;
}

function failed(h: History): string[] {
  return analyze(h).rows.filter((r) => r.status === "FAILED").map((r) => r.id);
}

Deno.test("analyze() passes a clean history: a release sent before the next grant is no overlap", () => {
  const h = history({
    events: [
      ...grant([1, 1], ["k", 10, 1000], { release: 1500 }),
      ...grant([2, 1], ["k", 11, 1500.5], { start: 1100, release: 1900 }),
      ...grant([1, 2], ["j", 12, 1600], { release: 1700 }),
    ],
  });
  const report = analyze(h);
  assert.deepEqual(failed(h), []);
  assert.equal(report.ok, true);
  assert.equal(row(report.rows, "acquires").value, 3);
  assert.equal(row(report.rows, "acquires.granted").value, 3);
  assert.equal(row(report.rows, "overlaps-inside").value, 0);
  assert.match(formatTable(report), /overlapping holds outside fault windows\s+0\s+= 0\s+ok/);
});

Deno.test("analyze() counts acquire outcomes and faults by kind", () => {
  const h = history({
    faults: [fault("kill", 10, 20), fault("pause", 5000, 6000), fault("kill", 9000, 9100)],
    events: [
      { type: "acquire", worker: 1, op: 1, key: "k", lease: 1, wait: 1, t: 0 },
      { type: "acquired", worker: 1, op: 1, outcome: "timeout", t: 1200 },
      { type: "acquire", worker: 1, op: 2, key: "k", lease: 1, wait: 1, t: 1300 },
      { type: "acquired", worker: 1, op: 2, outcome: "unavailable", t: 1400 },
      { type: "acquire", worker: 2, op: 1, key: "k", lease: 1, wait: 1, t: 0 },
      { type: "acquired", worker: 2, op: 1, outcome: "other", error: "LockError: x", t: 10 },
    ],
  });
  const { rows } = analyze(h);
  assert.equal(row(rows, "faults.kill").value, 2);
  assert.equal(row(rows, "faults.pause").value, 1);
  assert.equal(row(rows, "faults.partition").value, 0);
  assert.equal(row(rows, "acquires").value, 3);
  assert.equal(row(rows, "acquires.timeout").value, 1);
  assert.equal(row(rows, "acquires.unavailable").value, 1);
  assert.equal(row(rows, "acquires.other").value, 1);
  assert.equal(row(rows, "past-wait").value, 200);
});

Deno.test("analyze() fails a token granted twice, on any keys", () => {
  const h = history({
    events: [
      ...grant([1, 1], ["k", 7, 0], { release: 10 }),
      ...grant([2, 1], ["j", 7, 20], { release: 30 }),
    ],
  });
  assert.deepEqual(failed(h), ["duplicate-tokens"]);
  assert.match(analyze(h).details.join("\n"), /duplicate token 7: worker 1 op 1 key k, worker 2/);
});

Deno.test("analyze() fails a write accepted below a token already accepted for its key", () => {
  const write = (token: string, accepted: boolean, key = "k"): WriteRecord => ({
    worker: 1,
    op: 1,
    key,
    token,
    t: 0,
    at: 0,
    accepted,
    last: null,
  });
  const ok = history({ writes: [write("5", true), write("4", false), write("3", true, "j")] });
  assert.deepEqual(failed(ok), []);
  assert.equal(row(analyze(ok).rows, "stale-writes-rejected").value, 1);
  const bad = history({ writes: [write("5", true), write("4", true)] });
  assert.deepEqual(failed(bad), ["stale-writes-accepted"]);
});

Deno.test("analyze() fails holds of one key that overlap outside every fault window", () => {
  // The first hold is released at 5500; the second was granted at 5200.
  const h = history({
    events: [
      ...grant([1, 1], ["k", 10, 5000], { release: 5500 }),
      ...grant([2, 1], ["k", 11, 5200], { release: 5800 }),
    ],
  });
  assert.deepEqual(failed(h), ["overlaps-outside"]);
  assert.match(analyze(h).details[0], /key k: worker 2 op 1 granted 11 at \+5\.200 s.*no fault/);
  // A fault's window is its end plus the failover timeout plus 1 s: [0, 3199] misses 5200.
  const late = history({ ...h, faults: [fault("kill", 0, 3199 - 2000)] });
  assert.deepEqual(failed(late), ["overlaps-outside"]);
  const covered = history({ ...h, faults: [fault("kill", 0, 3200)] });
  assert.deepEqual(failed(covered), []);
  assert.equal(row(analyze(covered).rows, "overlaps-inside").value, 1);
  // Inside a partition's window it is reported, not failed.
  const partition = history({ ...h, faults: [fault("partition", 5100, 5300)] });
  assert.deepEqual(failed(partition), []);
  assert.equal(row(analyze(partition).rows, "overlaps-inside").value, 1);
});

Deno.test("analyze() allows the lease-expiry handover its delivery jitter, and no more", () => {
  // Hold 1 is never released: its lease (2 s) ends at 3000 by its worker's clock. The next
  // holder's grant arrives a little before that: delivery, not overlap.
  const at = (t: number) =>
    history({
      events: [
        ...grant([1, 1], ["k", 10, 1000]),
        ...grant([2, 1], ["k", 11, t], { start: 1500, wait: 3, release: t + 100 }),
      ],
    });
  assert.deepEqual(failed(at(3000 - LEASE_JITTER_MS + 1)), []);
  assert.deepEqual(failed(at(3000 - LEASE_JITTER_MS - 1)), ["overlaps-outside"]);
});

Deno.test("analyze() fails a later grant with a lower token after a SIGSTOP, not in a partition", () => {
  // A resumed old active grants from its old token block while the new active's holder
  // (higher token) still holds the key.
  const events = [
    ...grant([1, 1], ["k", 2000, 3000], { release: 3600 }),
    ...grant([2, 1], ["k", 1500, 3300], { start: 1000, wait: 2, release: 3400 }),
  ];
  const paused = history({ events, faults: [fault("pause", 1000, 3200)] });
  assert.deepEqual(failed(paused), ["stale-grants"]);
  assert.match(analyze(paused).details.join("\n"), /stale grant: key k: .*granted 1500/);
  const partition = history({ events, faults: [fault("partition", 1000, 3200)] });
  assert.deepEqual(failed(partition), []);
  assert.equal(row(analyze(partition).rows, "split-brain-grants").value, 1);
});

Deno.test("analyze() fails a grant lost at a kill -9 failover with sync replication only", () => {
  // Holder 1 got token 10 from the old active, which died before replicating it; the new
  // active grants the key again (higher token) while holder 1's lease still runs.
  const events = [
    ...grant([1, 1], ["k", 10, 1000], { lease: 3, release: 2900 }),
    ...grant([2, 1], ["k", 5_000_000, 2500], { start: 1100, wait: 3, release: 2600 }),
  ];
  const faults = [fault("kill", 1200, 2400)];
  const sync = history({ events, faults, replication: "sync", syncApplies: true });
  assert.deepEqual(failed(sync), ["lost-grants"]);
  const async = history({ events, faults });
  assert.deepEqual(failed(async), []);
  const lost = row(analyze(async).rows, "lost-grants");
  assert.equal(lost.value, 1);
  assert.equal(lost.status, "n/a");
  // A graceful restart's window does not make it a failover loss: just an overlap inside.
  const restart = history({ events, faults: [fault("restart", 1200, 2400)], syncApplies: true });
  assert.deepEqual(failed(restart), []);
  assert.equal(row(analyze(restart).rows, "lost-grants").value, 0);
});

Deno.test("analyze() fails an acquire that ends too long past its wait", () => {
  const limit = 1000 + MUST.pastWaitExtraMs;
  const acquire = (end: number) =>
    history({
      events: [
        { type: "acquire", worker: 1, op: 1, key: "k", lease: 1, wait: 0.5, t: 0 },
        { type: "acquired", worker: 1, op: 1, outcome: "timeout", t: end },
      ],
    });
  assert.deepEqual(failed(acquire(500 + limit - 1)), []);
  assert.deepEqual(failed(acquire(500 + limit)), ["past-wait"]);
});

Deno.test("analyze() fails a slow or missing convergence, bad node exits and bad workers", () => {
  assert.deepEqual(failed(history({ convergenceMs: MUST.convergenceMs - 1 })), []);
  assert.deepEqual(failed(history({ convergenceMs: MUST.convergenceMs })), ["convergence"]);
  assert.deepEqual(failed(history({ convergenceMs: null })), ["convergence"]);
  assert.match(formatTable(analyze(history({ convergenceMs: null }))), /never/);
  const faults = [
    { ...fault("kill", 0, 10), convergedMs: 2500 },
    { ...fault("pause", 20, 30), convergedMs: 40 },
  ];
  const slow = analyze(history({ faults, convergenceMs: 40 }));
  assert.equal(slow.ok, true, "only the last fault's convergence is a must");
  assert.equal(row(slow.rows, "slowest-convergence").value, 2500);
  assert.deepEqual(failed(history({ badExits: ["node 1 exited 1"] })), ["bad-exits"]);
  assert.deepEqual(failed(history({ badWorkers: ["worker 1 exited 1"] })), ["bad-workers"]);
});

Deno.test("Fence.write() accepts a higher token, the same holder's same token, nothing else", () => {
  const fence = new Fence();
  assert.deepEqual(fence.write("k", 5n, "1/1"), { accepted: true, last: null });
  assert.deepEqual(fence.write("k", 5n, "1/1"), { accepted: true, last: 5n });
  assert.deepEqual(fence.write("k", 5n, "2/1"), { accepted: false, last: 5n });
  assert.deepEqual(fence.write("k", 4n, "3/1"), { accepted: false, last: 5n });
  assert.deepEqual(fence.write("j", 1n, "3/1"), { accepted: true, last: null });
  assert.deepEqual(fence.write("k", 6n, "3/2"), { accepted: true, last: 5n });
});
