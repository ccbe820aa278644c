/**
 * The end-to-end benchmark's report, from its measurements and without I/O: medians per
 * variant and workload, issue 14's client targets, and the markdown page.
 *
 * @module
 */

import type { Fairness } from "./_e2e_stats.ts";
import type { Cell, Measurement, RunSettings, Variant } from "./_e2e_run.ts";
import { int, median, num, pct } from "./_stats.ts";

/** The figures of one variant in one cell: medians of its runs. */
export interface Row {
  variant: string;
  cell: string;
  runs: number;
  failed: string[];
  /** Cycles per second (one key: grants per second). */
  rate: number;
  /** Cycle latency (one key: the wait), µs. */
  p50: number;
  p99: number;
  clientCpuPerCycle: number;
  serverCpuPerCycle: number;
  clientCores: number;
  serverCores: number;
  timeouts: number;
  errors: number;
  /** Each run's rate, in run order. */
  rates: number[];
  /** One key: the fairness of the run with the median rate. */
  fairness?: Fairness & { perTask: number[] };
}

/** What the report says about the machine and the run. */
export interface Context {
  command: string;
  date: string;
  cpu: string;
  cores: number;
  kernel: string;
  memoryGiB: number;
  versions: Record<string, string>;
  git: string;
  loadavgAtStart: number;
  /** Lowest and highest 1-minute load average just before a recorded window. */
  loadavgRange: [number, number];
  /** Lowest and highest share of CPU time stolen by the host during a window (0–1). */
  stealRange?: [number, number];
  elapsedS: number;
  /** The run's settings, and how many runs each figure is the median of. */
  settings: Omit<RunSettings, "ticksPerSecond"> & { runs: number };
  anomalies: string[];
}

const SYSTEM_LABEL: Record<string, string> = {
  lockd: "lockd",
  "lockd-node-net": "lockd (node:net)",
  "lockd-1conn": "lockd (1 connection)",
  redlock: "redlock",
  semaphore: "redis-semaphore",
  etcd3: "etcd3",
};
const RUNTIME_LABEL: Record<string, string> = { deno: "Deno", node: "Node.js", bun: "Bun" };

/** `lockd · Deno`, `redlock · Node.js`. */
export function variantLabel(id: string): string {
  const [system, runtime] = id.split("/");
  return `${SYSTEM_LABEL[system] ?? system} · ${RUNTIME_LABEL[runtime] ?? runtime}`;
}

/** What each cell is, for titles (`short`: for a chart's panel). */
export function cellTitle(id: string, short = false): string {
  const [w, placement] = id.split("/");
  const name = {
    a: "(a) one task",
    b: "(b) 64 tasks, own keys",
    c: "(c) 64 tasks, one key",
    d: "(d) 4 processes × 16 tasks",
  }[w] ?? w;
  if (placement === "same") {
    return short ? `${name}, one CPU` : `${name}, client and server on one CPU`;
  }
  if (placement === "split") {
    return short ? `${name}, two CPUs` : `${name}, client and server on separate CPUs`;
  }
  return name;
}

/** Medians per variant and cell, in the order given. */
export function aggregate(
  variants: Variant[],
  cells: Cell[],
  measurements: Measurement[],
  failures: {
    variant: string;
    cell: string;
    error: string;
  }[],
): Row[] {
  const rows: Row[] = [];
  for (const cell of cells) {
    for (const v of variants) {
      const runs = measurements.filter((m) => m.variant === v.id && m.cell === cell.id);
      const failed = failures.filter((f) => f.variant === v.id && f.cell === cell.id).map((f) =>
        f.error
      );
      if (runs.length === 0 && failed.length === 0) continue;
      const lat = (m: Measurement) => cell.sharedKey ? m.acquire : m.cycle;
      const rates = runs.map((m) => m.rate);
      const middle = [...runs].sort((a, b) => a.rate - b.rate)[Math.floor((runs.length - 1) / 2)];
      rows.push({
        variant: v.id,
        cell: cell.id,
        runs: runs.length,
        failed,
        rate: median(rates),
        p50: median(runs.map((m) => lat(m).p50)),
        p99: median(runs.map((m) => lat(m).p99)),
        clientCpuPerCycle: median(runs.map((m) => m.clientCpuPerCycle)),
        serverCpuPerCycle: median(runs.map((m) => m.serverCpuPerCycle)),
        clientCores: median(runs.map((m) => m.clientCores)),
        serverCores: median(runs.map((m) => m.serverCores)),
        timeouts: runs.reduce((a, m) => a + m.timeouts, 0),
        errors: runs.reduce((a, m) => a + m.errors, 0),
        rates,
        fairness: middle?.fairness,
      });
    }
  }
  return rows;
}

