/**
 * `deno task bench:clients`: `LockClient` itself, measured in each runtime it runs in (issue
 * 15). One scenario, "LockClient, 64 tasks on own keys": 64 concurrent loops through one
 * client (two connections to one node, its default), each acquiring and releasing its own
 * key, cycles per second. Variants: Deno with its own transport (`client/tcp.ts`, the
 * default under Deno), Deno with the `node:net` transport (`client/node_tcp.ts`), Node.js
 * and Bun (both `node:net`, their default). Each run starts a fresh lockd; runs alternate the
 * variants; each figure is the median of the runs. Node and Bun rows are left out when their
 * binaries (see `tests/_runtimes.ts`) are missing.
 *
 * Writes `bench/results/clients.md` and `clients.json`. Run with `--help` for the options.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { findRuntime, runScript, type Runtime } from "../tests/_runtimes.ts";
import { commandOutput, startLockd } from "./_procs.ts";
import { int, median, num } from "./_stats.ts";

const ROOT = new URL("..", import.meta.url);
const WORKER = new URL("bench/client_worker.mjs", ROOT).pathname;
const NODE_TCP = new URL("client/node_tcp.ts", ROOT).href;

const HELP = `Usage: deno task bench:clients [options]

  --runs N        runs per variant, alternating (default 3)
  --duration S    measured seconds per run (default 5)
  --warmup S      unmeasured seconds before each run (default 1)
  --tasks N       concurrent acquire/release loops (default 64)
  --help          this text
`;

/** One row of the table: a runtime and the transport it uses. */
interface Variant {
  label: string;
  runtime: Runtime;
  /** A transport module to use instead of the runtime's default. */
  transport?: string;
}

/** One run's figures. */
interface Run {
  /** Acquire + release cycles per second. */
  rate: number;
  /** The client process's CPU time per cycle (user + system), in µs. */
  cpuPerCycle: number;
}

/** One variant's runs. */
interface Row {
  label: string;
  version: string;
  runs: Run[];
  /** Median cycles/s. */
  median: number;
  /** Median client CPU µs per cycle. */
  cpuPerCycle: number;
}

async function variants(): Promise<Variant[]> {
  const deno = (await findRuntime("deno"))!;
  const out: Variant[] = [
    { label: "Deno, Deno.connect (client/tcp.ts)", runtime: deno },
    { label: "Deno, node:net (client/node_tcp.ts)", runtime: deno, transport: NODE_TCP },
  ];
  for (const name of ["node", "bun"] as const) {
    const runtime = await findRuntime(name);
    if (runtime === undefined) console.error(`${name} not found: its row is left out`);
    else out.push({ label: `${name === "node" ? "Node.js" : "Bun"}, node:net`, runtime });
  }
  return out;
}

/** One run: a fresh lockd, the worker in the variant's runtime, the cycles per second. */
async function runOnce(
  variant: Variant,
  options: { tasks: number; warmup: number; duration: number },
): Promise<Run> {
  const dataDir = await Deno.makeTempDir({ prefix: "lockd-bench-clients-" });
  const server = await startLockd({ dataDir });
  try {
    const run = await runScript(variant.runtime, WORKER, [
      variant.runtime.moduleUrl,
      `127.0.0.1:${server.port}`,
      String(options.tasks),
      String(options.warmup),
      String(options.duration),
      variant.transport ?? "",
    ], { timeoutMs: (options.warmup + options.duration) * 1000 + 30_000 });
    if (run.code !== 0) {
      throw new Error(`${variant.label} exited with ${run.code}:\n${run.stdout}${run.stderr}`);
    }
    const { cycles, seconds, cpuMicros } = JSON.parse(run.stdout.trim().split("\n").at(-1)!);
    return { rate: cycles / seconds, cpuPerCycle: cpuMicros === null ? NaN : cpuMicros / cycles };
  } finally {
    await server.stop();
    await Deno.remove(dataDir, { recursive: true }).catch(() => {});
  }
}

function markdown(rows: Row[], options: { runs: number; tasks: number; duration: number }) {
  const lines = [
    `# LockClient in each runtime`,
    "",
    `"LockClient, ${options.tasks} tasks on own keys": ${options.tasks} concurrent loops through one`,
    `client (two connections to one lockd on 127.0.0.1), each acquiring and releasing its own key;`,
    `cycles (acquire + release) per second, median of ${options.runs} runs of ${options.duration} s,`,
    `alternating the variants, a fresh server per run; and the client process's CPU time per cycle`,
    `(user + system), which the server sharing the machine disturbs less. Made by`,
    `\`deno task bench:clients\`.`,
    "",
    "| runtime and transport | version | cycles/s (median) | client CPU µs/cycle (median) | runs (cycles/s) |",
    "| --- | --- | --- | --- | --- |",
    ...rows.map((r) =>
      `| ${r.label} | ${r.version} | ${int(r.median)} | ${num(r.cpuPerCycle)} | ${
        r.runs.map((run) => int(run.rate)).join(", ")
      } |`
    ),
    "",
  ];
  return lines.join("\n");
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      runs: { type: "string", default: "3" },
      duration: { type: "string", default: "5" },
      warmup: { type: "string", default: "1" },
      tasks: { type: "string", default: "64" },
      help: { type: "boolean", default: false },
    },
  });
  if (values.help) {
    console.log(HELP);
    return;
  }
  const options = {
    runs: Number(values.runs),
    duration: Number(values.duration),
    warmup: Number(values.warmup),
    tasks: Number(values.tasks),
  };
  const all = await variants();
  const runs = new Map<Variant, Run[]>(all.map((v) => [v, []]));
  for (let i = 0; i < options.runs; i++) {
    for (const variant of all) {
      const run = await runOnce(variant, options);
      runs.get(variant)!.push(run);
      console.error(
        `run ${i + 1}/${options.runs} ${variant.label}: ${int(run.rate)} cycles/s, ` +
          `${num(run.cpuPerCycle)} µs CPU/cycle`,
      );
    }
  }
  const rows: Row[] = all.map((v) => ({
    label: v.label,
    version: v.runtime.version,
    runs: runs.get(v)!,
    median: median(runs.get(v)!.map((r) => r.rate)),
    cpuPerCycle: median(runs.get(v)!.map((r) => r.cpuPerCycle)),
  }));
  const cpu = await commandOutput("sh", ["-c", "grep -m1 'model name' /proc/cpuinfo"]);
  const json = {
    date: new Date().toISOString(),
    cpu,
    cores: navigator.hardwareConcurrency,
    options,
    rows,
  };
  const md = markdown(rows, options);
  const mdFile = new URL("bench/results/clients.md", ROOT).pathname;
  await Deno.writeTextFile(mdFile, md);
  // Aligned tables, as `deno fmt --check` (part of `deno task check`) wants them.
  await new Deno.Command(Deno.execPath(), { args: ["fmt", "-q", mdFile] }).output();
  await Deno.writeTextFile(
    new URL("bench/results/clients.json", ROOT),
    JSON.stringify(json, null, 2) + "\n",
  );
  console.log(md);
}

if (import.meta.main) await main();
