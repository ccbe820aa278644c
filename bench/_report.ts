/**
 * The benchmark's report: the targets, the results table and the markdown page.
 *
 * @module
 */

import { type Json, type Options } from "./_bench.ts";
import { int, num, ratio } from "./_stats.ts";
import { type ClusterFigure } from "./cluster.ts";
import { type ContentionFigure } from "./contention.ts";
import { LEASE_SAMPLES, LEASE_SETTLE_MS, type LeaseFigure } from "./leases.ts";
import { type MemoryFigure } from "./memory.ts";
import type { ConnectionsFigure } from "./connections.ts";
import { FIRST_WARMUP_S, type PairsFigure } from "./pairs.ts";

export interface Results {
  pairs?: PairsFigure[];
  contention?: ContentionFigure;
  memory?: MemoryFigure;
  leases?: LeaseFigure;
  cluster?: ClusterFigure;
  connections?: ConnectionsFigure;
}

export interface Target {
  target: string;
  measured: string;
  met: boolean | undefined;
  status: string;
}

/** A "higher is better" ratio target: lockd/Redis at least `goal`. */
export function atLeast(name: string, lockd: number, redis: number, goal: number): Target {
  const r = lockd / redis;
  if (!Number.isFinite(r)) {
    return { target: name, measured: "–", met: undefined, status: "not run" };
  }
  const met = r >= goal;
  return {
    target: name,
    measured: `${r.toFixed(2)}×`,
    met,
    status: met
      ? "met"
      : `missed: lockd needs ${((goal / r - 1) * 100).toFixed(0)} % more (${int(goal * redis)} vs ${
        int(lockd)
      })`,
  };
}

/** A "lower is better" target: `value` at most `limit`. */
export function atMost(
  name: string,
  value: number,
  limit: number,
  unit: string,
  shown: string,
): Target {
  if (!Number.isFinite(value)) {
    return { target: name, measured: "–", met: undefined, status: "not run" };
  }
  const met = value <= limit;
  return {
    target: name,
    measured: shown,
    met,
    status: met
      ? "met"
      : `missed by ${num(value - limit)}${unit} (${((value / limit - 1) * 100).toFixed(0)} % over)`,
  };
}

export function targets(results: Results): Target[] {
  const list: Target[] = [];
  const pair = (c: number, d: number) =>
    results.pairs?.find((p) => p.conns === c && p.depth === d)?.median;
  const p6432 = pair(64, 32), p16 = pair(16, 1), p1 = pair(1, 1);
  list.push(atLeast(
    "64×32 pipelined pairs/s ≥ 1.5× Redis",
    p6432?.lockd.pairsPerS ?? NaN,
    p6432?.redis.pairsPerS ?? NaN,
    1.5,
  ));
  list.push(atLeast(
    "16 connections unpipelined pairs/s ≥ 1.0× Redis",
    p16?.lockd.pairsPerS ?? NaN,
    p16?.redis.pairsPerS ?? NaN,
    1.0,
  ));
  const p50Ratio = (p1?.lockd.p50 ?? NaN) / (p1?.redis.p50 ?? NaN);
  list.push(atMost(
    "1 connection pair p50 ≤ Redis's (ratio ≤ 1.00)",
    p50Ratio,
    1,
    "×",
    Number.isFinite(p50Ratio)
      ? `${p50Ratio.toFixed(2)}× (${num(p1!.lockd.p50)} vs ${num(p1!.redis.p50)} µs)`
      : "–",
  ));
  const m = results.memory;
  const memRatio = (m?.lockdRssPerLock ?? NaN) / (m?.redisUsedPerLock ?? NaN);
  list.push(atMost(
    "memory per held lock ≤ Redis's per lock key (ratio ≤ 1.00)",
    memRatio,
    1,
    "×",
    Number.isFinite(memRatio)
      ? `${memRatio.toFixed(2)}× (${num(m!.lockdRssPerLock)} vs ${num(m!.redisUsedPerLock)} B)`
      : "–",
  ));
  const c = results.connections;
  const connRatio = (c?.lockdPerConnection ?? NaN) / (c?.redisPerConnection ?? NaN);
  list.push(atMost(
    "memory per idle connection ≤ Redis's (ratio ≤ 1.00)",
    connRatio,
    1,
    "×",
    Number.isFinite(connRatio)
      ? `${connRatio.toFixed(2)}× (${num(c!.lockdPerConnection)} vs ${
        num(c!.redisPerConnection)
      } B)`
      : "–",
  ));
  const l = results.leases;
  const [low, high] = l?.lateP99 ?? [NaN, NaN];
  const lease = atMost(
    `${int(l?.locks ?? 1_000_000)} leases expire with p99 lateness < 10 ms`,
    high,
    10,
    " ms",
    `${num(low)}–${num(high)} ms`,
  );
  if (lease.met === false && low < 10) {
    lease.met = undefined;
    lease.status = `undecided: the bounds straddle 10 ms (holder round trip p99 ${
      num(l!.holderRttP99)
    } ms)`;
  }
  list.push(lease);
  return list;
}

