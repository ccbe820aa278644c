/**
 * `deno task bench`: lockd side by side with Redis used as a lock (the Redlock recipe), on
 * this machine, driven by the C load generator in `bench/loadgen.c` (issue #6).
 *
 * Every run starts fresh servers; runs alternate lockd, Redis, lockd, Redis, ...; each
 * figure is the median of the runs. Scenarios:
 *
 * 1. uncontended acquire+release pairs on distinct keys (1, 16, 64 connections; 1 and 32
 *    requests in flight per connection); the unpipelined ones also against the Deno floor
 *    (`bench/floor_server.ts`: what a Deno server pays per request without any lock logic);
 * 2. contention: 64 clients on one key;
 * 3. memory per held lock and per queued waiter;
 * 4. lease precision with 1,000,000 leases expiring, and idle CPU while they are held;
 * 5. a 2-node cluster: throughput with a standby, failover and graceful handoff times.
 *
 * Writes `bench/results/latest.md` and `latest.json` (a `--quick` or partial run writes
 * `quick.md` and `quick.json` instead). Run with `--help` for the options.
 *
 * @module
 */

import { parseArgs } from "node:util";
import {
  commandOutput,
  cpuPercent,
  freePorts,
  redisInfo,
  rssBytes,
  runLoadgen,
  type ServerProcess,
  sleep,
  startFloor,
  startLockd,
  startRedis,
  ticksPerSecond,
} from "./_procs.ts";
import { int, median, num, quantile, ratio } from "./_stats.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const HERE = new URL(".", import.meta.url).pathname;

const HELP = `Usage: deno task bench [options]

  --quick               a short run: 1 run per figure, 1 s measurements, 100,000 locks,
                        10,000 waiters, 3 failovers (writes bench/results/quick.*)
  --runs N              runs per throughput figure (default 5)
  --heavy-runs N        runs per memory and lease figure (default 3)
  --duration S          measured seconds per throughput run (default 3)
  --warmup S            unmeasured seconds before each throughput run (default 1)
  --locks N             held locks for memory, leases and idle CPU (default 1000000)
  --waiters N           queued waiters for memory (default 100000; a multiple of 100)
  --lease S             lease of the expiry scenario (default 30; must outlast the fill)
  --failovers N         runs of each failover measurement (default 10)
  --redis-retry-us N    Redis contention: retry a refused SET NX after N µs (default 1000)
  --no-redis            lockd only, even if redis-server is on the PATH
  --only LIST           scenarios to run, e.g. 1,2 (default all: 1,2,3,4,5)
  --help                this text
`;

interface Options {
  quick: boolean;
  runs: number;
  heavyRuns: number;
  duration: number;
  warmup: number;
  locks: number;
  waiters: number;
  lease: number;
  failovers: number;
  redisRetryUs: number;
  redis: boolean;
  only: Set<number>;
  partial: boolean;
}

function parseOptions(args: string[]): Options | undefined {
  const { values } = parseArgs({
    args,
    options: {
      quick: { type: "boolean", default: false },
      runs: { type: "string" },
      "heavy-runs": { type: "string" },
      duration: { type: "string" },
      warmup: { type: "string" },
      locks: { type: "string" },
      waiters: { type: "string" },
      lease: { type: "string" },
      failovers: { type: "string" },
      "redis-retry-us": { type: "string" },
      "no-redis": { type: "boolean", default: false },
      only: { type: "string" },
      help: { type: "boolean", default: false },
    },
  });
  if (values.help) {
    console.log(HELP);
    return undefined;
  }
  const quick = values.quick;
  const number = (value: string | undefined, fallback: number, name: string) => {
    if (value === undefined) return fallback;
    const n = Number(value);
    if (!Number.isFinite(n) || n < 0) throw new Error(`--${name} must be a number, not "${value}"`);
    return n;
  };
  const only = new Set(
    (values.only ?? "1,2,3,4,5").split(",").map((s) => Number(s.trim())).filter((n) => n > 0),
  );
  const options: Options = {
    quick,
    runs: Math.max(1, number(values.runs, quick ? 1 : 5, "runs")),
    heavyRuns: Math.max(1, number(values["heavy-runs"], quick ? 1 : 3, "heavy-runs")),
    duration: number(values.duration, quick ? 1 : 3, "duration"),
    warmup: number(values.warmup, quick ? 0.5 : 1, "warmup"),
    locks: number(values.locks, quick ? 100_000 : 1_000_000, "locks"),
    waiters: number(values.waiters, quick ? 10_000 : 100_000, "waiters"),
    lease: number(values.lease, quick ? 8 : 30, "lease"),
    failovers: Math.max(1, number(values.failovers, quick ? 3 : 10, "failovers")),
    redisRetryUs: number(values["redis-retry-us"], 1000, "redis-retry-us"),
    redis: !values["no-redis"],
    only,
    partial: false,
  };
  options.partial = quick || values.only !== undefined;
  return options;
}

