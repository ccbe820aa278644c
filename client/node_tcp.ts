/**
 * The TCP transport (`host:port`, `tcp://host:port`, and `tls://host:port` with TLS) on
 * `node:net` and `node:tls`, for Node.js and Bun. The only client file that imports a
 * `node:` module; it is loaded on first use of a TCP address outside Deno (`dial.ts`), so
 * browsers never evaluate it. Lines sent in one turn of the event loop go out in one write
 * ({@linkcode LineWriter}), with at most one write in flight and the next one only after
 * the socket took the last (its callback, and `'drain'` when `write()` returned `false`),
 * so what a slow reader leaves unsent stays in the writer's queue, not in the socket's.
 * Received chunks are split into lines ({@linkcode LineReader}).
 *
 * @module
 */

import type { Address } from "./address.ts";
import { MAX_LINE_BYTES } from "./codec.ts";
import { LineReader, plainAnswerHint, SPOKE_TLS, startsTlsRecord } from "./line_reader.ts";
import { LineWriter } from "./line_writer.ts";
import type { Transport, TransportHandlers } from "./transport.ts";

/**
 * The part of a `net.Socket` (or `tls.TLSSocket`) this transport uses, typed here so the
 * client's type graph needs no Node types and checks with DOM-only libraries.
 */
export interface NodeSocket {
  write(data: Uint8Array, callback: (error?: Error | null) => void): boolean;
  on(event: "data", listener: (chunk: Uint8Array) => void): unknown;
  on(event: "error", listener: (error: Error) => void): unknown;
  on(event: "close" | "drain" | "connect" | "secureConnect", listener: () => void): unknown;
  once(event: "drain", listener: () => void): unknown;
  removeListener(event: string, listener: (...args: never[]) => void): unknown;
  setNoDelay(noDelay?: boolean): unknown;
  ref(): unknown;
  unref(): unknown;
  destroy(error?: Error): unknown;
  end(): unknown;
}

interface NodeNet {
  connect(options: { host: string; port: number }): NodeSocket;
  isIP(input: string): number;
}

interface NodeTls {
  connect(options: {
    host: string;
    port: number;
    servername?: string;
    secureContext?: unknown;
  }): NodeSocket;
  createSecureContext(options: { ca?: string[] }): unknown;
  rootCertificates?: readonly string[];
}

let netModule: Promise<NodeNet> | undefined;
let tlsModule: Promise<NodeTls> | undefined;

function loadNet(): Promise<NodeNet> {
  netModule ??= import("node:net").then((m) => m as unknown as NodeNet);
  return netModule;
}

function loadTls(): Promise<NodeTls> {
  tlsModule ??= import("node:tls").then((m) => m as unknown as NodeTls);
  return tlsModule;
}

/**
 * The longest reply line: a reply echoes the request's op and key, which fit in a request
 * line, and adds a status and a short value or message.
 */
const MAX_REPLY_BYTES = 2 * MAX_LINE_BYTES;

/** Secure contexts by their CA list: building one parses every root certificate. */
const contexts = new Map<string, unknown>();

/**
 * The secure context that trusts the default roots and `caCerts` (as Deno's `caCerts`
 * does: in addition to the default roots, where Node's `ca` alone would replace them).
 */
function secureContext(tls: NodeTls, caCerts: string[] | undefined): unknown {
  if (caCerts === undefined || caCerts.length === 0) return undefined;
  const id = caCerts.join("\n");
  let context = contexts.get(id);
  if (context === undefined) {
    context = tls.createSecureContext({ ca: [...(tls.rootCertificates ?? []), ...caCerts] });
    if (contexts.size >= 16) contexts.clear();
    contexts.set(id, context);
  }
  return context;
}

/**
 * Connects to a lockd node over TCP (TLS for `tls://`) with `node:net` / `node:tls`. The
 * attempt ends when `signal` aborts (the client's connect timeout or its close).
 *
 * @throws {Error} The socket's error (e.g. `ECONNREFUSED`, a certificate that does not
 * verify), or `signal.reason`.
 */
export async function connectNodeTcp(
  address: Address,
  handlers: TransportHandlers,
  signal: AbortSignal,
): Promise<Transport> {
  if (signal.aborted) throw signal.reason;
  const net = await loadNet();
  const { hostname, port } = address;
  let socket: NodeSocket;
  let ready: "connect" | "secureConnect" = "connect";
  if (address.scheme === "tls") {
    const tls = await loadTls();
    // SNI carries host names only (RFC 6066); an IP address is still verified, against the
    // certificate's IP entries, from `host`.
    const servername = net.isIP(hostname) === 0 ? hostname : undefined;
    socket = tls.connect({
      host: hostname,
      port,
      servername,
      secureContext: secureContext(tls, address.caCerts),
    });
    ready = "secureConnect";
  } else socket = net.connect({ host: hostname, port });
  try {
    await opened(socket, ready, signal);
  } catch (error) {
    if (ready !== "secureConnect" || signal.aborted || !(error instanceof Error)) throw error;
    throw new Error(plainAnswerHint(error.message));
  }
  try {
    socket.setNoDelay(true);
  } catch {
    // Not fatal: only latency.
  }
  return wrapNodeSocket(socket, handlers);
}

/**
 * The transport over a connected socket (what {@linkcode connectNodeTcp} returns; exported
 * for tests with a fake socket). It starts unref'd: idle until a request is outstanding.
 */