export function cell(...values: string[]): string {
  return values.join(" / ");
}

export function table(results: Results): string[] {
  const rows: string[][] = [];
  const row = (
    scenario: string,
    metric: string,
    lockd: string,
    redis: string,
    r = "",
    floor = "",
    portable = "",
  ) => rows.push([scenario, metric, lockd, redis, r, portable, floor]);
  for (const p of results.pairs ?? []) {
    const l = p.median.lockd, r = p.median.redis, f = p.median.floor, o = p.median.portable;
    const name = `1. pairs, ${p.conns} conn × ${p.depth} in flight`;
    row(
      name,
      "pairs/s",
      int(l.pairsPerS),
      int(r.pairsPerS),
      ratio(l.pairsPerS, r.pairsPerS),
      f ? `${int(f.pairsPerS)} (${ratio(f.pairsPerS, r.pairsPerS)} Redis)` : "",
      o ? `${int(o.pairsPerS)} (${ratio(o.pairsPerS, r.pairsPerS)} Redis)` : "",
    );
    row(
      name,
      "pair latency p50 / p99 / p99.9 (µs)",
      cell(num(l.p50), num(l.p99), num(l.p999)),
      cell(num(r.p50), num(r.p99), num(r.p999)),
      cell(ratio(l.p50, r.p50), ratio(l.p99, r.p99), ratio(l.p999, r.p999)),
      f ? cell(num(f.p50), num(f.p99), num(f.p999)) : "",
      o ? cell(num(o.p50), num(o.p99), num(o.p999)) : "",
    );
  }
  const c = results.contention;
  if (c) {
    const l = c.median.lockd, r = c.median.redis;
    const name = `2. contention, ${c.clients} clients on one key`;
    row(
      name,
      "grants/s (handoffs)",
      int(l.grantsPerS),
      int(r.grantsPerS),
      ratio(l.grantsPerS, r.grantsPerS),
    );
    row(
      name,
      "wait p50 / p99 (ms)",
      cell(num(l.waitP50), num(l.waitP99)),
      cell(num(r.waitP50), num(r.waitP99)),
      cell(ratio(l.waitP50, r.waitP50), ratio(l.waitP99, r.waitP99)),
    );
    row(
      name,
      "grants per client min–max (CoV)",
      `${int(l.min)}–${int(l.max)} (${l.cov.toFixed(3)})`,
      `${int(r.min)}–${int(r.max)} (${r.cov.toFixed(3)})`,
    );
  }
  const m = results.memory;
  if (m) {
    const name = "3. memory";
    row(
      name,
      `bytes per held lock (${int(m.locks)} locks): lockd RSS growth, Redis used_memory growth`,
      num(m.lockdRssPerLock),
      num(m.redisUsedPerLock),
      ratio(m.lockdRssPerLock, m.redisUsedPerLock),
    );
    row(
      name,
      "bytes per held lock, RSS growth of both",
      num(m.lockdRssPerLock),
      num(m.redisRssPerLock),
      ratio(m.lockdRssPerLock, m.redisRssPerLock),
    );
    row(
      name,
      `bytes per queued waiter (${int(m.waiters)} waiters)`,
      num(m.lockdRssPerWaiter),
      "no queue",
    );
  }
  const idle = results.connections;
  if (idle) {
    const name = `6. ${int(idle.connections)} idle connections`;
    row(
      name,
      "bytes of server RSS per idle connection",
      num(idle.lockdPerConnection),
      num(idle.redisPerConnection),
      ratio(idle.lockdPerConnection, idle.redisPerConnection),
    );
    row(
      name,
      "MB of RSS kept 3 s after they all closed",
      num(idle.lockdKeptAfterClose / 1e6),
      num(idle.redisKeptAfterClose / 1e6),
      ratio(idle.lockdKeptAfterClose, idle.redisKeptAfterClose),
    );
    const seconds = (s: number) => Number.isFinite(s) ? num(s) : "never (window over)";
    row(
      name,
      "seconds after closing until at most 30 % is kept; MB kept then",
      cell(seconds(idle.lockdGivenBackS), num(idle.lockdKeptAfterGivingBack / 1e6)),
      cell(seconds(idle.redisGivenBackS), num(idle.redisKeptAfterGivingBack / 1e6)),
      ratio(idle.lockdGivenBackS, idle.redisGivenBackS),
    );
  }
  const l = results.leases;
  if (l) {
    const name = `4. leases, ${int(l.locks)} expiring`;
    const bounds = (b: [number, number]) => `${num(b[0])}–${num(b[1])}`;
    row(
      name,
      `expiry lateness p50 / p99 / max (ms; ${int(l.samples)} sampled leases)`,
      cell(bounds(l.lateP50), bounds(l.lateP99), bounds(l.lateMax)),
      "n/a (expired keys are freed on access)",
    );
    row(
      name,
      "sampled holders' acquire round trip p50 / p99 (ms; the width of each range above)",
      cell(num(l.holderRttP50), num(l.holderRttP99)),
      "",
    );
    row(
      name,
      `idle CPU with ${int(l.locks)} leases held (% of one core)`,
      num(l.idleCpu.lockd),
      num(l.idleCpu.redis),
    );
    row(
      name,
      "locks taken per second while filling (4 conns × 100 in flight)",
      int(l.fillPerS.lockd),
      int(l.fillPerS.redis),
      ratio(l.fillPerS.lockd, l.fillPerS.redis),
    );
  }
  const k = results.cluster;
  if (k) {
    const name = "5. with a standby (Redis: a replica)";
    const pl = k.pairs.median.lockd, pr = k.pairs.median.redis;
    row(
      name,
      "pairs/s, 64 conn × 32 in flight",
      int(pl.pairsPerS),
      int(pr.pairsPerS),
      ratio(pl.pairsPerS, pr.pairsPerS),
    );
    row(
      name,
      "pair latency p50 / p99 / p99.9 (µs)",
      cell(num(pl.p50), num(pl.p99), num(pl.p999)),
      cell(num(pr.p50), num(pr.p99), num(pr.p999)),
      cell(ratio(pl.p50, pr.p50), ratio(pl.p99, pr.p99), ratio(pl.p999, pr.p999)),
    );
    const f = k.failover;
    row(
      name,
      `failover: kill -9 of the active → first grant, p50 / p99 / max (ms; ${f.runs.length} runs)`,
      cell(num(f.p50), num(f.p99), num(f.max)) + (f.failed ? ` (${f.failed} failed)` : ""),
      "no automatic failover",
    );
    const h = k.handoff;
    row(
      name,
      `graceful handoff (SIGTERM): no-grant gap p50 / p99 / max (ms; ${h.runs.length} runs)`,
      cell(num(h.gapP50), num(h.gapP99), num(h.gapMax)) + (h.failed ? ` (${h.failed} failed)` : ""),
      "–",
    );
    row(name, "error replies seen by the client during the handoffs", int(h.errorsAfter), "–");
  }
  // The scenario is named on its first row only.
  for (let i = rows.length - 1; i > 0; i--) if (rows[i][0] === rows[i - 1][0]) rows[i][0] = "";
  const header = [
    "scenario",
    "metric",
    "lockd",
    "Redis",
    "lockd/Redis",
    "lockd --io portable",
    "Deno floor",
  ];
  // The last two columns are there when the unpipelined pairs were measured.
  for (const column of [6, 5]) {
    if (rows.every((r) => r[column] === "")) {
      header.splice(column, 1);
      for (const r of rows) r.splice(column, 1);
    }
  }
  return [
    `| ${header.join(" | ")} |`,
    `| ${header.map(() => "---").join(" | ")} |`,
    ...rows.map((r) => `| ${r.join(" | ")} |`),
  ];
}

