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
import { Bench, type Json, type Kind, type Options } from "./_bench.ts";
import { commandOutput, gitState, ticksPerSecond } from "./_procs.ts";
import { markdown, type Results, targets } from "./_report.ts";
import { scenarioCluster } from "./cluster.ts";
import { scenarioConnections } from "./connections.ts";
import { scenarioContention } from "./contention.ts";
import { scenarioLeases } from "./leases.ts";
import { scenarioMemory } from "./memory.ts";
import { scenarioPairs } from "./pairs.ts";

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
  --connections N       idle connections for scenario 6 (default 10000)
  --only LIST           scenarios to run, e.g. 1,2 (default all: 1,2,3,4,5,6)
  --help                this text
`;

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
      connections: { type: "string" },
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
    (values.only ?? "1,2,3,4,5,6").split(",").map((s) => Number(s.trim())).filter((n) => n > 0),
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
    connections: number(values.connections, quick ? 2000 : 10_000, "connections"),
    partial: false,
  };
  options.partial = quick || values.only !== undefined;
  return options;
}

async function machineInfo(): Promise<Json> {
  const cpuinfo = await Deno.readTextFile("/proc/cpuinfo").catch(() => "");
  const redis = await commandOutput("redis-server", ["--version"]);
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
    git: await gitState(ROOT),
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
    results.connections = await attempt(6, (b) => scenarioConnections(b, options.connections));
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
