/**
 * Test helper: a TCP proxy on `127.0.0.1:<free port>` that forwards every connection to a
 * real lockd, records what each client connection sent, and can cut one connection, all of
 * them, or stop accepting new ones, on demand.
 *
 * @module
 */

import { Acceptor } from "./_acceptor.ts";
import { Waiters } from "./_waiters.ts";

/** One proxied client connection. */
export interface ProxiedConnection {
  /** Order of acceptance, from 0. */
  readonly id: number;
  /** Whether both sides are still open. */
  readonly open: boolean;
  /** Complete lines the client sent through this connection so far. */
  readonly sent: readonly string[];
  /** Resolves once the connection is closed (by either side or by a cut). */
  readonly closed: Promise<void>;
  /** Closes both sides at once. */
  cut(): void;
}

class Pair implements ProxiedConnection {
  readonly id: number;
  readonly sent: string[] = [];
  readonly closed: Promise<void>;
  #client: Deno.TcpConn;
  #server: Deno.TcpConn;
  #open = true;
  #onLine: () => void;
  #delayMs: number;

  constructor(
    id: number,
    client: Deno.TcpConn,
    server: Deno.TcpConn,
    onLine: () => void,
    delayMs: number,
  ) {
    this.id = id;
    this.#client = client;
    this.#server = server;
    this.#onLine = onLine;
    this.#delayMs = delayMs;
    this.closed = Promise.all([this.#pump(client, server, true), this.#pump(server, client, false)])
      .then(() => {});
  }

  get open(): boolean {
    return this.#open;
  }

  cut(): void {
    if (!this.#open) return;
    this.#open = false;
    for (const conn of [this.#client, this.#server]) {
      try {
        conn.close();
      } catch {
        // Already closed.
      }
    }
  }

  async #pump(from: Deno.TcpConn, to: Deno.TcpConn, record: boolean): Promise<void> {
    const buf = new Uint8Array(16 * 1024);
    const decoder = new TextDecoder();
    let partial = "";
    // With a delay, chunks are written in order, each `delayMs` after it was read.
    let tail = Promise.resolve();
    try {
      for (;;) {
        const n = await from.read(buf);
        if (n === null) break;
        const chunk = buf.subarray(0, n);
        if (record) {
          partial += decoder.decode(chunk, { stream: true });
          const lines = partial.split("\n");
          partial = lines.pop()!;
          if (lines.length > 0) {
            this.sent.push(...lines.map((l) => l.replace(/\r$/, "")));
            this.#onLine();
          }
        }
        if (this.#delayMs > 0) {
          const data = chunk.slice();
          const due = performance.now() + this.#delayMs;
          tail = tail.then(async () => {
            await new Promise((r) => setTimeout(r, Math.max(0, due - performance.now())));
            if (this.#open) await writeAll(to, data).catch(() => this.cut());
          });
          continue;
        }
        await writeAll(to, chunk);
      }
    } catch {
      // Reset, or cut.
    }
    this.cut();
    await tail;
  }
}

async function writeAll(to: Deno.TcpConn, data: Uint8Array): Promise<void> {
  let offset = 0;
  while (offset < data.length) offset += await to.write(data.subarray(offset));
}

/** Options of {@linkcode TcpProxy.start}. */
export interface ProxyOptions {
  /** Delay added to every chunk, in each direction, in ms (simulated latency). Default 0. */
  delayMs?: number;
}

/** A proxy in front of one lockd. */
export class TcpProxy {
  /** The proxy's port. */
  readonly port: number;
  #target: number;
  #delayMs: number;
  #acceptor: Acceptor;
  #pairs: Pair[] = [];
  #waiters = new Waiters();
  #closed = false;

  private constructor(target: number, delayMs: number) {
    this.#target = target;
    this.#delayMs = delayMs;
    this.#acceptor = new Acceptor(0, (client, current) => this.#forward(client, current));
    this.port = this.#acceptor.port;
  }

  /** Starts a proxy on a free port that forwards to `127.0.0.1:<targetPort>`. */
  static start(targetPort: number, options: ProxyOptions = {}): TcpProxy {
    return new TcpProxy(targetPort, options.delayMs ?? 0);
  }

  /** `127.0.0.1:<port>`. */
  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  /** Every connection accepted so far, in order. */
  get connections(): readonly ProxiedConnection[] {
    return this.#pairs;
  }

  /** Connections open now. */
  get live(): ProxiedConnection[] {
    return this.#pairs.filter((p) => p.open);
  }

  /** Whether new connections are accepted. */
  get accepting(): boolean {
    return this.#acceptor.listening;
  }

  /** Cuts every open connection (new ones are still accepted unless {@linkcode down}). */
  cutAll(): void {
    for (const pair of this.#pairs) pair.cut();
  }

  /** Stops accepting (connection refused) and cuts every connection. */
  async down(): Promise<void> {
    await this.#acceptor.stop();
    this.cutAll();
    await Promise.all(this.#pairs.map((p) => p.closed));
  }

  /** Accepts connections again, on the same port. */
  up(): void {
    if (!this.#closed) this.#acceptor.listen();
  }

  /**
   * Resolves once `check()` holds, re-checking on every accepted connection, every line a
   * client sends and every close; rejects after `timeoutMs`.
   */
  until(check: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
    return this.#waiters.until(check, what, timeoutMs);
  }

  /** Stops accepting, cuts everything and waits until every socket is closed. */
  async close(): Promise<void> {
    this.#closed = true;
    await this.down();
  }

  /** Connects an accepted client to the target and starts pumping both ways. */
  async #forward(client: Deno.TcpConn, current: () => boolean): Promise<void> {
    let server: Deno.TcpConn;
    try {
      server = await Deno.connect({ hostname: "127.0.0.1", port: this.#target });
    } catch {
      client.close();
      return;
    }
    if (!current()) {
      client.close();
      server.close();
      return;
    }
    const pair = new Pair(
      this.#pairs.length,
      client,
      server,
      () => this.#waiters.notify(),
      this.#delayMs,
    );
    this.#pairs.push(pair);
    pair.closed.then(() => this.#waiters.notify());
    this.#waiters.notify();
  }
}