/** Async against sync replication (scenario 5), as its own table. */
function replicationTable(results: Results): string[] {
  const r = results.cluster?.replication;
  if (r === undefined) return [];
  const line = (metric: string, a: string, b: string, x: string) =>
    `| ${metric} | ${a} | ${b} | ${x} |`;
  const latency = (m: { p50: number; p99: number }) => cell(num(m.p50), num(m.p99));
  return [
    "## Replication: async against sync (2 nodes, one standby, alternating runs)",
    "",
    "| metric | async | sync | sync/async |",
    "| --- | --- | --- | --- |",
    line(
      "pairs/s, 64 conn × 32 in flight",
      int(r.pipelined.async.pairsPerS),
      int(r.pipelined.sync.pairsPerS),
      ratio(r.pipelined.sync.pairsPerS, r.pipelined.async.pairsPerS),
    ),
    line(
      "pair latency p50 / p99 (µs), 64 conn × 32 in flight",
      latency(r.pipelined.async),
      latency(r.pipelined.sync),
      cell(
        ratio(r.pipelined.sync.p50, r.pipelined.async.p50),
        ratio(r.pipelined.sync.p99, r.pipelined.async.p99),
      ),
    ),
    line(
      "pairs/s, 1 conn × 1 in flight",
      int(r.single.async.pairsPerS),
      int(r.single.sync.pairsPerS),
      ratio(r.single.sync.pairsPerS, r.single.async.pairsPerS),
    ),
    line(
      "pair latency p50 / p99 (µs), 1 conn × 1 in flight",
      latency(r.single.async),
      latency(r.single.sync),
      cell(
        ratio(r.single.sync.p50, r.single.async.p50),
        ratio(r.single.sync.p99, r.single.async.p99),
      ),
    ),
    "",
  ];
}