/** One of issue 14's client targets. */
export interface Target {
  target: string;
  measured: string;
  /** `undefined`: not measured in this run. */
  met: boolean | undefined;
}

const REDIS = ["redlock", "semaphore"];

/**
 * Issue 14's targets that this benchmark measures, for each runtime lockd ran in: against
 * redlock in the same runtime, or against the best Redis client in any runtime.
 */
export function targets(rows: Row[]): Target[] {
  const find = (cell: string, variant: string) =>
    rows.find((r) => r.cell === cell && r.variant === variant && r.runs > 0);
  // The best Redis client in any runtime: the bar a user switching from Redis compares with.
  const bestRedis = (cell: string, _runtime: string, key: (r: Row) => number, low = false) => {
    const found = REDIS.flatMap((s) => ["deno", "node"].map((rt) => find(cell, `${s}/${rt}`)))
      .filter((r) => r !== undefined);
    if (found.length === 0) return undefined;
    return found.reduce((a, b) => (low ? key(b) < key(a) : key(b) > key(a)) ? b : a);
  };
  const out: Target[] = [];
  const missing = (target: string) =>
    out.push({ target, measured: "not measured", met: undefined });
  for (const runtime of ["deno", "node"]) {
    const rt = RUNTIME_LABEL[runtime];
    const lockdB = find("b", `lockd/${runtime}`), redlockB = find("b", `redlock/${runtime}`);
    let t = `${rt}, (b) 64 tasks own keys: lockd ≥ 1.5× redlock cycles/s`;
    if (lockdB && redlockB) {
      const r = lockdB.rate / redlockB.rate;
      out.push({
        target: t,
        measured: `${r.toFixed(2)}× (${int(lockdB.rate)} vs ${int(redlockB.rate)})`,
        met: r >= 1.5,
      });
    } else missing(t);
    t = `${rt}, (b): lockd client CPU per cycle ≤ 0.5× redlock + ioredis`;
    if (lockdB && redlockB) {
      const r = lockdB.clientCpuPerCycle / redlockB.clientCpuPerCycle;
      out.push({
        target: t,
        measured: `${r.toFixed(2)}× (${num(lockdB.clientCpuPerCycle)} vs ${
          num(redlockB.clientCpuPerCycle)
        } µs)`,
        met: r <= 0.5,
      });
    } else missing(t);
    const lockdD = find("d", `lockd/${runtime}`), bestD = bestRedis("d", runtime, (r) => r.rate);
    t = `${rt}, (d) 4 processes × 16 tasks: lockd ≥ 1.5× the best Redis client`;
    if (lockdD && bestD) {
      const r = lockdD.rate / bestD.rate;
      out.push({
        target: t,
        measured: `${r.toFixed(2)}× (${int(lockdD.rate)} vs ${int(bestD.rate)}, ${
          variantLabel(bestD.variant)
        })`,
        met: r >= 1.5,
      });
    } else missing(t);
    const lockdA = find("a/same", `lockd/${runtime}`);
    const bestA = bestRedis("a/same", runtime, (r) => r.p50, true);
    t = `${rt}, (a) one task, one CPU: lockd p50 ≤ the best Redis client's`;
    if (lockdA && bestA) {
      out.push({
        target: t,
        measured: `${(lockdA.p50 / bestA.p50).toFixed(2)}× (${num(lockdA.p50)} vs ${
          num(bestA.p50)
        } µs, ${variantLabel(bestA.variant)})`,
        met: lockdA.p50 <= bestA.p50,
      });
    } else missing(t);
    const lockdC = find("c", `lockd/${runtime}`), bestC = bestRedis("c", runtime, (r) => r.rate);
    t = `${rt}, (c) one key: lockd exactly fair and ≥ 2× the best Redis client's grants/s`;
    if (lockdC && bestC && lockdC.fairness) {
      const f = lockdC.fairness;
      const fair = f.max - f.min <= 1 && f.backToBackShare === 0;
      const r = lockdC.rate / bestC.rate;
      out.push({
        target: t,
        measured: `${r.toFixed(2)}× (${int(lockdC.rate)} vs ${int(bestC.rate)}, ${
          variantLabel(bestC.variant)
        }); ${int(f.min)}–${int(f.max)} grants per task, ${pct(f.backToBackShare)} back to back`,
        met: fair && r >= 2,
      });
    } else missing(t);
  }
  return out;
}

