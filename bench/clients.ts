/**
 * `deno task bench:clients`: the end-to-end benchmark of issue 14. The same workloads through
 * lockd's `LockClient` (under Deno, Node.js and Bun), `redlock` on `ioredis`,
 * `redis-semaphore`'s `Mutex` on `ioredis` (both under Deno and Node.js) and the `etcd3`
 * client's lock against a single-node etcd (Deno and Node.js):
 *
 * - (a) one task in a loop, acquire → release: cycles/s, latency p50/p99;
 * - (b) 64 tasks in one process, each on its own key: cycles/s, p50/p99;
 * - (c) 64 tasks on one key, each acquire waiting up to 10 s: grants/s, wait p50/p99, grants
 *   per task, how often the same task got the key twice in a row;
 * - (d) 4 processes × 16 tasks on own keys: total cycles/s;
 *
 * (a) and (b) also with client and server pinned (`taskset`) to one CPU and to two. Every
 * run starts a fresh server; runs alternate the clients; figures are medians; client and
 * server CPU time per cycle come from `/proc`. Writes `bench/results/clients.md`,
 * `clients.json` and three SVG charts (`--quick` and partial runs: `clients_quick.*`).
 * Run with `--help` for the options.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { fairnessSvg, latencySvg, throughputSvg } from "./_e2e_charts.ts";
import { aggregate, type Context, markdown, targets } from "./_e2e_report.ts";
import {
  type Cell,
  cells as makeCells,
  launcher,
  measure,
  type Measurement,
  type Placement,
  type RunSettings,
  type Variant,
  VARIANTS,
  type WorkloadName,
} from "./_e2e_run.ts";
import { etcdVersion, hasTaskset, redisVersion } from "./_e2e_servers.ts";
import { sources } from "./_e2e_snapshot.ts";
import { gitState, ticksPerSecond } from "./_procs.ts";
import { int, num, pct } from "./_stats.ts";

const ROOT = new URL("..", import.meta.url).pathname;
const RESULTS = `${ROOT}bench/results`;
/** The npm packages the adapters import (keep in step with `bench/_e2e_*.ts`). */
const NPM = ["ioredis@5.9.3", "redlock@5.0.0-beta.2", "redis-semaphore@5.8.0", "etcd3@1.1.2"];

const HELP = `Usage: deno task bench:clients [options]

  --quick               1 run of 1 s after 0.5 s of warm-up per figure (about 3 minutes;
                        writes bench/results/clients_quick.*)
  --runs N              runs per figure, alternating the clients (default 3)
  --duration S          recorded seconds per run (default 3)
  --warmup S            unrecorded seconds before each window (default 1)
  --only LIST           workloads or cells: a,b,c,d or e.g. b,a/same (default a,b,c,d)
  --placements LIST     placements of (a) and (b): any,same,split (default all three)
  --systems LIST        lockd,lockd-1conn,redlock,semaphore,etcd3 (default all);
                        lockd-1conn is lockd under Deno with connectionsPerAddress 1;
                        lockd-node-net adds lockd under Deno over client/node_tcp.ts
  --runtimes LIST       deno,node,bun (default all that are installed)
  --variants LIST       exact clients, e.g. lockd/deno,redlock/deno (overrides the two above)
  --cpus A,B            CPUs of pinned runs: the server's, the client's (default 0,1)
  --lease S             lease of every lock (default 10)
  --wait S              longest wait of an acquire on one key (default 10)
  --poll-ms N           retry interval of redis-semaphore and etcd3 on one key (default 10)
  --redlock-retry-ms N  redlock's retryDelay and retryJitter (default 200)
  --out NAME            file names in bench/results (default clients; partial runs:
                        clients_quick)
  --help                this text

Any of --quick, --only, --placements, --systems, --runtimes or --variants makes a partial run.
`;

interface Options {
  runs: number;
  duration: number;
  warmup: number;
  cells: Cell[];
  variants: Variant[];
  settings: RunSettings;
  out: string;
}

