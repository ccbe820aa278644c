/**
 * Opening a connection for an address: the TCP transport (Deno) or the WebSocket one
 * (anywhere), each loaded on first use, so importing the client touches no
 * runtime-specific API and browsers never load the TCP code.
 *
 * @module
 */

import type { Address } from "./address.ts";
import type { Transport, TransportHandlers } from "./transport.ts";

/**
 * Opens a transport for `address`: TCP through Deno's sockets for `host:port` and
 * `tcp://` (`tls://` with TLS), a WebSocket for `ws://` and `wss://`. This is the default `connect` of
 * `LockClient`; wrap it to observe or change how connections are made.
 *
 * @throws {Error} For a TCP address in a runtime without TCP sockets (a browser, an edge
 * worker): use a WebSocket bridge there. And the errors of the connection attempt.
 *
 * @example Log each connection the client makes
 * ```ts
 * import { type Connect, connectTransport, LockClient } from "@lockd/client";
 * const connect: Connect = (address, handlers, signal) => {
 *   console.log("connecting to", address.key);
 *   return connectTransport(address, handlers, signal);
 * };
 * const client = new LockClient("127.0.0.1:7321", { connect });
 * await client.close();
 * ```
 */
export async function connectTransport(
  address: Address,
  handlers: TransportHandlers,
  signal: AbortSignal,
): Promise<Transport> {
  if (address.scheme === "tcp" || address.scheme === "tls") {
    if (!("Deno" in globalThis)) {
      throw new Error(
        `TCP address ${address.key} needs Deno; in a browser or other runtime use the WebSocket bridge (ws:// or wss://)`,
      );
    }
    const { connectTcp } = await import("./tcp.ts");
    return connectTcp(address, handlers, signal);
  }
  const { connectWebSocket } = await import("./ws.ts");
  return connectWebSocket(address, handlers, signal);
}
