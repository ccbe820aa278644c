/**
 * The accept loop of the server's one port: the connection cap, and routing by the first
 * line. Clients and peers share the listener (docs/cluster.md, "Peer protocol"): a
 * connection whose first line is a peer handshake (`PEER ...`) becomes a peer link, every
 * other one a client connection.
 *
 * @module
 */

import { errorReply, TOO_MANY_CONNECTIONS } from "../client/codec.ts";
import { classifyAcceptError } from "./accept_errors.ts";
import type { Batch } from "./batch.ts";
import {
  type ByteStream,
  type LineHandler,
  LineSocket,
  type LineSocketOptions,
  type ReplyGate,
} from "./line_socket.ts";
import type { Logger } from "./log.ts";
import { LogLimit } from "./log_limit.ts";

/** A connection as the acceptor takes it: the runtime's, or the epoll transport's. */
export interface AcceptedConn extends ByteStream {
  /** The client's address. */
  readonly remoteAddr: Deno.Addr;
}

/** A listener as the acceptor takes it: the runtime's, or the epoll transport's. */
export interface Listener {
  /** The next connection; rejects once the listener is closed. */
  accept(): Promise<AcceptedConn>;
  /** Stops listening. */
  close(): void;
  /** The address listened on. */
  readonly addr: Deno.Addr;
  /** The epoll transport's: resolves once it and every connection it accepted are closed. */
  readonly done?: Promise<void>;
}

/** What the acceptor asks of the server. */
export interface AcceptRoutes {
  /** A handler for a new client connection, replying through `socket`. */
  client(socket: LineSocket): LineHandler;
  /**
   * A handler for a connection that opened with a peer handshake, or `undefined` when this
   * node has no cluster (the line is then a client's). Returning `null` refuses the peer
   * (unknown, malformed): the connection is closed. Until the handler calls `admitted` with
   * the peer's address (it proved the cluster secret, or at once without one), the
   * connection counts as a client's toward `maxConnections` and must be admitted within
   * {@linkcode FIRST_LINE_MS}; once admitted it no longer counts, and an older link from
   * the same address is closed (a peer keeps one link to each node: docs/cluster.md).
   */
  peer?(
    firstLine: string,
    socket: LineSocket,
    admitted: (address: string) => void,
  ): LineHandler | null;
}

/** Options of {@linkcode Acceptor}. */
export interface AcceptorOptions {
  /** Client connections served at once; the next gets `- - E too many connections`. */
  maxConnections: number;
  /** The server's batch. */
  batch: Batch;
  /** Where failures are reported. */
  log: Logger;
  /** What client replies wait for (sync replication). */
  replies?: ReplyGate;
  /** A grant's reply went out late (sync replication): see `LineSocketOptions.lateGrant`. */
  lateGrant?: LineSocketOptions["lateGrant"];
  /** A connection was refused at `maxConnections` (metrics). */
  refused?(): void;
  /** A connection sent a line over the length limit, answered `E line too long` (metrics). */
  tooLong?(): void;
  /**
   * Close a connection whose first line (a client's hello, a peer's handshake) has not come
   * within {@linkcode FIRST_LINE_MS}: with auth on, a socket that says nothing must not hold
   * one of `maxConnections` for good. (A TLS handshake always has that long.)
   */
  firstLineDue?: boolean;
}

/**
 * How long a TLS handshake may take, and a connection's first line when `firstLineDue` (ms):
 * ample for a client's hello after a slow handshake, short enough that idle sockets opened to
 * fill `--max-connections` are closed before they lock out clients for long.
 */
export const FIRST_LINE_MS = 10_000;

/** Where a first line leads: its handler, and whether the line was for the routing only. */
type Route = { handler: LineHandler; consumed: boolean } | null;

/** Where {@linkcode FirstLine} routes and reports (the acceptor). */
interface Routing {
  route(line: string, socket: LineSocket, router: FirstLine): Route;
  gone(socket: LineSocket): void;
}

/** Routes the first line, then hands every line to the chosen handler. */
class FirstLine implements LineHandler {
  /** Its socket (set right after the socket is made with this as its handler). */
  socket!: LineSocket;
  /** The timer of its first line's deadline, until that line comes (a peer's: its admission). */
  deadline: ReturnType<typeof setTimeout> | undefined;
  #target: LineHandler | undefined;
  #routing: Routing;

  constructor(routing: Routing) {
    this.#routing = routing;
  }

  line(text: string): void {
    if (this.#target === undefined) {
      clearTimeout(this.deadline);
      const routed = this.#routing.route(text, this.socket, this);
      if (routed === null) return;
      this.#target = routed.handler;
      if (routed.consumed) return;
    }
    this.#target.line(text);
  }

  invalid(text: string): void {
    if (this.#target === undefined) {
      clearTimeout(this.deadline);
      const routed = this.#routing.route("", this.socket, this);
      if (routed === null) return;
      this.#target = routed.handler;
    }
    this.#target.invalid?.(text);
  }