function table(header: string[], body: string[][]): string[] {
  return [
    `| ${header.join(" | ")} |`,
    `| ${header.map(() => "---").join(" | ")} |`,
    ...body.map((r) => `| ${r.join(" | ")} |`),
  ];
}

function failedCell(r: Row): string {
  return r.failed.length > 0 ? ` (${r.failed.length} failed)` : "";
}

/** The table of one own-keys cell. */
function ownKeysTable(rows: Row[]): string[] {
  return table(
    [
      "client",
      "cycles/s",
      "cycle p50 / p99 (µs)",
      "client CPU µs/cycle",
      "server CPU µs/cycle",
      "client / server cores",
      "runs (cycles/s)",
    ],
    rows.map((r) => [
      variantLabel(r.variant),
      int(r.rate) + failedCell(r),
      `${num(r.p50)} / ${num(r.p99)}`,
      num(r.clientCpuPerCycle),
      num(r.serverCpuPerCycle),
      `${num(r.clientCores)} / ${num(r.serverCores)}`,
      r.rates.map(int).join(", ") + (r.errors > 0 ? `; ${int(r.errors)} errors` : ""),
    ]),
  );
}

/** The table of the one-key cell. */
function oneKeyTable(rows: Row[]): string[] {
  return table(
    [
      "client",
      "grants/s",
      "wait p50 / p99 (ms)",
      "grants per task min–max (CoV)",
      "back to back",
      "tasks with no grant",
      "timeouts",
      "client / server CPU µs/grant",
      "runs (grants/s)",
    ],
    rows.map((r) => {
      const f = r.fairness;
      return [
        variantLabel(r.variant),
        int(r.rate) + failedCell(r),
        `${num(r.p50 / 1000)} / ${num(r.p99 / 1000)}`,
        f ? `${int(f.min)}–${int(f.max)} (${num(f.cov)})` : "–",
        f ? pct(f.backToBackShare) : "–",
        f ? int(f.starved) : "–",
        int(r.timeouts),
        `${num(r.clientCpuPerCycle)} / ${num(r.serverCpuPerCycle)}`,
        r.rates.map(int).join(", "),
      ];
    }),
  );
}

/** The summary: one line per variant, the headline figure of every workload. */
export function summaryTable(rows: Row[], variants: Variant[]): string[] {
  const get = (cell: string, v: string) => rows.find((r) => r.cell === cell && r.variant === v);
  const body = variants.map((v) => {
    const a1 = get("a/same", v.id), a2 = get("a/split", v.id), b = get("b", v.id);
    const c = get("c", v.id), d = get("d", v.id);
    return [
      variantLabel(v.id),
      `${num(a1?.p50 ?? NaN)} / ${num(a2?.p50 ?? NaN)}`,
      int(b?.rate ?? NaN),
      `${num(b?.clientCpuPerCycle ?? NaN)} / ${num(b?.serverCpuPerCycle ?? NaN)}`,
      int(d?.rate ?? NaN),
      c?.fairness ? `${int(c.rate)} (${int(c.fairness.min)}–${int(c.fairness.max)})` : "–",
    ];
  });
  return table(
    [
      "client",
      "(a) one task p50 µs: one CPU / two",
      "(b) 64 tasks cycles/s",
      "(b) CPU µs/cycle: client / server",
      "(d) 4 × 16 cycles/s",
      "(c) one key grants/s (per task min–max)",
    ],
    body,
  );
}

