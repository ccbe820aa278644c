/**
 * Opening a connection for an address: a TCP transport chosen for the runtime (Deno's own
 * sockets under Deno, `node:net` under Node.js and Bun) or the WebSocket one (anywhere),
 * each loaded on first use, so importing the client touches no runtime-specific API and
 * browsers never load the TCP code.
 *
 * @module
 */

import type { Address } from "./address.ts";
import type { Transport, TransportHandlers } from "./transport.ts";

/** Which TCP transport this runtime gets: `deno`, `node` (Node.js, Bun), or none. */
type TcpRuntime = "deno" | "node" | undefined;

/** The runtime's TCP transport, from its globals (Deno first: it also defines `process`). */
function tcpRuntime(): TcpRuntime {
  const g = globalThis as {
    Deno?: unknown;
    process?: { versions?: { node?: string; bun?: string } };
  };
  if (g.Deno !== undefined) return "deno";
  const versions = g.process?.versions;
  if (versions?.node !== undefined || versions?.bun !== undefined) return "node";
  return undefined;
}

/**
 * Opens a transport for `address`: TCP for `host:port` and `tcp://` (`tls://` with TLS),
 * through Deno's sockets under Deno and `node:net` / `node:tls` under Node.js and Bun; a
 * WebSocket for `ws://` and `wss://`. This is the default `connect` of `LockClient`; wrap
 * it to observe or change how connections are made.
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
    const runtime = tcpRuntime();
    if (runtime === "deno") {
      const { connectTcp } = await import("./tcp.ts");
      return connectTcp(address, handlers, signal);
    }
    if (runtime === "node") {
      const { connectNodeTcp } = await import("./node_tcp.ts");
      return connectNodeTcp(address, handlers, signal);
    }
    throw new Error(
      `TCP address ${address.key} needs Deno, Node.js or Bun; in a browser or an edge worker use the WebSocket bridge (ws:// or wss://)`,
    );
  }
  const { connectWebSocket } = await import("./ws.ts");
  return connectWebSocket(address, handlers, signal);
}