export function wrapNodeSocket(socket: NodeSocket, handlers: TransportHandlers): Transport {
  return new NodeTcpTransport(socket, handlers);
}

/** Resolves once `socket` emitted `ready`; rejects on its error, its close, or the abort. */
function opened(
  socket: NodeSocket,
  ready: "connect" | "secureConnect",
  signal: AbortSignal,
): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const done = (error?: unknown) => {
      socket.removeListener(ready, onReady);
      socket.removeListener("error", onError);
      socket.removeListener("close", onClose);
      signal.removeEventListener("abort", onAbort);
      if (error === undefined) return resolve();
      socket.destroy();
      reject(error);
    };
    const onReady = () => done();
    const onError = (error: Error) => done(error);
    const onClose = () => done(new Error("connection closed while connecting"));
    const onAbort = () => done(signal.reason);
    socket.on(ready, onReady);
    socket.on("error", onError);
    socket.on("close", onClose);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

class NodeTcpTransport implements Transport {
  #socket: NodeSocket;
  #handlers: TransportHandlers;
  #writer: LineWriter;
  #reader: LineReader;
  #flushQueued = false;
  #closed = false;
  #ended = false;
  /** Whether any byte came yet (the first ones are checked for a TLS answer). */
  #heard = false;
  /** Why it closed, when it knows better than "lost". */
  #reason: string | undefined;
  /** Fails the write in flight when the socket goes away. */
  #failWrite: ((error: Error) => void) | undefined;
  #flush = () => {
    this.#flushQueued = false;
    this.#writer.flush();
  };

  constructor(socket: NodeSocket, handlers: TransportHandlers) {
    this.#socket = socket;
    this.#handlers = handlers;
    this.#writer = new LineWriter((data) => this.#write(data), {
      failed: () => this.close(),
    });
    this.#reader = new LineReader({
      line: (text) => handlers.line(text),
      // A reply that is not UTF-8 cannot be matched: pass it on to be found malformed.
      invalid: (text) => handlers.line(text),
      tooLong: () => this.close(),
      accepting: () => !this.#closed,
    }, { maxLineBytes: MAX_REPLY_BYTES });
    socket.on("data", (chunk) => this.#data(chunk));
    // An error always destroys the socket; `close` follows. Listening keeps it from being
    // thrown as an unhandled 'error' event.
    socket.on("error", () => this.#end());
    socket.on("close", () => this.#end());
    // Idle until a request is outstanding: an idle connection never keeps the process alive.
    this.ref(false);
  }

  send(line: string): void {
    if (this.#closed) return;
    this.#writer.push(line);
    if (!this.#flushQueued) {
      this.#flushQueued = true;
      queueMicrotask(this.#flush);
    }
  }

  ref(keep: boolean): void {
    if (this.#closed) return;
    try {
      if (keep) this.#socket.ref();
      else this.#socket.unref();
    } catch {
      // Closed meanwhile.
    }
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#writer.discard();
    try {
      this.#socket.destroy();
    } catch {
      // Already closed.
    }
    // Node emits 'close' after destroy(); end here too, in case a runtime does not.
    this.#end();
  }

  end(): void {
    if (this.#closed) return;
    // Lines already sent by the client (a release) still go out; then the sending side closes.
    this.#writer.end(() => {
      if (this.#closed) return;
      try {
        this.#socket.end();
      } catch {
        // Gone already: close at once.
        this.close();
      }
    });
  }

  /** The socket is gone (an error, the peer, or us): tell the client once. */
  #end(): void {
    if (this.#ended) return;
    this.#ended = true;
    if (!this.#closed) {
      this.#closed = true;
      this.#writer.discard();
      try {
        this.#socket.destroy();
      } catch {
        // Already closed.
      }
    }
    this.#failWrite?.(new Error("connection closed"));
    this.#handlers.closed(this.#reason);
  }

  /** Copies a received chunk into the line reader, which delivers the complete lines. */
  #data(chunk: Uint8Array): void {
    if (!this.#heard) {
      this.#heard = true;
      if (startsTlsRecord(chunk)) {
        this.#reason = SPOKE_TLS;
        this.close();
        return;
      }
    }
    let offset = 0;
    while (offset < chunk.length && !this.#closed) {
      const space = this.#reader.space();
      const n = Math.min(space.length, chunk.length - offset);
      space.set(offset === 0 && n === chunk.length ? chunk : chunk.subarray(offset, offset + n));
      offset += n;
      if (!this.#reader.commit(n)) {
        this.close();
        return;
      }
    }
  }

  /**
   * Writes one batch and resolves once the socket has taken it: its callback ran (the
   * writer reuses the buffer afterwards) and, when `write()` returned `false`, `'drain'`
   * came (the socket's own buffer is empty again).
   */
  #write(data: Uint8Array): Promise<number> {
    return new Promise<number>((resolve, reject) => {
      let written = false;
      let drained = true;
      const settle = (error?: Error | null) => {
        if (this.#failWrite === undefined) return;
        if (error) {
          this.#failWrite = undefined;
          reject(error);
        } else if (written && drained) {
          this.#failWrite = undefined;
          resolve(data.length);
        }
      };
      this.#failWrite = (error) => settle(error);
      const ok = this.#socket.write(data, (error) => {
        written = true;
        settle(error);
      });
      if (!ok && this.#failWrite !== undefined) {
        drained = false;
        this.#socket.once("drain", () => {
          drained = true;
          settle();
        });
      }
    });
  }
}
