/**
 * Scenario 3: memory per held lock and per queued waiter.
 *
 * @module
 */

import { Bench, type Json, type Kind, progress } from "./_bench.ts";
import { redisInfo, rssBytes, type ServerProcess, sleep } from "./_procs.ts";
import { int, median, num } from "./_stats.ts";

export interface MemoryFigure {
  locks: number;
  waiters: number;
  runs: { lockd: Json[]; lockdWaiters: Json[]; redis: Json[] };
  /** Medians, in bytes per lock or waiter. */
  lockdRssPerLock: number;
  lockdRssPerWaiter: number;
  redisUsedPerLock: number;
  redisRssPerLock: number;
}

/** Fills `locks` locks with the handshake and measures the server before and after. */
export async function fillMeasured(
  bench: Bench,
  what: string,
  kind: Kind,
  server: ServerProcess,
  measure: () => Promise<Json>,
): Promise<Json> {
  let before: Json = {}, after: Json = {};
  const result = await bench.run(what, [
    "fill",
    "--proto",
    kind,
    "--port",
    server.port,
    "--conns",
    4,
    "--depth",
    100,
    "--count",
    bench.options.locks,
    "--lease-ms",
    3_600_000,
    "--prefix",
    "lock:",
    "--handshake",
  ], async (line, control) => {
    if (line === "baseline") {
      await sleep(500);
      before = await measure();
      await control.go();
    } else if (line.startsWith("filled")) {
      await sleep(1000);
      after = await measure();
      await control.end();
    }
  });
  return { ...result, before, after };
}

export async function scenarioMemory(bench: Bench): Promise<MemoryFigure> {
  const { locks, waiters } = bench.options;
  const runs: MemoryFigure["runs"] = { lockd: [], lockdWaiters: [], redis: [] };
  for (let i = 0; i < bench.options.heavyRuns; i++) {
    for (const kind of bench.kinds) {
      const what = `scenario 3, memory, ${int(locks)} locks, ${kind}, run ${i + 1}`;
      const result = await bench.withServer(
        kind,
        what,
        (s) =>
          fillMeasured(
            bench,
            what,
            kind,
            s,
            async () =>
              kind === "lockd" ? { rss: rssBytes(s.pid) } : {
                rss: rssBytes(s.pid),
                used_memory: await redisInfo(s.port, "memory", "used_memory"),
              },
          ),
      );
      const before = result.before as Record<string, number>;
      const after = result.after as Record<string, number>;
      const perLock = kind === "lockd"
        ? (after.rss - before.rss) / locks
        : (after.used_memory - before.used_memory) / locks;
      runs[kind].push({ ...result, bytes_per_lock: perLock });
      progress(`${what}: ${num(perLock)} bytes per lock`);
    }
    const what = `scenario 3, memory, ${int(waiters)} waiters, lockd, run ${i + 1}`;
    const conns = 100;
    const result = await bench.withServer("lockd", what, async (s) => {
      let before = 0, after = 0;
      const r = await bench.run(what, [
        "waiters",
        "--proto",
        "lockd",
        "--port",
        s.port,
        "--conns",
        conns,
        "--count",
        Math.ceil(waiters / conns),
        "--prefix",
        "wait:",
      ], async (line, control) => {
        if (line === "baseline") {
          await sleep(500);
          before = rssBytes(s.pid);
          await control.go();
        } else if (line === "queued") {
          await sleep(1000);
          after = rssBytes(s.pid);
          await control.end();
        }
      });
      const queued = Number(r.waiters);
      return {
        ...r,
        rss_before: before,
        rss_after: after,
        bytes_per_waiter: (after - before) / queued,
      };
    });
    runs.lockdWaiters.push(result);
    progress(`${what}: ${num(Number(result.bytes_per_waiter))} bytes per waiter`);
  }
  const pick = (rs: Json[], f: (r: Json) => number) => median(rs.map(f));
  return {
    locks,
    waiters,
    runs,
    lockdRssPerLock: pick(runs.lockd, (r) => Number(r.bytes_per_lock)),
    lockdRssPerWaiter: pick(runs.lockdWaiters, (r) => Number(r.bytes_per_waiter)),
    redisUsedPerLock: pick(runs.redis, (r) => Number(r.bytes_per_lock)),
    redisRssPerLock: pick(runs.redis, (r) => {
      const b = r.before as Record<string, number>, a = r.after as Record<string, number>;
      return (a.rss - b.rss) / locks;
    }),
  };
}
