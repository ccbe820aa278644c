/**
 * `deno task chaos`: a seeded, time-bounded fault-injection run of a real lockd cluster with
 * client worker processes and a fencing checker (docs/chaos.md). Prints the seed, the faults
 * as they happen and the checker's table; exits 0 when every must-hold check holds, 1 when
 * one failed (with the seed, the replay command and where the full history was written), 2
 * on a bad command line.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { formatTable } from "./checker.ts";
import type { Replication } from "./history.ts";
import { type ChaosOptions, type ChaosResult, runChaos } from "./run.ts";

const HELP = `Usage: deno task chaos [options]

Runs a lockd cluster of real processes, client workers and a fenced resource, injects
seeded faults (kill -9, SIGSTOP, graceful restarts, partitions) and checks what must hold.

  --duration S          seconds of faults (default 60)
  --seed N              PRNG seed, 0 to 4294967295 (default: random; always printed)
  --nodes N             cluster size, 2 to 9 (default 3)
  --replication MODE    async or sync, passed to every node (default async)
  --workers N           client worker processes, 4 to 8 (default 4)
  --keys N              keys the workers contend for, 1 to 100 (default 4)
  --failover-timeout S  the nodes' --failover-timeout, above 0.2 (default 1; heartbeat 0.1)
  --history FILE        where to write the full history (default on failure: a temp file)
  --json                print a machine-readable summary on stdout (the table goes to stderr)
  -h, --help            this text

Exit status: 0 every must-hold check holds, 1 one failed, 2 bad command line.`;

/** A command-line mistake (exit 2). */
class UsageError extends Error {
  override name = "UsageError";
}

/** The parsed command line. */
interface Command {
  options: ChaosOptions;
  history?: string;
  json: boolean;
  help: boolean;
}

function integer(text: string, flag: string, min: number, max: number): number {
  if (!/^[0-9]+$/.test(text) || Number(text) < min || Number(text) > max) {
    throw new UsageError(`--${flag} must be a whole number from ${min} to ${max}, got "${text}"`);
  }
  return Number(text);
}

function seconds(text: string, flag: string, above: number, max: number): number {
  const value = Number(text);
  if (!/^[0-9]+(\.[0-9]+)?$/.test(text) || !(value > above) || value > max) {
    throw new UsageError(`--${flag} must be a number of seconds above ${above}, got "${text}"`);
  }
  return value;
}

function parse(args: string[]): Command {
  let values;
  try {
    ({ values } = parseArgs({
      args,
      strict: true,
      allowPositionals: false,
      options: {
        duration: { type: "string", default: "60" },
        seed: { type: "string" },
        nodes: { type: "string", default: "3" },
        replication: { type: "string", default: "async" },
        workers: { type: "string", default: "4" },
        keys: { type: "string", default: "4" },
        "failover-timeout": { type: "string", default: "1" },
        history: { type: "string" },
        json: { type: "boolean", default: false },
        help: { type: "boolean", short: "h", default: false },
      },
    }));
  } catch (error) {
    throw new UsageError((error as Error).message.split("\n")[0]);
  }
  if (values.replication !== "async" && values.replication !== "sync") {
    throw new UsageError(`--replication must be async or sync, got "${values.replication}"`);
  }
  const seed = values.seed === undefined
    ? crypto.getRandomValues(new Uint32Array(1))[0]
    : integer(values.seed, "seed", 0, 0xffffffff);
  return {
    options: {
      duration: seconds(values.duration, "duration", 0, 86_400),
      seed,
      nodes: integer(values.nodes, "nodes", 2, 9),
      replication: values.replication as Replication,
      workers: integer(values.workers, "workers", 4, 8),
      keys: integer(values.keys, "keys", 1, 100),
      failoverTimeout: seconds(values["failover-timeout"], "failover-timeout", 0.2, 60),
      heartbeat: 0.1,
    },
    history: values.history,
    json: values.json,
    help: values.help,
  };
}

const ROOT = new URL("../", import.meta.url);

/**
 * A short SHA-256 of the server's and the client's sources as they are on disk: which code a
 * run measured (the working tree may differ from any commit).
 */
