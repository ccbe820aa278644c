/**
 * A chaos client worker, one process: a `LockClient` on every node's address, looping over
 * acquire, a few fenced writes with the lock's token, release, on a small set of keys, and
 * reporting every step to the harness's checker server (chaos/resource.ts) as it happens.
 * It stops on SIGTERM or SIGINT (the current acquire runs to its end, a hold is cut short
 * and released, and so are the holds it walked away from), when the checker connection
 * closes, after `--max-seconds`, or after 100,000 acquires.
 *
 * `deno run -A chaos/worker.ts --id N --seed S --checker HOST:PORT --nodes A,B,C --keys K`
 *
 * @module
 */

import { parseArgs } from "node:util";
import { type Lock, LockClient, LockTimeoutError, LockUnavailableError } from "../mod.ts";
import { readLines } from "../tests/_net.ts";
import { mulberry32 } from "../tests/_prng.ts";
import { type AcquireOutcome, now, type WorkerEvent } from "./history.ts";
import type { WriteReply } from "./resource.ts";

/** Most acquires one worker makes. */
const MAX_OPS = 100_000;
/** Longest wait for the resource's answer to a write. */
const WRITE_TIMEOUT_MS = 5000;
/** Pause after an acquire that failed at once (no node reachable), so the loop does not spin. */
const BACKOFF_MS = 100;
/** Share of holds that walk away without releasing (the lease frees the key). */
const ABANDON = 0.03;
/** Share of holds cut short after their first write. */
const EARLY = 0.03;

/** `Omit` applied to each member of a union. */
type OmitEach<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;
/** An event as the worker loop gives it; the reporter adds the worker and the time. */
type Event = OmitEach<WorkerEvent, "worker" | "t">;

/** The connection to the checker server: events out, writes answered. */
class Reporter {
  readonly closed: Promise<void>;
  #conn: Deno.TcpConn;
  #worker: number;
  #encoder = new TextEncoder();
  #writing = Promise.resolve();
  #pending = new Map<number, (reply: WriteReply | null) => void>();
  #nextId = 1;

  constructor(conn: Deno.TcpConn, worker: number) {
    this.#conn = conn;
    this.#worker = worker;
    this.closed = readLines(conn, (line) => {
      const reply = JSON.parse(line) as WriteReply;
      this.#pending.get(reply.id)?.(reply);
    }).then(() => {
      for (const resolve of this.#pending.values()) resolve(null);
    });
    this.#send({ type: "hello", worker });
  }

  event(event: Event): void {
    this.#send({ ...event, worker: this.#worker, t: now() });
  }

  /** Writes `key` with `token`; `null` if the resource did not answer in time. */
  write(op: number, key: string, token: bigint): Promise<WriteReply | null> {
    const id = this.#nextId++;
    const { promise, resolve } = Promise.withResolvers<WriteReply | null>();
    const timer = setTimeout(() => resolve(null), WRITE_TIMEOUT_MS);
    this.#pending.set(id, resolve);
    this.#send({
      type: "write",
      id,
      worker: this.#worker,
      op,
      key,
      token: String(token),
      t: now(),
    });
    return promise.finally(() => {
      clearTimeout(timer);
      this.#pending.delete(id);
    });
  }

  async close(): Promise<void> {
    await this.#writing;
    try {
      this.#conn.close();
    } catch {
      // Closed by the harness.
    }
    await this.closed;
  }

  #send(message: Record<string, unknown>): void {
    const data = this.#encoder.encode(JSON.stringify(message) + "\n");
    this.#writing = this.#writing.then(async () => {
      let offset = 0;
      while (offset < data.length) offset += await this.#conn.write(data.subarray(offset));
    }).catch(() => {}); // The harness went away: closed resolves and the worker stops.
  }
}

/** Resolves after `ms`, or at once when `signal` fires. */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done);
  });
}

function outcomeOf(error: unknown): AcquireOutcome {
  if (error instanceof LockTimeoutError) return "timeout";
  if (error instanceof LockUnavailableError) return "unavailable";
  return "other";
}