  closed(): void {
    clearTimeout(this.deadline);
    this.#target?.closed();
    this.#routing.gone(this.socket);
  }
}

/** The pause after an accept failed for want of resources (file descriptors...), in ms. */
const ACCEPT_BACKOFF_MS = 50;

/** Accepts connections on a listener until closed. */
export class Acceptor implements Routing {
  #listener: Listener;
  #routes: AcceptRoutes;
  #options: AcceptorOptions;
  #clients = new Set<LineSocket>();
  /** Admitted inbound peer links, with the address each proved or claimed. */
  #peers = new Map<LineSocket, string>();
  /** The newest admitted link of each peer address. */
  #peerLinks = new Map<string, LineSocket>();
  #closed = false;
  #loop: Promise<void>;
  /** Refusals at the cap: one line a second under a flood. */
  #refusals = new LogLimit(1000);
  /** Accepts failing for want of resources: one line every 10 s while it lasts. */
  #acceptFailures = new LogLimit(10_000);
  /** Failed TLS handshakes: one line every 10 s under a flood. */
  #tlsFailures = new LogLimit(10_000);
  /** Connections closed for saying nothing in time: one line every 10 s under a flood. */
  #silences = new LogLimit(10_000);
  /** The options of every client socket: one object for all (an idle socket stays small). */
  #socketOptions: LineSocketOptions;