/** The markdown page. */
export function markdown(
  rows: Row[],
  variants: Variant[],
  cells: Cell[],
  ctx: Context,
  charts: { name: string; alt: string }[],
): string {
  const s = ctx.settings;
  const v = ctx.versions;
  const out = [
    "# End to end: lockd's client against redlock, redis-semaphore and etcd3",
    "",
    `Made by \`${ctx.command}\` on ${ctx.date} in ${int(ctx.elapsedS)} s: ${ctx.cpu}, ` +
    `${ctx.cores} cores shared by servers and clients, ${num(ctx.memoryGiB)} GiB, Linux ` +
    `${ctx.kernel}; ${Object.entries(v).map(([k, x]) => `${k} ${x}`).join(", ")}; lockd at ` +
    `${ctx.git}; load average ${ctx.loadavgAtStart} at the start (before each window: ` +
    `${ctx.loadavgRange[0]}–${ctx.loadavgRange[1]})` +
    (ctx.stealRange === undefined
      ? "."
      : `; CPU time stolen by the host during a window: ${pct(ctx.stealRange[0])}–${
        pct(ctx.stealRange[1])
      } (a virtual machine's neighbours slow every figure).`),
    "",
    `Every figure is the median of ${s.runs} run(s); each run starts a fresh server, runs the ` +
    `clients unrecorded for ${s.warmup} s (warm-up), then records ${s.duration} s. Runs ` +
    "alternate the clients, in an order rotated from run to run. Each client is used as an " +
    "application would use it: lockd's `LockClient` (default two connections), redlock " +
    "5.0.0-beta.2 with one ioredis connection, redis-semaphore's `Mutex` (one per " +
    "acquisition) on one ioredis connection, etcd3's `client.lock(key).acquire()` / " +
    `\`release()\`. Every lock has a ${s.leaseMs / 1000} s lease. A cycle is acquire → ` +
    "release, timed from calling acquire to the release's resolution; throughput counts the " +
    "cycles completed in the window. On one key each acquire waits up to " +
    `${s.waitMs / 1000} s: lockd queues it on the server; Redis and etcd have no queue, so ` +
    `redlock retries every ${s.redlockRetryMs} ± ${s.redlockRetryMs} ms (its defaults; ` +
    `\`retryCount\` ${Math.ceil(s.waitMs / s.redlockRetryMs)}), redis-semaphore every ` +
    `${s.pollMs} ms (its default) and the etcd3 adapter every ${s.pollMs} ms; the wait is ` +
    "from calling acquire to the grant; back to back is the share of grants that went to the " +
    "task that had the previous one. Redis runs without persistence; etcd is one node with " +
    "a fresh data directory on tmpfs. Client and server CPU time is user + system from " +
    "`/proc/<pid>/stat` over the window (all client processes together), per cycle; cores is " +
    `the same over wall time. Pinned runs use \`taskset\`: one CPU is CPU ${s.cpus[0]} for ` +
    `both; separate CPUs are ${s.cpus[0]} for the server and ${s.cpus[1]} for the client.`,
    "",
    "## Summary",
    "",
    ...summaryTable(rows, variants),
    "",
    "## Targets (issue 14)",
    "",
    ...table(
      ["target", "measured", "status"],
      targets(rows).map((t) => [
        t.target,
        t.measured,
        t.met === undefined ? "not run" : t.met ? "met" : "missed",
      ]),
    ),
    "",
  ];
  for (const cell of cells) {
    const cellRows = rows.filter((r) => r.cell === cell.id);
    if (cellRows.length === 0) continue;
    out.push(`## ${cellTitle(cell.id)}`, "");
    out.push(...(cell.sharedKey ? oneKeyTable(cellRows) : ownKeysTable(cellRows)), "");
  }
  if (charts.length > 0) {
    out.push("## Charts", "");
    for (const c of charts) out.push(`![${c.alt}](${c.name})`, "");
  }
  const failures = rows.flatMap((r) => r.failed.map((f) => `${r.variant} in ${r.cell}: ${f}`));
  const errors = rows.filter((r) => r.errors > 0).map((r) =>
    `${r.variant} in ${r.cell}: ${int(r.errors)} errors`
  );
  const anomalies = [...ctx.anomalies, ...failures, ...errors];
  if (anomalies.length > 0) {
    out.push("## Anomalies seen during this run", "");
    for (const a of anomalies) {
      out.push(`- ${a.replaceAll("\n", " ").replaceAll("|", "\\|").slice(0, 400)}`);
    }
    out.push("");
  }
  return out.join("\n");
}