type Kind = "lockd" | "redis";
/** What the pairs scenario can drive: the two servers compared, and the Deno floor. */
type Server = Kind | "floor";
type Json = Record<string, unknown>;

/** Everything a scenario needs: options, the load generator, scratch space, the findings. */
class Bench {
  readonly anomalies: string[] = [];
  #seq = 0;

  constructor(
    readonly options: Options,
    readonly loadgen: string,
    readonly tmp: string,
    readonly kinds: Kind[],
    readonly ticks: number,
  ) {}

  /** A fresh scratch directory. */
  dir(name: string): string {
    const path = `${this.tmp}/${name}-${++this.#seq}`;
    Deno.mkdirSync(path);
    return path;
  }

  /** Starts a fresh server of `kind`, runs `body`, stops it, and notes any misbehaviour. */
  async withServer<T>(kind: Kind, what: string, body: (s: ServerProcess) => Promise<T>) {
    const server = kind === "lockd"
      ? await startLockd({ dataDir: this.dir("lockd") })
      : await startRedis({ dir: this.dir("redis") });
    try {
      return await body(server);
    } finally {
      await this.stop(server, what);
    }
  }

  /** Stops `server` and notes a crash or a failed shutdown. */
  async stop(server: ServerProcess, what: string, expectRunning = true): Promise<void> {
    const early = server.exitCode();
    if (expectRunning && early !== undefined) {
      this.note(`${what}: ${server.name} exited by itself (code ${early})`, server.log());
      return;
    }
    const code = await server.stop();
    if (code !== 0 && server.name.startsWith("lockd")) {
      this.note(`${what}: ${server.name} exited with code ${code} after SIGTERM`, server.log());
    }
  }

  /** Runs the load generator; notes errors, lost replies and dropped connections. */
  async run(
    what: string,
    args: (string | number)[],
    onLine?: Parameters<typeof runLoadgen>[2],
  ): Promise<Json> {
    const result = await runLoadgen(this.loadgen, args.map(String), onLine);
    const errors = Number(result.errors ?? 0), lost = Number(result.lost ?? 0);
    const closed = Number(result.closed ?? 0);
    if (errors > 0 || lost > 0 || closed > 0) {
      this.note(
        `${what}: ${errors} unexpected replies, ${lost} requests without reply, ` +
          `${closed} connections closed by the server`,
        (result.error_samples as string[]).join("\n"),
      );
    }
    return result;
  }

  note(message: string, detail = ""): void {
    const text = detail.trim() === "" ? message : `${message}\n    ${detail.trim().slice(-600)}`;
    this.anomalies.push(text);
    console.error(`!! ${text}`);
  }
}

function progress(message: string): void {
  console.error(message);
}

// ------------------------------------------------------------------ 1. uncontended pairs

const PAIR_CONFIGS = [[1, 1], [16, 1], [64, 1], [1, 32], [16, 32], [64, 32]] as const;

interface PairsMedian {
  pairsPerS: number;
  p50: number;
  p99: number;
  p999: number;
}

interface PairsFigure {
  conns: number;
  depth: number;
  runs: Record<Kind, Json[]> & { floor?: Json[] };
  /** `floor`: the Deno floor (`bench/floor_server.ts`), measured for the unpipelined runs. */
  median: Record<Kind, PairsMedian> & { floor?: PairsMedian };
}

function pairsMedian(runs: Json[]): PairsMedian {
  const pick = (field: string) => median(runs.map((r) => Number(r[field])));
  return {
    pairsPerS: pick("pairs_per_s"),
    p50: pick("p50_us"),
    p99: pick("p99_us"),
    p999: pick("p999_us"),
  };
}