async function sourcesDigest(): Promise<string> {
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const entry of Deno.readDirSync(new URL(dir, ROOT))) {
      const path = `${dir}/${entry.name}`;
      if (entry.isDirectory) walk(path);
      else if (entry.name.endsWith(".ts")) files.push(path);
    }
  };
  walk("server");
  walk("client");
  const encoder = new TextEncoder();
  const parts = files.sort().map((f) => `${f}\0${Deno.readTextFileSync(new URL(f, ROOT))}\0`);
  const digest = await crypto.subtle.digest("SHA-256", encoder.encode(parts.join("")));
  return [...new Uint8Array(digest)].slice(0, 6).map((b) => b.toString(16).padStart(2, "0"))
    .join("");
}

/** The command that replays a run. */
export function replayCommand(o: ChaosOptions): string {
  return `deno task chaos --duration ${o.duration} --seed ${o.seed} --nodes ${o.nodes} ` +
    `--replication ${o.replication} --workers ${o.workers} --keys ${o.keys} ` +
    `--failover-timeout ${o.failoverTimeout}`;
}

async function writeHistory(
  path: string | undefined,
  result: ChaosResult,
  replay: string,
  sources: string,
): Promise<string> {
  const file = path ?? await Deno.makeTempFile({ prefix: "lockd-chaos-history-", suffix: ".json" });
  const { history, report, convergenceTrace, nodeLogs, workerLogs } = result;
  await Deno.writeTextFile(
    file,
    JSON.stringify(
      { replay, sources, report, history, convergenceTrace, nodeLogs, workerLogs },
      null,
      1,
    ) + "\n",
  );
  return file;
}

async function main(args: string[]): Promise<number> {
  let command: Command;
  try {
    command = parse(args);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    console.error(`chaos: ${error.message}\nTry 'deno task chaos --help' for the options.`);
    return 2;
  }
  if (command.help) {
    console.log(HELP);
    return 0;
  }
  const { options } = command;
  const replay = replayCommand(options);
  const sources = await sourcesDigest();
  console.error(
    `chaos: seed ${options.seed}; ${options.nodes} nodes, ${options.replication} replication, ` +
      `${options.workers} workers, ${options.keys} keys, ${options.duration} s ` +
      `(server and client sources ${sources})`,
  );
  const interrupt = new AbortController();
  const onSignal = () => interrupt.abort();
  Deno.addSignalListener("SIGINT", onSignal);
  Deno.addSignalListener("SIGTERM", onSignal);
  let result: ChaosResult;
  try {
    result = await runChaos(options, {
      log: (line) => console.error(`chaos: ${line}`),
      signal: interrupt.signal,
    });
  } catch (error) {
    console.error(`chaos: the run could not be carried out: ${(error as Error).message}`);
    console.error(`chaos: seed ${options.seed}; replay: ${replay}`);
    return 1;
  } finally {
    Deno.removeSignalListener("SIGINT", onSignal);
    Deno.removeSignalListener("SIGTERM", onSignal);
  }

  const { report, history } = result;
  const table = formatTable(report) +
    (report.details.length > 0 ? `\n\n${report.details.join("\n")}` : "");
  const historyPath = !report.ok || command.history !== undefined
    ? await writeHistory(command.history, result, replay, sources)
    : null;
  if (command.json) {
    console.error(table);
    const summary = {
      ok: report.ok,
      seed: options.seed,
      replay,
      sources,
      options,
      replication: history.replication,
      syncApplies: history.syncApplies,
      checks: report.rows,
      details: report.details,
      faults: history.faults.map((f) => ({
        ...f,
        start: f.start - history.startedAt,
        end: f.end - history.startedAt,
      })),
      history: historyPath,
    };
    console.log(JSON.stringify(summary, null, 1));
  } else {
    console.log(table);
  }
  if (report.ok) {
    console.error(`chaos: every must-hold check held (seed ${options.seed})`);
    if (historyPath !== null) console.error(`chaos: history: ${historyPath}`);
    return 0;
  }
  const failed = report.rows.filter((r) => r.status === "FAILED").map((r) => r.label);
  console.error(`chaos: FAILED: ${failed.join("; ")}`);
  console.error(`chaos: seed ${options.seed}; replay: ${replay} (sources ${sources})`);
  console.error(`chaos: history: ${historyPath}`);
  return 1;
}

if (import.meta.main) Deno.exit(await main(Deno.args));
