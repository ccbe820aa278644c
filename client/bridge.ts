/**
 * The lockd WebSocket bridge: lets browsers and edge code take lockd locks and read fencing
 * tokens with the same `LockClient` API, over `ws://` or `wss://`. Each WebSocket text frame
 * carries one line of the lockd protocol (docs/protocol.md); the bridge relays it through a
 * `LockClient`, so failover stays invisible to the browser.
 *
 * Per WebSocket session the bridge tracks what it holds and what it waits for: when the
 * socket closes, queued acquires are cancelled (a grant that arrives later is released at
 * once) and held locks are released (`releaseOnClose`, default true). The connections of
 * one `LockClient` carry the same `client` id in their URL and count as one client: its locks
 * are released when the last of them closes, and only that client can release or extend
 * them.
 *
 * Mount it in any Deno HTTP app with {@linkcode createBridgeHandler}, or run it on its own
 * with {@linkcode serveBridge}.
 *
 * @example Serve a bridge next to a lockd node
 * ```ts ignore
 * import { serveBridge } from "@lockd/client/bridge";
 * const bridge = serveBridge({
 *   servers: ["127.0.0.1:7321"],
 *   port: 8080,
 *   allowedOrigins: ["https://app.example.com"],
 * });
 * // In the browser: new LockClient("wss://locks.example.com/")
 * ```
 *
 * @module
 */

import { denoUpgrade } from "./bridge/deno.ts";
import { type BridgeHandler, type BridgeOptions, createHandler } from "./bridge/handler.ts";

export { serveBridge } from "./bridge/deno.ts";
export type { BridgeServer, ServeBridgeOptions } from "./bridge/deno.ts";
export type { BridgeHandler, BridgeOptions, UpgradeWebSocket } from "./bridge/handler.ts";
export type { BridgeSocket } from "./bridge/session.ts";
// The client, for apps that take locks next to the bridge they serve.
export * from "../mod.ts";

/**
 * Creates the bridge as a request handler, to mount in any Deno HTTP app (Deno Deploy-style
 * edge code included). Non-upgrade requests get `/client.js` and the page if configured,
 * 404 otherwise.
 *
 * @param options Where lockd is, who may connect, limits.
 * @returns A `(request) => Response` handler with a `close()` to end its sessions.
 * @throws {TypeError} If neither `servers` nor `client` is given.
 *
 * @example Mount the bridge under /lockd in an app
 * ```ts
 * import { createBridgeHandler } from "@lockd/client/bridge";
 * const bridge = createBridgeHandler({ servers: "127.0.0.1:7321", path: "/lockd" });
 * Deno.serve((request) => {
 *   const url = new URL(request.url);
 *   return url.pathname === "/lockd" ? bridge(request) : new Response("app");
 * });
 * ```
 */
export function createBridgeHandler(options: BridgeOptions): BridgeHandler {
  return createHandler(options, options.upgradeWebSocket ?? denoUpgrade);
}
