/**
 * The harness's checker server: a TCP line server on 127.0.0.1 that the workers report to
 * as things happen and that is, at the same time, the fenced resource they write to.
 *
 * Each line is one JSON object. A worker sends `{"type":"hello","worker":N}` first, then its
 * events ({@linkcode WorkerEvent}) and its writes,
 * `{"type":"write","id":I,"worker":N,"op":O,"key":K,"token":"T","t":MS}`, each answered
 * `{"id":I,"accepted":true|false,"last":"T"|null}` by the {@linkcode Fence}.
 *
 * @module
 */

import { readLines } from "../tests/_net.ts";
import { Fence } from "./fence.ts";
import { now, type WorkerEvent, type WriteRecord } from "./history.ts";

/** A write as a worker sends it. */
export interface WriteRequest {
  /** Always `write`. */
  type: "write";
  /** Matches the reply to the request. */
  id: number;
  /** The writing worker. */
  worker: number;
  /** The acquire whose grant the write uses. */
  op: number;
  /** The key. */
  key: string;
  /** The fencing token, decimal. */
  token: string;
  /** When the worker sent it. */
  t: number;
}

/** The reply to a {@linkcode WriteRequest}. */
export interface WriteReply {
  /** The request's id. */
  id: number;
  /** Accepted, or rejected as stale. */
  accepted: boolean;
  /** The last token accepted for the key before this write. */
  last: string | null;
}

const EVENT_TYPES = new Set(["acquire", "grant", "acquired", "release", "released", "abandon"]);

/** Records events and decides writes for every connected worker. */
export class ResourceServer {
  /** Every worker event, in arrival order. */
  readonly events: WorkerEvent[] = [];
  /** Every write, in decision order. */
  readonly writes: WriteRecord[] = [];
  /** Lines that were not understood (a harness bug if any). */
  readonly garbage: string[] = [];
  #fence = new Fence();
  #listener: Deno.TcpListener;
  #conns = new Set<Deno.TcpConn>();
  #handlers = new Set<Promise<void>>();
  #accepting: Promise<void>;
  #hello = new Set<number>();
  #gone = new Set<number>();
  #changed = Promise.withResolvers<void>();

  /** Listens on a free port of 127.0.0.1. */
  constructor() {
    this.#listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    this.#accepting = this.#accept();
  }

  /** `127.0.0.1:<port>`, for the workers' `--checker`. */
  get address(): string {
    return `127.0.0.1:${(this.#listener.addr as Deno.NetAddr).port}`;
  }

  /** Workers that said hello. */
  get connected(): number {
    return this.#hello.size;
  }

  /**
   * Resolves `true` once `count` workers said hello (or, with `closed`, also closed their
   * connection), `false` after `timeoutMs`.
   */
  async waitFor(count: number, options: { closed?: boolean; timeoutMs: number }): Promise<boolean> {
    const until = performance.now() + options.timeoutMs;
    const done = () => (options.closed ? this.#gone : this.#hello).size >= count;
    while (!done()) {
      const left = until - performance.now();
      if (left <= 0) return false;
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        this.#changed.promise,
        new Promise<void>((resolve) => timer = setTimeout(resolve, left)),
      ]);
      clearTimeout(timer);
    }
    return true;
  }

  /** Stops listening, closes every connection and waits for their handlers. */
  async close(): Promise<void> {
    this.#listener.close();
    for (const conn of this.#conns) {
      try {
        conn.close();
      } catch {
        // Already closed.
      }
    }
    await this.#accepting;
    await Promise.all(this.#handlers);
  }

  async #accept(): Promise<void> {
    try {
      for await (const conn of this.#listener) {
        const handler = this.#serve(conn);
        this.#handlers.add(handler);
        handler.finally(() => this.#handlers.delete(handler));
      }
    } catch {
      // Closed.
    }
  }

  #signal(): void {
    this.#changed.resolve();
    this.#changed = Promise.withResolvers<void>();
  }

  async #serve(conn: Deno.TcpConn): Promise<void> {
    this.#conns.add(conn);
    const encoder = new TextEncoder();
    let worker: number | undefined;
    let writing = Promise.resolve();
    const send = (reply: WriteReply) => {
      const data = encoder.encode(JSON.stringify(reply) + "\n");
      writing = writing.then(async () => {
        let offset = 0;
        while (offset < data.length) offset += await conn.write(data.subarray(offset));
      }).catch(() => {}); // The worker went away: nothing to tell it.
    };
    await readLines(conn, (line) => {
      let message: Record<string, unknown>;
      try {
        message = JSON.parse(line);
      } catch {
        this.garbage.push(line);
        return;
      }
      if (message.type === "hello" && typeof message.worker === "number") {
        worker = message.worker;
        this.#hello.add(worker);
        this.#signal();
      } else if (message.type === "write") {
        send(this.#write(message as unknown as WriteRequest));
      } else if (EVENT_TYPES.has(String(message.type))) {
        this.events.push(message as unknown as WorkerEvent);
      } else {
        this.garbage.push(line);
      }
    });
    await writing;
    try {
      conn.close();
    } catch {
      // Already closed.
    }
    this.#conns.delete(conn);
    if (worker !== undefined) this.#gone.add(worker);
    this.#signal();
  }

  #write(request: WriteRequest): WriteReply {
    const token = BigInt(request.token);
    const decision = this.#fence.write(request.key, token, `${request.worker}/${request.op}`);
    const last = decision.last === null ? null : String(decision.last);
    this.writes.push({
      worker: request.worker,
      op: request.op,
      key: request.key,
      token: request.token,
      t: request.t,
      at: now(),
      accepted: decision.accepted,
      last,
    });
    return { id: request.id, accepted: decision.accepted, last };
  }
}
