/**
 * The TCP transport (`host:port`, `tcp://host:port`, and `tls://host:port` with TLS) on
 * `Deno.connect` and `Deno.connectTls`. The only client
 * file that uses `Deno.*`; it is loaded on first use of a TCP address, so browsers never
 * evaluate it. Lines sent in one turn of the event loop go out in one write
 * ({@linkcode LineWriter}); received bytes are split into lines ({@linkcode LineReader}).
 *
 * @module
 */

import type { Address } from "./address.ts";
import { MAX_LINE_BYTES } from "./codec.ts";
import { LineReader, plainAnswerHint, SPOKE_TLS, startsTlsRecord } from "./line_reader.ts";
import { LineWriter } from "./line_writer.ts";
import { setTimerUnref } from "./timer.ts";
import type { Transport, TransportHandlers } from "./transport.ts";

/** The part of a Deno TCP connection this transport uses (typed here, so the client's type
 * graph needs no Deno types and checks with DOM-only libraries). */
interface TcpConn {
  read(buffer: Uint8Array): Promise<number | null>;
  write(data: Uint8Array): Promise<number>;
  close(): void;
  closeWrite?(): Promise<void>;
  handshake?(): Promise<unknown>;
  setNoDelay?(noDelay?: boolean): void;
  ref?(): void;
  unref?(): void;
}

interface DenoNet {
  connect(options: { hostname: string; port: number; signal?: AbortSignal }): Promise<TcpConn>;
  connectTls(options: { hostname: string; port: number; caCerts?: string[] }): Promise<TcpConn>;
  unrefTimer?(id: number): void;
}

// The client's background timers (reconnects) must not keep a Deno process alive either.
const denoRuntime = (globalThis as unknown as { Deno: DenoNet }).Deno;
if (denoRuntime.unrefTimer !== undefined) {
  const unrefTimer = denoRuntime.unrefTimer.bind(denoRuntime);
  setTimerUnref((id) => unrefTimer(id));
}

/**
 * The longest reply line: a reply echoes the request's op and key, which fit in a request
 * line, and adds a status and a short value or message.
 */
const MAX_REPLY_BYTES = 2 * MAX_LINE_BYTES;

/**
 * Connects to a lockd node over TCP.
 *
 * @throws {Error} The errors of `Deno.connect` (e.g. connection refused).
 */
export async function connectTcp(
  address: Address,
  handlers: TransportHandlers,
  signal: AbortSignal,
): Promise<Transport> {
  const deno = (globalThis as unknown as { Deno: DenoNet }).Deno;
  const { hostname, port } = address;
  let conn: TcpConn;
  if (address.scheme === "tls") {
    // connectTls takes no signal: one that connects after the abort is closed at once.
    const connecting = deno.connectTls({ hostname, port, caCerts: address.caCerts });
    connecting.then((late) => signal.aborted && late.close(), () => {});
    conn = await untilAborted(connecting, signal);
    // The handshake runs now, not at the first read: an untrusted certificate then fails
    // the connect with its reason instead of looking like a lost connection.
    try {
      if (conn.handshake !== undefined) await untilAborted(conn.handshake(), signal);
    } catch (error) {
      conn.close();
      const why = error instanceof Error ? error.message : String(error);
      throw signal.aborted ? error : new Error(`TLS handshake failed: ${plainAnswerHint(why)}`);
    }
  } else conn = await deno.connect({ hostname, port, signal });
  if (signal.aborted) {
    conn.close();
    throw signal.reason;
  }
  try {
    conn.setNoDelay?.(true);
  } catch {
    // Not fatal: only latency (a TLS connection may not have it).
  }
  return new TcpTransport(conn, handlers);
}

/** `promise`, or a rejection with the abort's reason once `signal` aborts first. */
function untilAborted<T>(promise: Promise<T>, signal: AbortSignal): Promise<T> {
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => {
      if (signal.aborted) reject(signal.reason);
      signal.addEventListener("abort", () => reject(signal.reason), { once: true });
    }),
  ]);
}

class TcpTransport implements Transport {
  #conn: TcpConn;
  #handlers: TransportHandlers;
  #writer: LineWriter;
  #flushQueued = false;
  #closed = false;
  #flush = () => {
    this.#flushQueued = false;
    this.#writer.flush();
  };

  constructor(conn: TcpConn, handlers: TransportHandlers) {
    this.#conn = conn;
    this.#handlers = handlers;
    // Idle until a request is outstanding: an idle connection never keeps the process alive.
    this.ref(false);
    this.#writer = new LineWriter(conn, {
      failed: () => this.close(),
    });
    this.#read();
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
    try {
      if (keep) this.#conn.ref?.();
      else this.#conn.unref?.();
    } catch {
      // Closed meanwhile.
    }
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#writer.discard();
    try {
      this.#conn.close();
    } catch {
      // Already closed.
    }
  }

  end(): void {
    if (this.#closed) return;
    // Lines already sent by the client (a release) still go out; then the sending side closes.
    this.#writer.end(() => {
      if (this.#closed) return;
      if (this.#conn.closeWrite === undefined) this.close();
      else this.#conn.closeWrite().catch(() => this.close());
    });
  }

  async #read(): Promise<void> {
    const handlers = this.#handlers;
    const reader = new LineReader({
      line: (text) => handlers.line(text),
      // A reply that is not UTF-8 cannot be matched: pass it on to be found malformed.
      invalid: (text) => handlers.line(text),
      tooLong: () => this.close(),
      accepting: () => !this.#closed,
    }, { maxLineBytes: MAX_REPLY_BYTES });
    let reason: string | undefined;
    try {
      let first = true;
      for (;;) {
        const space = reader.space();
        const n = await this.#conn.read(space);
        if (n === null) break;
        if (first && startsTlsRecord(space.subarray(0, n))) {
          reason = SPOKE_TLS;
          break;
        }
        first = false;
        if (!reader.commit(n)) break;
      }
    } catch {
      // Reset, or closed by us.
    }
    this.close();
    handlers.closed(reason);
  }
}
