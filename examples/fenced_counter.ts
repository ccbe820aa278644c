/**
 * A real job for lockd: several worker processes share one counter file. Each worker takes
 * the lock, reads the counter, adds one and writes it back with its fencing token. The
 * file's guard refuses a write whose token is older than the last one written, so a worker
 * that was paused past its lease (here: SIGSTOP) cannot overwrite newer work when it wakes.
 *
 * Start a server, then run:
 *
 * ```sh
 * deno run -A server/main.ts &
 * deno run -A examples/fenced_counter.ts --workers 4 --increments 25 --pause
 * ```
 *
 * Exits 0 when the final count is exact (and, with `--pause`, the paused worker's late write
 * was refused), 1 otherwise.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { LockClient } from "../mod.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** What the counter file holds. */
interface Counter {
  value: number;
  /** Fencing token of the last accepted write, as a decimal string (u64). */
  token: string;
}

/**
 * The resource-side fence (docs/cluster.md, "Consistency, stated plainly"): read-check-write under the file system's own lock (the
 * storage's atomicity, as a database row lock would be), refusing a write whose token is
 * older than the last token written (the same token again is the same holder).
 */
async function guardedWrite(path: string, token: bigint, value: number): Promise<Counter> {
  using guard = await Deno.open(`${path}.guard`, { write: true, create: true });
  await guard.lock(true);
  try {
    const current = await readCounter(path);
    if (token < BigInt(current.token)) {
      throw new StaleTokenError(token, BigInt(current.token));
    }
    const next: Counter = { value, token: String(token) };
    await Deno.writeTextFile(`${path}.tmp`, JSON.stringify(next));
    await Deno.rename(`${path}.tmp`, path);
    return next;
  } finally {
    await guard.unlock();
  }
}

class StaleTokenError extends Error {
  constructor(readonly token: bigint, readonly last: bigint) {
    super(`write with token ${token} refused: token ${last} was already written`);
  }
}

async function readCounter(path: string): Promise<Counter> {
  try {
    return JSON.parse(await Deno.readTextFile(path));
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return { value: 0, token: "0" };
    throw error;
  }
}

function report(event: Record<string, unknown>): void {
  Deno.stdout.writeSync(encoder.encode(JSON.stringify(event) + "\n"));
}

/** One worker process: `increments` accepted increments, retrying refused ones. */
async function worker(options: {
  server: string;
  file: string;
  id: number;
  increments: number;
  lease: number;
  stall: boolean;
}): Promise<void> {
  const client = new LockClient(options.server);
  let done = 0;
  let stalled = false;
  try {
    while (done < options.increments) {
      const lock = await client.acquire("fenced-counter", { lease: options.lease, wait: 60 });
      try {
        const { value } = await readCounter(options.file);
        if (options.stall && !stalled) {
          stalled = true;
          // Tell the coordinator we hold the lock, and give it time to SIGSTOP us here:
          // between reading and writing, the worst moment to be paused.
          report({ worker: options.id, event: "holding", token: String(lock.token) });
          await new Promise((resolve) => setTimeout(resolve, 300));
        }
        try {
          await guardedWrite(options.file, lock.token, value + 1);
          done++;
        } catch (error) {
          if (!(error instanceof StaleTokenError)) throw error;
          report({
            worker: options.id,
            event: "refused",
            token: String(error.token),
            last: String(error.last),
          });
        }
      } finally {
        await lock.release();
      }
    }
    report({ worker: options.id, event: "done", increments: done });
  } finally {
    await client.close();
  }
}

