/**
 * The TCP transport (`host:port`, `tcp://host:port`) on `Deno.connect`. The only client
 * file that uses `Deno.*`; it is loaded on first use of a TCP address, so browsers never
 * evaluate it.
 *
 * @module
 */

import type { Address, Transport, TransportHandlers } from "./transport.ts";

const encoder = new TextEncoder();

/** The part of a Deno TCP connection this transport uses (typed here, so the client's type
 * graph needs no Deno types and checks with DOM-only libraries). */
interface TcpConn {
  read(buffer: Uint8Array): Promise<number | null>;
  write(data: Uint8Array): Promise<number>;
  close(): void;
  setNoDelay(noDelay?: boolean): void;
}

interface DenoNet {
  connect(options: { hostname: string; port: number; signal?: AbortSignal }): Promise<TcpConn>;
}

function denoNet(): DenoNet {
  const runtime = (globalThis as { Deno?: DenoNet }).Deno;
  if (runtime === undefined) {
    throw new Error(
      "TCP addresses need Deno; in a browser or other runtime use the WebSocket bridge (ws:// or wss://)",
    );
  }
  return runtime;
}

/**
 * Connects to a lockd node over TCP. Lines sent in one turn of the event loop go out in one
 * write; received bytes are split into lines.
 *
 * @throws {Error} Outside Deno; and the errors of `Deno.connect` (e.g. connection refused).
 */
export async function connectTcp(
  address: Address,
  handlers: TransportHandlers,
  signal: AbortSignal,
): Promise<Transport> {
  const conn = await denoNet().connect({ hostname: address.hostname, port: address.port, signal });
  if (signal.aborted) {
    conn.close();
    throw signal.reason;
  }
  try {
    conn.setNoDelay(true);
  } catch {
    // Not fatal: only latency.
  }
  return new TcpTransport(conn, handlers);
}

class TcpTransport implements Transport {
  #conn: TcpConn;
  #handlers: TransportHandlers;
  #out: string[] = [];
  #writing = false;
  #closed = false;

  constructor(conn: TcpConn, handlers: TransportHandlers) {
    this.#conn = conn;
    this.#handlers = handlers;
    this.#read();
  }

  send(line: string): void {
    if (this.#closed) return;
    this.#out.push(line);
    if (this.#out.length === 1 && !this.#writing) queueMicrotask(() => this.#flush());
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#out = [];
    try {
      this.#conn.close();
    } catch {
      // Already closed.
    }
  }

  async #flush(): Promise<void> {
    if (this.#writing || this.#closed || this.#out.length === 0) return;
    this.#writing = true;
    try {
      while (this.#out.length > 0 && !this.#closed) {
        const data = encoder.encode(this.#out.join("\n") + "\n");
        this.#out = [];
        let offset = 0;
        while (offset < data.length) offset += await this.#conn.write(data.subarray(offset));
      }
    } catch {
      this.close();
    } finally {
      this.#writing = false;
    }
  }

  async #read(): Promise<void> {
    const decoder = new TextDecoder("utf-8", { ignoreBOM: true });
    const buf = new Uint8Array(16 * 1024);
    let pending = "";
    try {
      for (;;) {
        const n = await this.#conn.read(buf);
        if (n === null) break;
        pending += decoder.decode(buf.subarray(0, n), { stream: true });
        let start = 0;
        for (let nl = pending.indexOf("\n"); nl >= 0; nl = pending.indexOf("\n", start)) {
          const end = nl > start && pending.charCodeAt(nl - 1) === 13 ? nl - 1 : nl;
          if (end > start) this.#handlers.line(pending.slice(start, end));
          start = nl + 1;
        }
        pending = pending.slice(start);
      }
    } catch {
      // Reset, or closed by us.
    }
    this.close();
    this.#handlers.closed();
  }
}