export function markdown(
  results: Results,
  machine: Json,
  options: Options,
  command: string,
  anomalies: string[],
): string {
  const leaseSamples = results.leases?.samples ?? LEASE_SAMPLES;
  const sampleStride = ((results.leases?.locks ?? options.locks) - leaseSamples) / leaseSamples;
  const out = [
    "# lockd vs Redis as a lock: benchmark results",
    "",
    `Made by \`${command}\` on ${machine.date}: ${machine.cpu}, ${machine.nproc} cores shared by ` +
    `server and load generator; Deno ${machine.deno}, Redis ${machine.redis ?? "not installed"}; ` +
    `lockd at ${machine.git}; load average ${machine.loadavg_at_start} at the start.`,
    "",
    `Each figure is the median of ${options.runs} run(s) (memory and leases: ` +
    `${options.heavyRuns}), alternating lockd and Redis on servers started fresh for each ` +
    "configuration (for memory, leases and failover: for each run). Throughput runs measure " +
    `${options.duration} s after ${options.warmup} s of warm-up (${FIRST_WARMUP_S} s more on a ` +
    "fresh server, so that lockd's JIT compiler has settled). The load generator is one C " +
    "process (epoll, one thread) with the same keys and connection settings for both; Redis is " +
    "used with the Redlock recipe (`SET key token NX PX ms`, release by a compare-and-delete " +
    "script run with `EVALSHA`). Latency is per acquire+release pair, from sending the acquire " +
    "to receiving the release's reply. lockd serves its port through epoll by FFI (`--io " +
    "auto`, docs/server.md); the unpipelined pair runs also drive lockd on the runtime's " +
    "sockets (`--io portable`, its own column) and the Deno floor " +
    "(`bench/floor_server.ts`, last column), in turn with the other two: a Deno line server " +
    "that answers each acquire and release at once, without any lock logic, with lockd's I/O " +
    "pattern (16 KiB reads, one write per read, Nagle off). It is what a Deno server pays per " +
    "request on this machine before doing any work; a reference, not part of the targets.",
    "",
    ...table(results),
    "",
    ...replicationTable(results),
    "## Targets (issues #6 and #14)",
    "",
    "| target | measured | status |",
    "| --- | --- | --- |",
    ...targets(results).map((t) => `| ${t.target} | ${t.measured} | ${t.status} |`),
    "",
    "## How each figure is measured",
    "",
    "- Memory: lockd's resident set size growth (`/proc/<pid>/status`) between a baseline with " +
    "the load generator's connections open and 1 s after the last grant; Redis's " +
    "`INFO memory` `used_memory` growth (the issue's yardstick) and its RSS growth. Keys are " +
    "`lock:<n>`, leases 1 hour (Redis: `PX 3600000`, a 16-character token). Waiters: 100 " +
    "connections each queue one acquire behind every one of `waiters/100` held keys.",
    "- Contention: each of the 64 clients acquires the key, releases it as soon as it is " +
    "granted, and asks again. lockd queues the acquires (FIFO). Redis has no queue: a client " +
    `whose \`SET NX\` is refused retries after ${options.redisRetryUs} µs ` +
    "(`--redis-retry-us`); a client that has just released asks again at once. Wait is from " +
    "the first attempt to the grant.",
    `- Lease lateness: the load generator fills all but ${int(leaseSamples)} of the leases ` +
    `(${options.lease} s each, 4 connections × 100 in flight) as fast as the server grants ` +
    `them, so they also expire at that rate. ${LEASE_SETTLE_MS} ms after the last grant, ` +
    `with the server idle, it takes the ${int(leaseSamples)} sampled leases, one request at ` +
    "a time on a connection of their own, and queues a waiter behind each on another " +
    "connection. Each sample gets the lease that makes it expire together with the fill's " +
    `lease of the same rank (the reply time of every ${int(sampleStride)}th fill grant, plus ` +
    "the fill's lease), so the samples' expiries are spread over the whole mass expiry as " +
    "densely as the fill's. Lateness is the waiter's grant time minus the holder's grant " +
    "time and its lease. The holder's grant time is known within its round trip to the idle " +
    "server (in the table), so each figure is a range: measured from the holder's reply " +
    "(low) and from its request (high). Idle CPU: `/proc/<pid>/stat` user+system time over " +
    "3 s while every lease is held, the waiters are queued, and no request arrives.",
    "- Deno floor: `bench/floor_server.ts`, started fresh like the others and driven by the " +
    "same load generator with the same requests; it answers `A <key> A <n>` (a counter) and " +
    "`R <key> R` from the bytes, without decoding text, storing or checking anything.",
    "- Cluster: two lockd nodes started with `--peers` (default heartbeat 0.1 s, failover " +
    "timeout 1 s); Redis with one replica (`--replicaof`). Failover and handoff: one client " +
    "acquires and releases fresh keys back to back, follows `M` replies and retries every " +
    "1 ms on `E` or a closed connection; the signal is sent by the load generator itself. " +
    "The gap is from the last grant by the old active to the first grant by the new one.",
  ];
  if (anomalies.length > 0) {
    out.push("", "## Anomalies seen during this run", "");
    for (const a of anomalies) out.push(`- ${a.replaceAll("\n", " ").replaceAll("|", "\\|")}`);
  }
  return out.join("\n") + "\n";
}