async function coordinator(options: {
  server: string;
  workers: number;
  increments: number;
  lease: number;
  pause: boolean;
}): Promise<number> {
  const dir = await Deno.makeTempDir({ prefix: "fenced-counter-" });
  const file = `${dir}/counter.json`;
  const self = new URL(import.meta.url).pathname;
  console.log(
    `${options.workers} workers × ${options.increments} increments on ${file}, ` +
      `lease ${options.lease} s${options.pause ? ", worker 1 paused past its lease" : ""}`,
  );
  const children = Array.from(
    { length: options.workers },
    (_, i) =>
      new Deno.Command(Deno.execPath(), {
        args: [
          "run",
          "-A",
          self,
          "--worker",
          String(i + 1),
          "--server",
          options.server,
          "--file",
          file,
          "--increments",
          String(options.increments),
          "--lease",
          String(options.lease),
          ...(options.pause && i === 0 ? ["--stall"] : []),
        ],
        stdout: "piped",
        stderr: "inherit",
      }).spawn(),
  );
  let refused = 0;
  const outputs = children.map(async (child) => {
    let pending = "";
    for await (const chunk of child.stdout) {
      pending += decoder.decode(chunk, { stream: true });
      let nl;
      while ((nl = pending.indexOf("\n")) >= 0) {
        const event = JSON.parse(pending.slice(0, nl));
        pending = pending.slice(nl + 1);
        if (event.event === "holding") {
          const pauseMs = Math.ceil(options.lease * 1000) + 1000;
          child.kill("SIGSTOP");
          console.log(
            `worker ${event.worker} holds token ${event.token}: SIGSTOP for ${pauseMs} ms ` +
              `(its lease runs out meanwhile)`,
          );
          setTimeout(() => child.kill("SIGCONT"), pauseMs);
        } else if (event.event === "refused") {
          refused++;
          console.log(
            `worker ${event.worker}: late write with token ${event.token} REFUSED by the fence ` +
              `(token ${event.last} was already written)`,
          );
        } else if (event.event === "done") {
          console.log(`worker ${event.worker}: ${event.increments} increments accepted`);
        }
      }
    }
    return (await child.status).code;
  });
  const codes = await Promise.all(outputs);
  const final = await readCounter(file);
  await Deno.remove(dir, { recursive: true });
  const expected = options.workers * options.increments;
  const exact = final.value === expected;
  console.log(`final counter: ${final.value} (expected ${expected}) ${exact ? "exact" : "WRONG"}`);
  if (options.pause) console.log(`stale writes refused: ${refused}`);
  const ok = codes.every((c) => c === 0) && exact && (!options.pause || refused > 0);
  return ok ? 0 : 1;
}

const USAGE = `Usage: deno run -A examples/fenced_counter.ts [options]

  --server HOST:PORT   the lockd node (default 127.0.0.1:7321)
  --workers N          worker processes (default 4)
  --increments N       increments per worker (default 25)
  --lease SECONDS      each worker's lease (default 1)
  --pause              pause worker 1 (SIGSTOP) past its lease while it holds the lock
  --help               this text`;

if (import.meta.main) {
  let values;
  try {
    ({ values } = parseArgs({
      args: Deno.args,
      options: {
        server: { type: "string", default: "127.0.0.1:7321" },
        workers: { type: "string", default: "4" },
        increments: { type: "string", default: "25" },
        lease: { type: "string", default: "1" },
        pause: { type: "boolean", default: false },
        worker: { type: "string" },
        file: { type: "string" },
        stall: { type: "boolean", default: false },
        help: { type: "boolean", short: "h", default: false },
      },
    }));
  } catch (error) {
    console.error(`fenced_counter: ${error instanceof Error ? error.message : error}\n\n${USAGE}`);
    Deno.exit(2);
  }
  if (values.help) {
    console.log(USAGE);
    Deno.exit(0);
  }
  if (values.worker !== undefined) {
    await worker({
      server: values.server,
      file: values.file!,
      id: Number(values.worker),
      increments: Number(values.increments),
      lease: Number(values.lease),
      stall: values.stall,
    });
  } else {
    Deno.exit(
      await coordinator({
        server: values.server,
        workers: Number(values.workers),
        increments: Number(values.increments),
        lease: Number(values.lease),
        pause: values.pause,
      }),
    );
  }
}
