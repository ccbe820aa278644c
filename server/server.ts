/**
 * A single lockd node: the TCP listener, its connections, the lock table, the token store
 * and the one lease timer, wired together. `main.ts` adds the command line; tests and
 * embedders can start a server in-process with {@linkcode LockServer.start}.
 *
 * @module
 */

import { DEFAULT_MAX_LEASE_MS } from "../client/codec.ts";
import { Connection, endBatchSoon, onBatchEnd } from "./conn.ts";
import { LockTable } from "./lock_table.ts";
import { ClientSession, type SessionContext, type Ticket, ticketHooks } from "./session.ts";
import { Ticker } from "./timers.ts";
import { TokenStore } from "./tokens.ts";

/** Options of {@linkcode LockServer.start}. */
export interface LockServerOptions {
  /** Interface to listen on. Default `127.0.0.1`. */
  hostname?: string;
  /** TCP port; 0 picks a free one. Default 7321. */
  port?: number;
  /** Directory of the token high-water mark. Default `./lockd-data`. */
  dataDir?: string;
  /** Longest lease a client may ask for, in ms. Default 86,400,000 (one day). */
  maxLeaseMs?: number;
  /** Connections served at once; the next one gets `- - E too many connections`. Default 10,000. */
  maxConnections?: number;
  /** Monotonic clock in ms. Default `performance.now`. */
  clock?: () => number;
}

const TOO_MANY = new TextEncoder().encode("- - E too many connections\n");
const SHUTDOWN_GRACE_MS = 2000;

/**
 * A running lockd node.
 *
 * @example Start, then stop
 * ```ts ignore
 * const server = await LockServer.start({ port: 0, dataDir: "/tmp/lockd" });
 * console.log(server.addr.port);
 * await server.shutdown();
 * ```
 */
export class LockServer {
  #listener: Deno.TcpListener;
  #tokens: TokenStore;
  #table: LockTable<Ticket>;
  #ticker: Ticker;
  #ctx: SessionContext;
  #maxConnections: number;
  #connections = new Map<Connection, ClientSession>();
  #stopping = false;
  #exitCode = 0;
  #finished: Promise<number>;
  #finish!: (code: number) => void;
  #detachBatch: () => void;

  private constructor(listener: Deno.TcpListener, tokens: TokenStore, options: LockServerOptions) {
    this.#listener = listener;
    this.#tokens = tokens;
    this.#maxConnections = options.maxConnections ?? 10_000;
    const clock = options.clock ?? (() => performance.now());
    this.#table = new LockTable<Ticket>({
      clock,
      nextToken: () => tokens.next(),
      hooks: ticketHooks,
    });
    this.#ctx = {
      table: this.#table,
      maxLeaseMs: options.maxLeaseMs ?? DEFAULT_MAX_LEASE_MS,
      refuse: () => this.#stopping ? "E shutting down" : undefined,
      fatal: (error) => this.#fatal(error),
    };
    this.#ticker = new Ticker(this.#table, {
      clock,
      afterTick: endBatchSoon,
      onError: (error) => this.#fatal(error),
    });
    this.#detachBatch = onBatchEnd(() => this.#ticker.arm());
    this.#finished = new Promise((resolve) => this.#finish = resolve);
    this.#acceptLoop();
  }

  /**
   * Opens the data directory (reserving tokens) and starts listening.
   *
   * @throws {DataDirError} The data directory is unusable (see its message).
   * @throws {TokensExhaustedError} The stored mark is already 2^64-1.
   * @throws {Deno.errors.AddrInUse} The address is taken.
   */
  static start(options: LockServerOptions = {}): Promise<LockServer> {
    const tokens = TokenStore.open(options.dataDir ?? "./lockd-data");
    let listener: Deno.TcpListener;
    try {
      listener = Deno.listen({
        hostname: options.hostname ?? "127.0.0.1",
        port: options.port ?? 7321,
      });
    } catch (error) {
      return tokens.close().then(() => Promise.reject(error));
    }
    return Promise.resolve(new LockServer(listener, tokens, options));
  }

  /** The address actually listened on (the real port when 0 was asked). */
  get addr(): Deno.NetAddr {
    return this.#listener.addr;
  }

  /** The lock table (for tests and statistics). */
  get table(): LockTable<Ticket> {
    return this.#table;
  }

  /** Resolves with the process exit code once the server has stopped. */
  get finished(): Promise<number> {
    return this.#finished;
  }

  /**
   * Graceful stop (SIGINT/SIGTERM): stops accepting, answers queued acquires
   * `E shutting down`, flushes and closes connections, persists the token mark.
   */
  async shutdown(): Promise<void> {
    if (this.#stopping) return void await this.#finished;
    this.#stopping = true;
    try {
      this.#listener.close();
    } catch {
      // Already closed.
    }
    for (const session of this.#connections.values()) session.answerQueued("E shutting down");
    for (const conn of this.#connections.keys()) conn.closeAfterFlush();
    endBatchSoon();
    const closing = [...this.#connections.keys()].map((c) => c.done);
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      Promise.all(closing),
      new Promise((resolve) => timer = setTimeout(resolve, SHUTDOWN_GRACE_MS)),
    ]);
    clearTimeout(timer);
    for (const conn of this.#connections.keys()) conn.close();
    await Promise.all(closing);
    this.#ticker.stop();
    this.#detachBatch();
    try {
      await this.#tokens.close();
    } catch (error) {
      console.error(`lockd: ${error instanceof Error ? error.message : error}`);
      this.#exitCode = 1;
    }
    this.#finish(this.#exitCode);
  }

  #fatal(error: Error | unknown): void {
    console.error(`lockd: ${error instanceof Error ? error.message : error}; stopping`);
    this.#exitCode = 1;
    queueMicrotask(() => this.shutdown());
  }

  async #acceptLoop(): Promise<void> {
    for (;;) {
      let socket: Deno.TcpConn;
      try {
        socket = await this.#listener.accept();
      } catch (error) {
        if (this.#stopping) return;
        // Out of file descriptors and the like: log, breathe, keep serving.
        console.error(`lockd: accept failed: ${error instanceof Error ? error.message : error}`);
        await new Promise((resolve) => setTimeout(resolve, 50));
        continue;
      }
      if (this.#stopping) {
        socket.close();
        continue;
      }
      if (this.#connections.size >= this.#maxConnections) {
        refuse(socket);
        continue;
      }
      this.#serve(socket);
    }
  }

  #serve(socket: Deno.TcpConn): void {
    const session = new ClientSession(this.#ctx, {
      send: (line) => conn.send(line),
      hold: (units) => conn.hold(units),
    });
    const conn = new Connection(socket, {
      line: (text) => session.line(text),
      invalid: (text) => session.invalid(text),
      closed: () => {
        session.closed();
        this.#connections.delete(conn);
      },
    });
    this.#connections.set(conn, session);
  }
}

async function refuse(socket: Deno.TcpConn): Promise<void> {
  try {
    await socket.write(TOO_MANY);
  } catch {
    // The client is gone already.
  } finally {
    socket.close();
  }
}