/** Extra warm-up of the first run on a fresh server: lockd's JIT compiler settles first. */
const FIRST_WARMUP_S = 2;

/**
 * Starts fresh servers of each kind in `kinds`, then alternates runs on them (lockd, Redis,
 * lockd, Redis, ...), `bench.options.runs` of each; the first run on a server warms up
 * longer. The result has a (possibly empty) list for lockd and Redis, and one for the floor
 * if it was among `kinds`.
 */
async function alternate(
  bench: Bench,
  label: string,
  kinds: Server[],
  start: (kind: Server) => Promise<ServerProcess[]>,
  runOne: (kind: Server, server: ServerProcess, warmup: number, what: string) => Promise<Json>,
): Promise<Record<Kind, Json[]> & { floor?: Json[] }> {
  const runs: Record<Kind, Json[]> & { floor?: Json[] } = { lockd: [], redis: [] };
  if (kinds.includes("floor")) runs.floor = [];
  const servers: Record<Server, ServerProcess[]> = { lockd: [], redis: [], floor: [] };
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

function pairsRuns(
  bench: Bench,
  label: string,
  conns: number,
  depth: number,
  kinds: Server[],
  start: (kind: Server) => Promise<ServerProcess[]>,
): Promise<Record<Kind, Json[]> & { floor?: Json[] }> {
  return alternate(
    bench,
    `${label} ${conns}×${depth}`,
    kinds,
    start,
    async (kind, server, warmup, what) => {
      const result = await bench.run(what, [
        "pairs",
        "--proto",
        kind === "redis" ? "redis" : "lockd", // the floor answers lockd's protocol
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

async function startSingle(bench: Bench, kind: Server): Promise<ServerProcess[]> {
  return [
    kind === "lockd"
      ? await startLockd({ dataDir: bench.dir("lockd") })
      : kind === "redis"
      ? await startRedis({ dir: bench.dir("redis") })
      : await startFloor(),
  ];
}

async function scenarioPairs(bench: Bench): Promise<PairsFigure[]> {
  const figures: PairsFigure[] = [];
  for (const [conns, depth] of PAIR_CONFIGS) {
    // Unpipelined, each request costs the server a read and a write: the Deno floor shows
    // what those cost a Deno server that does nothing else.
    const kinds: Server[] = depth === 1 ? [...bench.kinds, "floor"] : bench.kinds;
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
    figures.push({ conns, depth, runs, median });
  }
  return figures;
}

// ------------------------------------------------------------------ 2. contention

interface ContentionFigure {
  clients: number;
  redisRetryUs: number;
  runs: Record<Kind, Json[]>;
  median: Record<
    Kind,
    { grantsPerS: number; waitP50: number; waitP99: number; min: number; max: number; cov: number }
  >;
}

async function scenarioContention(bench: Bench): Promise<ContentionFigure> {
  const clients = 64;
  const label = "scenario 2, contention";
  const start = (kind: Server) => startSingle(bench, kind);
  const runs = await alternate(
    bench,
    label,
    bench.kinds,
    start,
    async (kind, server, warmup, what) => {
      const result = await bench.run(what, [
        "contend",
        "--proto",
        kind,
        "--port",
        server.port,
        "--conns",
        clients,
        "--warmup",
        warmup,
        "--duration",
        bench.options.duration,
        "--retry-us",
        bench.options.redisRetryUs,
        "--prefix",
        "bench:",
      ]);
      progress(
        `${what}: ${int(Number(result.handoffs_per_s))} grants/s, wait p99 ${
          num(Number(result.wait_p99_us) / 1000)
        } ms, grants per client ${result.grants_min}–${result.grants_max}`,
      );
      return result;
    },
  );
  const summary = (rs: Json[]) => {
    const pick = (field: string) => median(rs.map((r) => Number(r[field])));
    return {
      grantsPerS: pick("handoffs_per_s"),
      waitP50: pick("wait_p50_us") / 1000,
      waitP99: pick("wait_p99_us") / 1000,
      min: pick("grants_min"),
      max: pick("grants_max"),
      cov: pick("grants_cov"),
    };
  };
  return {
    clients,
    redisRetryUs: bench.options.redisRetryUs,
    runs,
    median: { lockd: summary(runs.lockd), redis: summary(runs.redis) },
  };
}

// ------------------------------------------------------------------ 3. memory

interface MemoryFigure {
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
async function fillMeasured(
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

async function scenarioMemory(bench: Bench): Promise<MemoryFigure> {
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

// ------------------------------------------------------------------ 4. leases

interface LeaseFigure {
  locks: number;
  leaseS: number;
  samples: number;
  runs: Record<Kind, Json[]>;
  /**
   * Medians over runs of each run's quantiles, in ms: [from the holder's reply (low), from
   * its request (high)].
   */
  lateP50: [number, number];
  lateP99: [number, number];
  lateMax: [number, number];
  /** The sampled holders' acquire round trips (ms): how far apart the two bounds can be. */
  holderRttP50: number;
  holderRttP99: number;
  idleCpu: Record<Kind, number>;
  fillPerS: Record<Kind, number>;
}

/** Sampled leases of the expiry scenario (at most a tenth of the locks). */
const LEASE_SAMPLES = 1000;
/** Pause between the last grant of the fill and the first sampled lease (server idle). */
const LEASE_SETTLE_MS = 200;

async function scenarioLeases(bench: Bench): Promise<LeaseFigure> {
  const { locks, lease } = bench.options;
  const samples = Math.max(1, Math.min(LEASE_SAMPLES, Math.floor(locks / 10)));
  const cpuWindowMs = 3000;
  const runs: Record<Kind, Json[]> = { lockd: [], redis: [] };
  for (let i = 0; i < bench.options.heavyRuns; i++) {
    for (const kind of bench.kinds) {
      const what = `scenario 4, leases, ${kind}, run ${i + 1}`;
      const result = await bench.withServer(kind, what, async (s): Promise<Json> => {
        let cpu = NaN, fillS = NaN;
        const args: (string | number)[] = [
          "fill",
          "--proto",
          kind,
          "--port",
          s.port,
          "--conns",
          4,
          "--depth",
          100,
          "--count",
          locks,
          "--lease-ms",
          lease * 1000,
          "--prefix",
          "lease:",
        ];
        if (kind === "lockd") args.push("--samples", samples, "--settle-ms", LEASE_SETTLE_MS);
        const r = await bench.run(what, args, async (line) => {
          if (!line.startsWith("loaded") && !line.startsWith("filled")) return;
          fillS = Number(line.split(" ")[1]);
          if (fillS + 1 + cpuWindowMs / 1000 > lease - 1) {
            bench.note(
              `${what}: filling took ${fillS.toFixed(1)} s, too close to the ${lease} s lease ` +
                "for an idle CPU measurement (raise --lease)",
            );
            return;
          }
          await sleep(1000);
          cpu = await cpuPercent(s.pid, cpuWindowMs, bench.ticks);
        });
        return { ...r, idle_cpu_percent: cpu, fill_s_reported: fillS };
      });
      runs[kind].push(result);
      const late = kind === "lockd"
        ? `, lateness p99 ${num(Number(result.late_p99_ms))}–${
          num(Number(result.late_from_send_p99_ms))
        } ms (holder round trip p99 ${num(Number(result.holder_rtt_p99_ms))} ms)`
        : "";
      progress(`${what}: idle CPU ${num(Number(result.idle_cpu_percent))} %${late}`);
    }
  }
  const pick = (kind: Kind, field: string) => median(runs[kind].map((r) => Number(r[field])));
  return {
    locks,
    leaseS: lease,
    samples,
    runs,
    lateP50: [pick("lockd", "late_p50_ms"), pick("lockd", "late_from_send_p50_ms")],
    lateP99: [pick("lockd", "late_p99_ms"), pick("lockd", "late_from_send_p99_ms")],
    lateMax: [pick("lockd", "late_max_ms"), pick("lockd", "late_from_send_max_ms")],
    holderRttP50: pick("lockd", "holder_rtt_p50_ms"),
    holderRttP99: pick("lockd", "holder_rtt_p99_ms"),
    idleCpu: { lockd: pick("lockd", "idle_cpu_percent"), redis: pick("redis", "idle_cpu_percent") },
    fillPerS: { lockd: pick("lockd", "fill_per_s"), redis: pick("redis", "fill_per_s") },
  };
}

// ------------------------------------------------------------------ 5. cluster

interface ClusterFigure {
  pairs: PairsFigure;
  failover: { runs: Json[]; p50: number; p99: number; max: number; failed: number };
  handoff: {
    runs: Json[];
    gapP50: number;
    gapP99: number;
    gapMax: number;
    toGrantP50: number;
    errorsAfter: number;
    failed: number;
  };
}

/** Starts a 2-node lockd cluster; resolves with [active, standby]. */
async function startCluster(bench: Bench): Promise<ServerProcess[]> {
  const ports = freePorts(2);
  const peers = ports.map((p) => `127.0.0.1:${p}`);
  const nodes = await Promise.all(
    ports.map((port, i) =>
      startLockd({
        dataDir: bench.dir("node"),
        port,
        peers,
        name: i === 0 ? "lockd node 1" : "lockd node 2",
      })
    ),
  );
  const active = nodes.find((n) => n.role === "active");
  const standby = nodes.find((n) => n.role === "standby");
  if (active === undefined || standby === undefined) {
    for (const n of nodes) await n.stop();
    throw new Error(`cluster did not settle: roles ${nodes.map((n) => n.role).join(", ")}`);
  }
  // The standby asks for a snapshot once it follows the active: give it a few heartbeats.
  await sleep(500);
  return [active, standby];
}

async function startReplicated(bench: Bench): Promise<ServerProcess[]> {
  const master = await startRedis({ dir: bench.dir("redis"), name: "redis master" });
  try {
    const replica = await startRedis({
      dir: bench.dir("redis"),
      replicaOf: master.port,
      name: "redis replica",
    });
    return [master, replica];
  } catch (error) {
    await master.stop();
    throw error;
  }
}

async function probeRuns(bench: Bench, signal: "SIGKILL" | "SIGTERM"): Promise<Json[]> {
  const runs: Json[] = [];
  for (let i = 0; i < bench.options.failovers; i++) {
    const how = signal === "SIGKILL" ? "failover (kill -9)" : "handoff (SIGTERM)";
    const what = `scenario 5, ${how}, run ${i + 1}`;
    const [active, standby] = await startCluster(bench);
    try {
      const result = await bench.run(what, [
        "probe",
        "--proto",
        "lockd",
        "--port",
        active.port,
        "--port-b",
        standby.port,
        "--pid",
        active.pid,
        "--signal",
        signal === "SIGKILL" ? 9 : 15,
        "--before",
        0.3,
        "--timeout",
        10,
        "--prefix",
        "probe:",
      ]);
      const code = await Promise.race([active.exited, sleep(10_000).then(() => undefined)]);
      if (signal === "SIGTERM" && code !== 0) {
        bench.note(`${what}: the old active exited with ${code ?? "nothing within 10 s"}`);
      }
      if (Number(result.signal_to_grant_ms) < 0) {
        bench.note(`${what}: no grant from the standby within 10 s`, standby.log());
      }
      runs.push({ ...result, old_active_exit: code ?? null });
      progress(
        `${what}: first grant on the new active ${
          num(Number(result.signal_to_grant_ms))
        } ms after the signal, gap ${num(Number(result.gap_ms))} ms`,
      );
    } finally {
      await active.stop();
      await bench.stop(standby, what);
    }
  }
  return runs;
}

async function scenarioCluster(bench: Bench): Promise<ClusterFigure> {
  const runs = await pairsRuns(
    bench,
    "scenario 5, pairs with a standby",
    64,
    32,
    bench.kinds,
    (kind) => kind === "lockd" ? startCluster(bench) : startReplicated(bench),
  );
  const pairs: PairsFigure = {
    conns: 64,
    depth: 32,
    runs,
    median: { lockd: pairsMedian(runs.lockd), redis: pairsMedian(runs.redis) },
  };
  const ok = (rs: Json[], field: string) =>
    rs.map((r) => Number(r[field])).filter((v) => Number.isFinite(v) && v >= 0);
  const killed = await probeRuns(bench, "SIGKILL");
  const failoverTimes = ok(killed, "signal_to_grant_ms");
  const stopped = await probeRuns(bench, "SIGTERM");
  const gaps = ok(stopped, "gap_ms");
  return {
    pairs,
    failover: {
      runs: killed,
      p50: quantile(failoverTimes, 0.5),
      p99: quantile(failoverTimes, 0.99),
      max: quantile(failoverTimes, 1),
      failed: killed.length - failoverTimes.length,
    },
    handoff: {
      runs: stopped,
      gapP50: quantile(gaps, 0.5),
      gapP99: quantile(gaps, 0.99),
      gapMax: quantile(gaps, 1),
      toGrantP50: quantile(ok(stopped, "signal_to_grant_ms"), 0.5),
      errorsAfter: stopped.reduce((n, r) => n + Number(r.errors_after_signal), 0),
      failed: stopped.length - gaps.length,
    },
  };
}

// ------------------------------------------------------------------ report

interface Results {
  pairs?: PairsFigure[];
  contention?: ContentionFigure;
  memory?: MemoryFigure;
  leases?: LeaseFigure;
  cluster?: ClusterFigure;
}

interface Target {
  target: string;
  measured: string;
  met: boolean | undefined;
  status: string;
}

/** A "higher is better" ratio target: lockd/Redis at least `goal`. */
function atLeast(name: string, lockd: number, redis: number, goal: number): Target {
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
function atMost(name: string, value: number, limit: number, unit: string, shown: string): Target {
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

function targets(results: Results): Target[] {
  const list: Target[] = [];
  const pair = (c: number, d: number) =>
    results.pairs?.find((p) => p.conns === c && p.depth === d)?.median;
  const p6432 = pair(64, 32), p16 = pair(16, 1), p1 = pair(1, 1);
  list.push(atLeast(
    "64×32 pipelined pairs/s ≥ 1.2× Redis",
    p6432?.lockd.pairsPerS ?? NaN,
    p6432?.redis.pairsPerS ?? NaN,
    1.2,
  ));
  list.push(atLeast(
    "16 connections unpipelined pairs/s ≥ 0.95× Redis",
    p16?.lockd.pairsPerS ?? NaN,
    p16?.redis.pairsPerS ?? NaN,
    0.95,
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

function cell(...values: string[]): string {
  return values.join(" / ");
}

function table(results: Results): string[] {
  const rows: string[][] = [];
  const row = (
    scenario: string,
    metric: string,
    lockd: string,
    redis: string,
    r = "",
    floor = "",
  ) => rows.push([scenario, metric, lockd, redis, r, floor]);
  for (const p of results.pairs ?? []) {
    const l = p.median.lockd, r = p.median.redis, f = p.median.floor;
    const name = `1. pairs, ${p.conns} conn × ${p.depth} in flight`;
    row(
      name,
      "pairs/s",
      int(l.pairsPerS),
      int(r.pairsPerS),
      ratio(l.pairsPerS, r.pairsPerS),
      f ? `${int(f.pairsPerS)} (${ratio(f.pairsPerS, r.pairsPerS)} Redis)` : "",
    );
    row(
      name,
      "pair latency p50 / p99 / p99.9 (µs)",
      cell(num(l.p50), num(l.p99), num(l.p999)),
      cell(num(r.p50), num(r.p99), num(r.p999)),
      cell(ratio(l.p50, r.p50), ratio(l.p99, r.p99), ratio(l.p999, r.p999)),
      f ? cell(num(f.p50), num(f.p99), num(f.p999)) : "",
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
  const header = ["scenario", "metric", "lockd", "Redis", "lockd/Redis", "Deno floor"];
  // The Deno floor column is there when the unpipelined pairs were measured.
  if (rows.every((r) => r[5] === "")) {
    header.pop();
    for (const r of rows) r.pop();
  }
  return [
    `| ${header.join(" | ")} |`,
    `| ${header.map(() => "---").join(" | ")} |`,
    ...rows.map((r) => `| ${r.join(" | ")} |`),
  ];
}

function markdown(
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
    "to receiving the release's reply. The unpipelined pair runs also drive the Deno floor " +
    "(`bench/floor_server.ts`, last column), in turn with the other two: a Deno line server " +
    "that answers each acquire and release at once, without any lock logic, with lockd's I/O " +
    "pattern (16 KiB reads, one write per read, Nagle off). It is what a Deno server pays per " +
    "request on this machine before doing any work; a reference, not part of the targets.",
    "",
    ...table(results),
    "",
    "## Targets (issue #6)",
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

async function machineInfo(): Promise<Json> {
  const cpuinfo = await Deno.readTextFile("/proc/cpuinfo").catch(() => "");
  const redis = await commandOutput("redis-server", ["--version"]);
  const head = await commandOutput("git", ["-C", ROOT, "rev-parse", "--short", "HEAD"]);
  // Only changes that alter what is measured: the server, the client code it uses, the config.
  const dirty = await commandOutput("git", [
    "-C",
    ROOT,
    "status",
    "--porcelain",
    "--",
    "server",
    "client",
    "mod.ts",
    "deno.json",
  ]);
  return {
    date: new Date().toISOString(),
    nproc: navigator.hardwareConcurrency,
    cpu: /^model name\s*:\s*(.*)$/m.exec(cpuinfo)?.[1] ?? "unknown CPU",
    memory_bytes: Deno.systemMemoryInfo().total,
    kernel: Deno.osRelease(),
    deno: Deno.version.deno,
    v8: Deno.version.v8,
    redis: redis === undefined ? null : /v=(\S+)/.exec(redis)?.[1] ?? redis,
    cc: (await commandOutput("cc", ["--version"]))?.split("\n")[0] ?? null,
    git: head === undefined
      ? "unknown"
      : `${head}${dirty ? " with uncommitted changes to the server or client" : ""}`,
    // Other work on the machine skews every figure: the 1-minute load average before starting.
    loadavg_at_start: Number((await Deno.readTextFile("/proc/loadavg")).split(" ")[0]),
  };
}

async function buildLoadgen(tmp: string): Promise<string> {
  const binary = `${tmp}/loadgen`;
  const out = await new Deno.Command("cc", {
    args: ["-O2", "-Wall", "-o", binary, `${HERE}loadgen.c`, "-lm"],
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!out.success) {
    throw new Error(`cc failed to build bench/loadgen.c:\n${new TextDecoder().decode(out.stderr)}`);
  }
  return binary;
}

async function main(args: string[]): Promise<number> {
  const options = parseOptions(args);
  if (options === undefined) return 0;
  const redisThere = (await commandOutput("redis-server", ["--version"])) !== undefined;
  if (options.redis && !redisThere) {
    console.error("redis-server is not on the PATH: measuring lockd alone");
    options.redis = false;
  }
  const kinds: Kind[] = options.redis ? ["lockd", "redis"] : ["lockd"];
  const tmp = await Deno.makeTempDir({ prefix: "lockd-bench-" });
  const started = performance.now();
  try {
    const bench = new Bench(options, await buildLoadgen(tmp), tmp, kinds, await ticksPerSecond());
    const machine = await machineInfo();
    const results: Results = {};
    // A scenario that fails (a server crashed, say) is reported; the others still run.
    const attempt = async <T>(n: number, scenario: (bench: Bench) => Promise<T>) => {
      if (!options.only.has(n)) return undefined;
      try {
        return await scenario(bench);
      } catch (error) {
        bench.note(`scenario ${n} failed: ${error instanceof Error ? error.message : error}`);
        return undefined;
      }
    };
    results.pairs = await attempt(1, scenarioPairs);
    results.contention = await attempt(2, scenarioContention);
    results.memory = await attempt(3, scenarioMemory);
    results.leases = await attempt(4, scenarioLeases);
    results.cluster = await attempt(5, scenarioCluster);
    const command = `deno task bench ${args.join(" ")}`.trim();
    const report = markdown(results, machine, options, command, bench.anomalies);
    const name = options.partial ? "quick" : "latest";
    const dir = `${HERE}results`;
    await Deno.mkdir(dir, { recursive: true });
    const json = {
      machine,
      command,
      options: { ...options, only: [...options.only] },
      elapsed_s: Math.round((performance.now() - started) / 1000),
      targets: targets(results),
      anomalies: bench.anomalies,
      results,
    };
    await Deno.writeTextFile(`${dir}/${name}.md`, report);
    await Deno.writeTextFile(`${dir}/${name}.json`, JSON.stringify(json, null, 2) + "\n");
    // Keep the committed results as `deno fmt` writes them.
    await new Deno.Command(Deno.execPath(), {
      args: ["fmt", "--quiet", `${dir}/${name}.md`, `${dir}/${name}.json`],
      cwd: ROOT,
    }).output();
    console.log(await Deno.readTextFile(`${dir}/${name}.md`));
    console.error(`written: bench/results/${name}.md and ${name}.json (${json.elapsed_s} s)`);
    return 0;
  } finally {
    await Deno.remove(tmp, { recursive: true }).catch(() => {});
  }
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args));
}
