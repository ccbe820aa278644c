/**
 * Scenario 1: uncontended acquire+release pairs on distinct keys, lockd against Redis and the
 * Deno floor.
 *
 * @module
 */

import { Bench, type Json, type Kind, progress, type Server } from "./_bench.ts";
import { type ServerProcess, startFloor, startLockd, startRedis } from "./_procs.ts";
import { int, median, num } from "./_stats.ts";

export const PAIR_CONFIGS = [[1, 1], [16, 1], [64, 1], [1, 32], [16, 32], [64, 32]] as const;

export interface PairsMedian {
  pairsPerS: number;
  p50: number;
  p99: number;
  p999: number;
}

export interface PairsFigure {
  conns: number;
  depth: number;
  runs: Record<Kind, Json[]> & Extra<Json[]>;
  /**
   * `portable`: lockd on the runtime's sockets (`--io portable`); `floor`: the Deno floor
   * (`bench/floor_server.ts`). Both measured for the unpipelined runs.
   */
  median: Record<Kind, PairsMedian> & Extra<PairsMedian>;
}

/** The servers measured beside lockd and Redis in some runs. */
type Extra<T> = { portable?: T; floor?: T };

export function pairsMedian(runs: Json[]): PairsMedian {
  const pick = (field: string) => median(runs.map((r) => Number(r[field])));
  return {
    pairsPerS: pick("pairs_per_s"),
    p50: pick("p50_us"),
    p99: pick("p99_us"),
    p999: pick("p999_us"),
  };
}

/** Extra warm-up of the first run on a fresh server: lockd's JIT compiler settles first. */
export const FIRST_WARMUP_S = 2;

/**
 * Starts fresh servers of each kind in `kinds`, then alternates runs on them (lockd, Redis,
 * lockd, Redis, ...), `bench.options.runs` of each; the first run on a server warms up
 * longer. The result has a (possibly empty) list for lockd and Redis, and one for the floor
 * if it was among `kinds`.
 */
export async function alternate(
  bench: Bench,
  label: string,
  kinds: Server[],
  start: (kind: Server) => Promise<ServerProcess[]>,
  runOne: (kind: Server, server: ServerProcess, warmup: number, what: string) => Promise<Json>,
): Promise<Record<Kind, Json[]> & Extra<Json[]>> {
  const runs: Record<Kind, Json[]> & Extra<Json[]> = { lockd: [], redis: [] };
  if (kinds.includes("floor")) runs.floor = [];
  if (kinds.includes("portable")) runs.portable = [];
  const servers: Record<Server, ServerProcess[]> = {
    lockd: [],
    redis: [],
    portable: [],
    floor: [],
  };
  try {
    for (const kind of kinds) servers[kind] = await start(kind);
    for (let i = 0; i < bench.options.runs; i++) {
      for (const kind of kinds) {
        const what = `${label}, ${kind}, run ${i + 1}`;
        const gone = servers[kind].find((s) => s.exitCode() !== undefined);
        if (gone) throw new Error(`${gone.name} exited (code ${gone.exitCode()})\n${gone.log()}`);
        const warmup = bench.options.warmup + (i === 0 ? FIRST_WARMUP_S : 0);
        runs[kind]!.push(await runOne(kind, servers[kind][0], warmup, what));
      }
    }
  } finally {
    for (const kind of kinds) for (const s of servers[kind]) await bench.stop(s, label);
  }
  return runs;
}

export function pairsRuns(
  bench: Bench,
  label: string,
  conns: number,
  depth: number,
  kinds: Server[],
  start: (kind: Server) => Promise<ServerProcess[]>,
  // The floor answers lockd's protocol.
  protoOf: (kind: Server) => "lockd" | "redis" = (kind) => kind === "redis" ? "redis" : "lockd",
): Promise<Record<Kind, Json[]> & Extra<Json[]>> {
  return alternate(
    bench,
    `${label} ${conns}×${depth}`,
    kinds,
    start,
    async (kind, server, warmup, what) => {
      const result = await bench.run(what, [
        "pairs",
        "--proto",
        protoOf(kind),
        "--port",
        server.port,
        "--conns",
        conns,
        "--depth",
        depth,
        "--warmup",
        warmup,
        "--duration",
        bench.options.duration,
        "--prefix",
        "bench:",
      ]);
      progress(
        `${what}: ${int(Number(result.pairs_per_s))} pairs/s, p50 ${
          num(Number(result.p50_us))
        } µs, p99 ${num(Number(result.p99_us))} µs`,
      );
      return result;
    },
  );
}

export async function startSingle(bench: Bench, kind: Server): Promise<ServerProcess[]> {
  return [
    kind === "lockd"
      ? await startLockd({ dataDir: bench.dir("lockd") })
      : kind === "portable"
      ? await startLockd({
        dataDir: bench.dir("lockd-portable"),
        args: ["--io", "portable"],
        name: "lockd --io portable",
      })
      : kind === "redis"
      ? await startRedis({ dir: bench.dir("redis") })
      : await startFloor(),
  ];
}

export async function scenarioPairs(bench: Bench): Promise<PairsFigure[]> {
  const figures: PairsFigure[] = [];
  for (const [conns, depth] of PAIR_CONFIGS) {
    // Unpipelined, each request costs the server a read and a write: the Deno floor shows
    // what those cost a Deno server that does nothing else on the runtime's sockets, and
    // lockd on those sockets what its epoll transport changes.
    const kinds: Server[] = depth === 1 && bench.kinds.includes("lockd")
      ? [...bench.kinds, "portable", "floor"]
      : bench.kinds;
    const runs = await pairsRuns(
      bench,
      "scenario 1, pairs",
      conns,
      depth,
      kinds,
      (kind) => startSingle(bench, kind),
    );
    const median: PairsFigure["median"] = {
      lockd: pairsMedian(runs.lockd),
      redis: pairsMedian(runs.redis),
    };
    if (runs.floor) median.floor = pairsMedian(runs.floor);
    if (runs.portable) median.portable = pairsMedian(runs.portable);
    figures.push({ conns, depth, runs, median });
  }
  return figures;
}