function list(value: string | undefined): string[] | undefined {
  return value?.split(",").map((s) => s.trim()).filter((s) => s !== "");
}

function parse(args: string[], ticks: number): Options | undefined {
  const { values } = parseArgs({
    args,
    options: {
      quick: { type: "boolean", default: false },
      runs: { type: "string" },
      duration: { type: "string" },
      warmup: { type: "string" },
      only: { type: "string" },
      placements: { type: "string" },
      systems: { type: "string" },
      runtimes: { type: "string" },
      variants: { type: "string" },
      cpus: { type: "string", default: "0,1" },
      lease: { type: "string", default: "10" },
      wait: { type: "string", default: "10" },
      "poll-ms": { type: "string", default: "10" },
      "redlock-retry-ms": { type: "string", default: "200" },
      out: { type: "string" },
      help: { type: "boolean", default: false },
    },
  });
  if (values.help) {
    console.log(HELP);
    return undefined;
  }
  const number = (value: string | undefined, fallback: number, name: string) => {
    if (value === undefined) return fallback;
    const n = Number(value);
    if (!Number.isFinite(n) || n < 0) throw new Error(`--${name} must be a number, not "${value}"`);
    return n;
  };
  const quick = values.quick;
  const only = list(values.only) ?? ["a", "b", "c", "d"];
  const placements = (list(values.placements) ?? ["any", "same", "split"]) as Placement[];
  for (const p of placements) {
    if (!["any", "same", "split"].includes(p)) throw new Error(`unknown placement "${p}"`);
  }
  const workloads = [...new Set(only.map((o) => o.split("/")[0]))] as WorkloadName[];
  for (const w of workloads) {
    if (!["a", "b", "c", "d"].includes(w)) throw new Error(`unknown workload "${w}"`);
  }
  // A cell named with its placement (b/same) is taken whatever --placements says; (c) and (d)
  // have no placements.
  const cells = makeCells(workloads, ["any", "same", "split"]).filter((c) =>
    (c.id.includes("/") && only.includes(c.id)) ||
    (only.includes(c.workload) && (c.workload >= "c" || placements.includes(c.placement)))
  );
  let variants: Variant[];
  const exact = list(values.variants);
  if (exact) {
    variants = exact.map((id) => {
      const v = VARIANTS.find((v) => v.id === id);
      if (!v) {
        throw new Error(`unknown variant "${id}" (known: ${VARIANTS.map((v) => v.id).join(", ")})`);
      }
      return v;
    });
  } else {
    const systems = list(values.systems) ??
      ["lockd", "lockd-1conn", "redlock", "semaphore", "etcd3"];
    const runtimes = list(values.runtimes) ?? ["deno", "node", "bun"];
    variants = VARIANTS.filter((v) =>
      systems.includes(v.id.split("/")[0]) && runtimes.includes(v.runtime)
    );
  }
  const cpus = (list(values.cpus) ?? []).map(Number);
  if (cpus.length !== 2 || cpus.some((c) => !Number.isInteger(c) || c < 0)) {
    throw new Error(`--cpus must be two CPU numbers, not "${values.cpus}"`);
  }
  const partial = quick ||
    [values.only, values.placements, values.systems, values.runtimes, values.variants].some((
      v,
    ) => v !== undefined);
  return {
    runs: Math.max(1, Math.round(number(values.runs, quick ? 1 : 3, "runs"))),
    duration: number(values.duration, quick ? 1 : 3, "duration"),
    warmup: number(values.warmup, quick ? 0.5 : 1, "warmup"),
    cells,
    variants,
    out: values.out ?? (partial ? "clients_quick" : "clients"),
    settings: {
      warmup: number(values.warmup, quick ? 0.5 : 1, "warmup"),
      duration: number(values.duration, quick ? 1 : 3, "duration"),
      leaseMs: number(values.lease, 10, "lease") * 1000,
      waitMs: number(values.wait, 10, "wait") * 1000,
      pollMs: number(values["poll-ms"], 10, "poll-ms"),
      redlockRetryMs: Math.max(1, number(values["redlock-retry-ms"], 200, "redlock-retry-ms")),
      cpus: [cpus[0], cpus[1]],
      ticksPerSecond: ticks,
    },
  };
}