/** Seconds with two decimals, from `min` to `max`. */
function seconds(r: number, min: number, max: number): number {
  return Math.round((min + (max - min) * r) * 100) / 100;
}

/** Releases `lock` of acquire `op`, reporting the release sent and how it ended. */
async function release(reporter: Reporter, op: number, lock: Lock): Promise<void> {
  reporter.event({ type: "release", op, key: lock.key, token: String(lock.token) });
  try {
    await lock.release();
    reporter.event({ type: "released", op, ok: true });
  } catch (error) {
    reporter.event({ type: "released", op, ok: false, error: String(error) });
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      id: { type: "string" },
      seed: { type: "string" },
      checker: { type: "string" },
      nodes: { type: "string" },
      keys: { type: "string", default: "4" },
      "max-seconds": { type: "string", default: "600" },
    },
  });
  const worker = Number(values.id);
  const random = mulberry32(Number(values.seed));
  const keys = Array.from({ length: Number(values.keys) }, (_, i) => `chaos-${i}`);
  const [hostname, port] = values.checker!.split(":");
  const reporter = new Reporter(await Deno.connect({ hostname, port: Number(port) }), worker);
  // With no connection up, the client allows one connection attempt past an acquire's wait
  // (docs/client.md): 1 s, not the default 3 s, keeps that within the past-wait check.
  // Odd workers bind their locks to their session: its grace must hold them through faults.
  const client = new LockClient(values.nodes!.split(","), {
    connectTimeoutMs: 1000,
    sessionLocks: worker % 2 === 1,
  });
  const stop = new AbortController();
  const onStop = () => stop.abort();
  Deno.addSignalListener("SIGTERM", onStop);
  Deno.addSignalListener("SIGINT", onStop);
  reporter.closed.then(onStop);
  const deadline = performance.now() + Number(values["max-seconds"]) * 1000;
  const abandoned: { op: number; lock: Lock }[] = [];

  for (let op = 1; op <= MAX_OPS && !stop.signal.aborted && performance.now() < deadline; op++) {
    // A fixed number of draws per round, whatever happens, so a seed replays the same choices.
    const key = keys[Math.floor(random() * keys.length)];
    const lease = seconds(random(), 1, 3);
    const wait = seconds(random(), 0.5, 3);
    const writes = 1 + Math.floor(random() * 3);
    const style = random();
    const holds = [random(), random(), random()].map((r) => 50 + Math.round(450 * r));

    reporter.event({ type: "acquire", op, key, lease, wait });
    let lock: Lock;
    try {
      lock = await client.acquire(key, { lease, wait, autoExtend: false });
    } catch (error) {
      const outcome = outcomeOf(error);
      const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
      reporter.event({ type: "acquired", op, outcome, error: text });
      if (outcome !== "timeout") await pause(BACKOFF_MS, stop.signal);
      continue;
    }
    const token = String(lock.token);
    reporter.event({ type: "grant", op, key, token });
    reporter.event({ type: "acquired", op, outcome: "grant" });

    for (let i = 0; i < writes && !stop.signal.aborted; i++) {
      const reply = await reporter.write(op, key, lock.token);
      if (reply === null || !reply.accepted) break; // Stale: someone newer holds the key.
      if (style >= ABANDON && style < ABANDON + EARLY) break; // Leave the hold early.
      await pause(holds[i], stop.signal);
    }
    if (style < ABANDON && !stop.signal.aborted) {
      reporter.event({ type: "abandon", op, key, token });
      abandoned.push({ op, lock });
      continue;
    }
    await release(reporter, op, lock);
  }

  // close() would release the abandoned locks whose lease still runs, unrecorded: release
  // them here, so the history knows when they ended (an expired one is answered N).
  for (const { op, lock } of abandoned) await release(reporter, op, lock);
  await client.close();
  Deno.removeSignalListener("SIGTERM", onStop);
  Deno.removeSignalListener("SIGINT", onStop);
  await reporter.close();
}

if (import.meta.main) await main();