  /** Starts accepting on `listener`. */
  constructor(listener: Listener, routes: AcceptRoutes, options: AcceptorOptions) {
    this.#listener = listener;
    this.#routes = routes;
    this.#options = options;
    this.#socketOptions = {
      batch: options.batch,
      log: options.log,
      replies: options.replies,
      lateGrant: options.lateGrant,
      tooLong: options.tooLong,
    };
    this.#loop = this.#acceptLoop();
  }

  /** The client connections open now. */
  get clients(): ReadonlySet<LineSocket> {
    return this.#clients;
  }

  /** Stops accepting (the listener closes); open connections stay. */
  async close(): Promise<void> {
    this.#closed = true;
    try {
      this.#listener.close();
    } catch {
      // Already closed.
    }
    await this.#loop;
  }

  /** Closes the inbound peer connections (after the cluster stopped). */
  async closePeers(): Promise<void> {
    const peers = [...this.#peers.keys()];
    for (const socket of peers) socket.close();
    await Promise.all(peers.map((s) => s.done));
  }

  /**
   * Closes every connection still open (the last step of a shutdown), and waits at most
   * `ms` for the listener's transport to finish.
   */
  async closeAll(ms: number): Promise<void> {
    for (const socket of [...this.#clients, ...this.#peers.keys()]) socket.close();
    const done = this.#listener.done;
    if (done === undefined) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([done, new Promise((resolve) => timer = setTimeout(resolve, ms))]);
    clearTimeout(timer);
  }

  async #acceptLoop(): Promise<void> {
    for (;;) {
      let conn: AcceptedConn;
      try {
        conn = await this.#listener.accept();
      } catch (error) {
        if (this.#closed) return;
        if (!this.#acceptFailed(error)) continue;
        // Out of file descriptors and the like: breathe, keep serving.
        await new Promise((resolve) => setTimeout(resolve, ACCEPT_BACKOFF_MS));
        continue;
      }
      if (this.#closed) {
        conn.close();
        continue;
      }
      if (this.#clients.size >= this.#options.maxConnections) {
        this.#logRefused(conn);
        this.#options.refused?.();
        refuse(conn);
        continue;
      }
      this.#serve(conn);
    }
  }

  /**
   * Logs a failed accept; whether to back off before the next. A failure of the one
   * connection (reset by its client before it was accepted) is skipped at once with a debug
   * line; running out of resources is an error, logged once every 10 s with a count.
   */
  #acceptFailed(error: unknown): boolean {
    const why = error instanceof Error ? error.message : String(error);
    const log = this.#options.log;
    if (classifyAcceptError(error) === "connection") {
      log.debug(`a connection failed before it was accepted: ${why}`, {
        event: "drop",
        reason: "reset",
      });
      return false;
    }
    const held = this.#acceptFailures.pass("accept");
    if (held !== undefined) {
      log.error(
        `accept failed: ${why}; retrying every ${ACCEPT_BACKOFF_MS} ms${LogLimit.more(held)}`,
        { event: "accept-failed", suppressed: held },
      );
    }
    return true;
  }

  /** One line per refusal at the cap, at most one a second under a flood (with a count). */
  #logRefused(conn: AcceptedConn): void {
    const held = this.#refusals.pass("cap");
    if (held === undefined) return;
    const remote = remoteOf(conn);
    this.#options.log.warn(
      `refused a connection from ${remote}: too many connections ` +
        `(--max-connections ${this.#options.maxConnections})${LogLimit.more(held)}`,
      { event: "drop", remote, reason: "too-many-connections", suppressed: held },
    );
  }

  #serve(conn: AcceptedConn): void {
    try {
      (conn as Deno.TcpConn).setNoDelay(true);
    } catch {
      // Not a TCP socket: nothing to tune.
    }
    const remote = remoteOf(conn);
    // One handler object per connection, no closures: idle connections stay small.
    const router = new FirstLine(this);
    const socket = new LineSocket(conn, remote, router, this.#socketOptions);
    router.socket = socket;
    this.#clients.add(socket);
    if ("handshake" in conn) this.#watchHandshake(conn as Deno.TlsConn, socket);
    if (this.#options.firstLineDue) {
      router.deadline = setTimeout(this.#silent, FIRST_LINE_MS, socket, "no first line");
    }
  }

  /** Closes `socket`, which said nothing (`what`) within {@linkcode FIRST_LINE_MS}. */
  #silent = (socket: LineSocket, what: string): void => {
    // Both deadlines (handshake, first line) can fall in one turn: one close, one count.
    if (this.#closed || socket.closed) return;
    const held = this.#silences.pass("silent");
    if (held !== undefined) {
      this.#options.log.warn(
        `closed ${socket.remote}: ${what} within ${FIRST_LINE_MS / 1000} s${LogLimit.more(held)}`,
        { event: "drop", remote: socket.remote, reason: "silent", suppressed: held },
      );
    }
    socket.close();
  };

  /**
   * Warns when a TLS handshake fails for a TLS reason (an alert from a client that does not
   * trust this node's certificate, plain text on the TLS port), at most one line every 10 s;
   * a connection closed or reset before its handshake (a TCP health check) stays a debug
   * line of the socket's. A handshake not done within {@linkcode FIRST_LINE_MS} closes it.
   */
  #watchHandshake(conn: Deno.TlsConn, socket: LineSocket): void {
    const remote = socket.remote;
    const deadline = setTimeout(this.#silent, FIRST_LINE_MS, socket, "no TLS handshake");
    conn.handshake().then(() => clearTimeout(deadline), (error) => {
      clearTimeout(deadline);
      if (this.#closed || !(error instanceof Deno.errors.InvalidData)) return;
      const held = this.#tlsFailures.pass("tls");
      if (held === undefined) return;
      this.#options.log.warn(
        `TLS handshake with ${remote} failed: ${error.message} (a client that does not trust ` +
          `this node's certificate, or one that does not speak TLS)${LogLimit.more(held)}`,
        { event: "tls-failed", remote, suppressed: held },
      );
    });
  }

  /** The first line of `socket` decides: a peer's handshake, or a client. @internal */
  route(line: string, socket: LineSocket, router: FirstLine): Route {
    if (line.startsWith("PEER ") && this.#routes.peer !== undefined) {
      socket.ungate(); // a peer's challenge does not wait for the standbys
      const admitted = (address: string) => this.#admit(socket, address, router);
      const handler = this.#routes.peer(line, socket, admitted);
      if (handler === null) {
        socket.close();
        return null;
      }
      // Still counted as a client's: a handshake that proves nothing must not hold a
      // socket past the cap, nor for good.
      if (!this.#peers.has(socket) && !socket.closed) {
        router.deadline = setTimeout(this.#silent, FIRST_LINE_MS, socket, "no peer proof");
      }
      return { handler, consumed: true };
    }
    return { handler: this.#routes.client(socket), consumed: false };
  }

  /** The peer handshake on `socket` succeeded: a link from `address`, out of the cap. */
  #admit(socket: LineSocket, address: string, router: FirstLine): void {
    clearTimeout(router.deadline);
    if (socket.closed || this.#peers.has(socket)) return;
    this.#clients.delete(socket);
    this.#peers.set(socket, address);
    const older = this.#peerLinks.get(address);
    this.#peerLinks.set(address, socket);
    // The peer redialled: its old link is dead on its side (or an impostor's, without a
    // cluster secret). Closing it bounds the links to one per listed peer.
    older?.close();
  }

  /** `socket` closed. @internal */
  gone(socket: LineSocket): void {
    this.#clients.delete(socket);
    const address = this.#peers.get(socket);
    if (address === undefined) return;
    this.#peers.delete(socket);
    if (this.#peerLinks.get(address) === socket) this.#peerLinks.delete(address);
  }
}

function remoteOf(conn: AcceptedConn): string {
  const addr = conn.remoteAddr as Deno.NetAddr;
  return `${addr.hostname}:${addr.port}`;
}

const TOO_MANY = new TextEncoder().encode(errorReply("-", "-", TOO_MANY_CONNECTIONS) + "\n");

async function refuse(conn: AcceptedConn): Promise<void> {
  try {
    await conn.write(TOO_MANY);
  } catch {
    // The client is gone already.
  } finally {
    conn.close();
  }
}