/** Drops what cannot run here (a runtime or server binary missing, no taskset), with a note. */
async function available(options: Options, notes: string[]): Promise<Record<string, string>> {
  const versions: Record<string, string> = {};
  const keep: Variant[] = [];
  const redis = await redisVersion(), etcd = await etcdVersion();
  for (const v of options.variants) {
    const l = await launcher(v.runtime).catch((error) => {
      notes.push(`${v.runtime}: ${error instanceof Error ? error.message : error}`);
      return undefined;
    });
    if (l === undefined) {
      notes.push(`${v.id} left out: ${v.runtime} is not installed`);
      continue;
    }
    const server = v.system === "etcd3" ? etcd : v.system === "lockd" ? "ok" : redis;
    if (server === undefined) {
      notes.push(
        `${v.id} left out: ${v.system === "etcd3" ? "etcd" : "redis-server"} is not on the PATH`,
      );
      continue;
    }
    versions[{ deno: "Deno", node: "Node.js", bun: "Bun" }[v.runtime]] = l.version.replace(
      /^\w+ /,
      "",
    );
    keep.push(v);
  }
  if (keep.some((v) => v.system === "redlock" || v.system === "semaphore")) versions.Redis = redis!;
  if (keep.some((v) => v.system === "etcd3")) versions.etcd = etcd!;
  versions.npm = NPM.join(", ");
  options.variants = keep;
  const pinned = options.cells.filter((c) => c.placement !== "any");
  if (pinned.length > 0 && (!(await hasTaskset()) || navigator.hardwareConcurrency < 2)) {
    notes.push("pinned runs left out: taskset is missing or there are fewer than 2 CPUs");
    options.cells = options.cells.filter((c) => c.placement === "any");
  }
  return versions;
}

