/**
 * A lockd node: the TCP listener, its connections, the lock table, the token store, the one
 * lease timer and, in a cluster, the {@linkcode ClusterNode} that decides whether this node
 * serves, parks or redirects requests. `main.ts` adds the command line; tests and embedders
 * can start a server in-process with {@linkcode LockServer.start}.
 *
 * @module
 */

import { DEFAULT_MAX_LEASE_MS } from "../client/codec.ts";
import { ClusterNode, type ClusterOptions } from "./cluster/node.ts";
import type { Role } from "./cluster/election.ts";
import { Connection, endBatchSoon, type LineHandler, onBatchEnd } from "./conn.ts";
import { LockTable } from "./lock_table.ts";
import {
  ClientSession,
  type Gate,
  type SessionContext,
  type Ticket,
  ticketHooks,
} from "./session.ts";
import { Ticker, turnClock } from "./timers.ts";
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
  /** Monotonic clock in ms. Default `performance.now`, read once per event-loop run. */
  clock?: () => number;
  /** Cluster settings (SPEC §4); a single node without them. */
  cluster?: Omit<ClusterOptions, "tokenBlock">;
  /** Called on every role change of a cluster node (for logs). */
  onRole?: (role: Role, description: string) => void;
}

const TOO_MANY = new TextEncoder().encode("- - E too many connections\n");
const SHUTDOWN_GRACE_MS = 2000;
const SERVE: Gate = { kind: "serve" };
const SHUTTING_DOWN: Gate = { kind: "refuse", reply: "E shutting down" };

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
  #cluster: ClusterNode | undefined;
  #maxConnections: number;
  #connections = new Map<Connection, ClientSession>();
  #parked: { session: ClientSession; line: string }[] = [];
  #stopping = false;
  #exitCode = 0;
  #finished: Promise<number>;
  #finish!: (code: number) => void;
  #ready: Promise<Role>;
  #detachBatch: () => void;

  private constructor(listener: Deno.TcpListener, tokens: TokenStore, options: LockServerOptions) {
    this.#listener = listener;
    this.#tokens = tokens;
    this.#maxConnections = options.maxConnections ?? 10_000;
    const turn = options.clock === undefined ? turnClock() : undefined;
    const clock = options.clock ?? turn!.now;
    this.#table = new LockTable<Ticket>({
      clock,
      nextToken: () => tokens.next(),
      // Only a cluster's active needs the change feed: a single node skips its cost.
      hooks: options.cluster === undefined ? ticketHooks : {
        ...ticketHooks,
        held: (key, token, deadline) => this.#cluster?.held(key, token, deadline),
        freed: (key, token) => this.#cluster?.freed(key, token),
      },
    });
    this.#ctx = {
      table: this.#table,
      maxLeaseMs: options.maxLeaseMs ?? DEFAULT_MAX_LEASE_MS,
      gate: () => this.#stopping ? SHUTTING_DOWN : this.#cluster?.gate() ?? SERVE,
      park: (session, line) => this.#parked.push({ session, line }),
      fatal: (error) => this.#fatal(error),
    };
    this.#ticker = new Ticker(this.#table, {
      clock: options.clock ?? (() => performance.now()),
      refresh: turn?.refresh,
      afterTick: endBatchSoon,
      onError: (error) => this.#fatal(error),
      canAdvance: () => this.#cluster?.canAdvance() ?? true,
    });
    this.#detachBatch = onBatchEnd(() => this.#ticker.arm());
    this.#finished = new Promise((resolve) => this.#finish = resolve);
    const { promise: ready, resolve: settled } = Promise.withResolvers<Role>();
    this.#ready = ready;
    if (options.cluster !== undefined) {
      const cluster = new ClusterNode({
        table: this.#table,
        tokens,
        clock,
        answerQueued: (status) => this.#answerQueued(status),
        unpark: () => this.#unpark(),
        resumeTimers: () => {
          this.#ticker.fire();
        },
        roleChanged: (role, description) => {
          if (role === "active" || role === "standby") settled(role);
          options.onRole?.(role, description);
        },
      }, { ...options.cluster, tokenBlock: tokens.block });
      this.#cluster = cluster;
      tokens.onReserve = (mark) => cluster.reserved(mark);
      cluster.start();
    } else settled("active");
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

  /** Resolves with the first settled role: at once for a single node. */
  get ready(): Promise<Role> {
    return this.#ready;
  }

  /** Resolves with the process exit code once the server has stopped. */
  get finished(): Promise<number> {
    return this.#finished;
  }

  /**
   * Graceful stop (SIGINT/SIGTERM). A cluster's active first hands over to its successor
   * and redirects queued acquires to it with `M`; otherwise queued acquires are answered
   * `E shutting down`. Then connections are flushed and closed and the token mark saved.
   */
  async shutdown(): Promise<void> {
    if (this.#stopping) return void await this.#finished;
    const handedOver = (await this.#cluster?.leave()) ?? false;
    this.#stopping = true;
    try {
      this.#listener.close();
    } catch {
      // Already closed.
    }
    // Requests parked during a handover that did not complete get the same answer.
    this.#unpark();
    if (!handedOver) {
      this.#answerQueued("E shutting down");
    }
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
    await this.#cluster?.stop();
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

  /**
   * Answers every queued acquire with `status`, each key's waiters in queue order: replies
   * go out in that order, so redirected clients resend (and queue again) in that order.
   */
  #answerQueued(status: string): void {
    for (const ticket of [...this.#table.queued()]) ticket.session.answerQueued(ticket, status);
    endBatchSoon();
  }

  #unpark(): void {
    const parked = this.#parked;
    this.#parked = [];
    for (const { session, line } of parked) session.line(line);
    endBatchSoon();
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
    let first = true;
    const client: LineHandler = {
      line: (text) => {
        if (first) {
          first = false;
          // A peer introduces itself with `PEER 1 <address>` (docs/cluster.md).
          if (text.startsWith("PEER ") && this.#cluster !== undefined) {
            this.#connections.delete(conn);
            const peer = this.#cluster.accept(text.split(" ")[2] ?? "", () => conn.close());
            if (peer === undefined) conn.close();
            else conn.handler = peer;
            return;
          }
        }
        session.line(text);
      },
      invalid: (text) => session.invalid(text),
      closed: () => {
        session.closed();
        this.#connections.delete(conn);
      },
    };
    const conn = new Connection(socket, client);
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