async function main(args: string[]): Promise<number> {
  const options = parse(args, await ticksPerSecond());
  if (options === undefined) return 0;
  const started = performance.now();
  // The report is dated when the run began, as `deno task bench`'s is.
  const startedAt = new Date().toISOString();
  const notes: string[] = [];
  // The code measured is fixed here: edits to the checkout from now on do not count.
  const snapshot = await sources();
  const git = await gitState(ROOT);
  const versions = await available(options, notes);
  for (const n of notes) console.error(`!! ${n}`);
  const { cells, variants } = options;
  const total = cells.length * variants.length * options.runs;
  console.error(
    `${total} measurements (${cells.length} workloads × ${variants.length} clients × ` +
      `${options.runs} runs), about ${
        Math.ceil(total * (options.warmup + options.duration + 1.3) / 60)
      } min`,
  );
  const loadavg = () => Number(Deno.readTextFileSync("/proc/loadavg").split(" ")[0]);
  const loadAtStart = loadavg();
  const measurements: Measurement[] = [];
  const failures: { variant: string; cell: string; run: number; error: string }[] = [];
  let done = 0;
  for (const cell of cells) {
    for (let run = 1; run <= options.runs; run++) {
      // Alternate the clients, starting each run one further along.
      const order = variants.map((_, i) => variants[(i + run - 1) % variants.length]);
      for (const v of order) {
        done++;
        const head = `[${done}/${total}] ${cell.id} run ${run}/${options.runs} ${v.id}`;
        try {
          const m = await measure(v, cell, run, options.settings);
          measurements.push(m);
          const lat = cell.sharedKey ? m.acquire : m.cycle;
          console.error(
            `${head}: ${int(m.rate)}/s, p50 ${num(lat.p50)} µs, p99 ${
              num(lat.p99)
            } µs, CPU µs/cycle ` +
              `${num(m.clientCpuPerCycle)} client, ${
                num(m.serverCpuPerCycle)
              } server, load ${m.loadavg}, steal ${pct(m.steal ?? NaN)}` +
              (m.errors > 0 ? `, ${m.errors} errors: ${m.errorSamples[0]}` : ""),
          );
        } catch (error) {
          const message = error instanceof Error ? error.message : String(error);
          failures.push({ variant: v.id, cell: cell.id, run, error: message.slice(0, 2000) });
          console.error(`${head}: FAILED ${message}`);
        }
      }
    }
  }
  const rows = aggregate(variants, cells, measurements, failures);
  const loads = measurements.map((m) => m.loadavg);
  const steals = measurements.flatMap((m) => m.steal === undefined ? [] : [m.steal]);
  const cpuinfo = await Deno.readTextFile("/proc/cpuinfo").catch(() => "");
  const command = `deno task bench:clients ${args.join(" ")}`.trim();
  const ctx: Context = {
    command,
    date: startedAt,
    cpu: /^model name\s*:\s*(.*)$/m.exec(cpuinfo)?.[1] ?? "unknown CPU",
    cores: navigator.hardwareConcurrency,
    kernel: Deno.osRelease(),
    memoryGiB: Deno.systemMemoryInfo().total / 2 ** 30,
    versions: { ...versions, V8: Deno.version.v8 },
    git: `${git} (measured copy: client sources ${snapshot.clientHash}, server ` +
      `sources ${snapshot.serverHash})`,
    loadavgAtStart: loadAtStart,
    loadavgRange: loads.length > 0 ? [Math.min(...loads), Math.max(...loads)] : [NaN, NaN],
    stealRange: steals.length > 0 ? [Math.min(...steals), Math.max(...steals)] : undefined,
    elapsedS: (performance.now() - started) / 1000,
    settings: { ...options.settings, runs: options.runs },
    anomalies: notes,
  };
  const subtitle = `${ctx.date.slice(0, 10)}, ${ctx.cores} cores (${ctx.cpu}), median of ` +
    `${options.runs} run(s) of ${options.duration} s; lockd ${git.split(" ")[0]}, client ` +
    `${snapshot.clientHash}, server ${snapshot.serverHash}; ${command}`;
  const charts = [
    {
      name: `${options.out}_throughput.svg`,
      alt: "Throughput per client and workload",
      svg: throughputSvg(rows, subtitle),
    },
    {
      name: `${options.out}_latency.svg`,
      alt: "Latency p50 and p99 per client and workload",
      svg: latencySvg(rows, subtitle),
    },
  ];
  if (rows.some((r) => r.cell === "c" && r.fairness)) {
    charts.push({
      name: `${options.out}_fairness.svg`,
      alt: "Grants per task on one key",
      svg: fairnessSvg(rows, subtitle),
    });
  }
  await Deno.mkdir(RESULTS, { recursive: true });
  for (const c of charts) await Deno.writeTextFile(`${RESULTS}/${c.name}`, c.svg);
  const md = markdown(rows, variants, cells, ctx, charts);
  const json = {
    context: ctx,
    variants,
    cells,
    targets: targets(rows),
    rows,
    failures,
    measurements,
  };
  await Deno.writeTextFile(`${RESULTS}/${options.out}.md`, md);
  await Deno.writeTextFile(`${RESULTS}/${options.out}.json`, JSON.stringify(json, null, 2) + "\n");
  // As `deno fmt` writes them, so that `deno task check` passes with the results committed.
  await new Deno.Command(Deno.execPath(), {
    args: ["fmt", "--quiet", `${RESULTS}/${options.out}.md`, `${RESULTS}/${options.out}.json`],
    cwd: ROOT,
  }).output();
  console.log(await Deno.readTextFile(`${RESULTS}/${options.out}.md`));
  console.error(
    `written: bench/results/${options.out}.md, .json, ${charts.map((c) => c.name).join(", ")} ` +
      `(${int(ctx.elapsedS)} s)`,
  );
  return failures.length > 0 && measurements.length === 0 ? 1 : 0;
}

if (import.meta.main) Deno.exit(await main(Deno.args));
