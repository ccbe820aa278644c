/**
 * The Deno part of the bridge, its only use of `Deno.*`: the WebSocket upgrade, and
 * {@linkcode serveBridge}, a bridge on its own `Deno.serve` server.
 *
 * @module
 */

import type { BridgeSocket } from "./session.ts";
import { type BridgeOptions, createHandler } from "./handler.ts";

/** Options of {@linkcode serveBridge}: the handler's, plus where to listen. */
export interface ServeBridgeOptions extends BridgeOptions {
  /** Interface to listen on. Default `127.0.0.1`. */
  hostname?: string;
  /** Port; 0 picks a free one. Default 8080. */
  port?: number;
  /** Serve `wss://` (HTTPS) with this certificate chain and key (PEM). Default: plain `ws://`. */
  tls?: { cert: string; key: string };
}

/** A running bridge. */
export interface BridgeServer {
  /** Where it listens (the real port when 0 was asked). */
  readonly addr: { hostname: string; port: number };
  /** Closes every session (releasing their locks, per `releaseOnClose`), then stops. */
  shutdown(): Promise<void>;
}

/**
 * The WebSocket upgrade of Deno (`Deno.upgradeWebSocket`), the bridge's default. When the
 * client offers protocols (`lockd` and `bearer.<token>`), it answers with `lockd`.
 */
export function denoUpgrade(request: Request): { socket: BridgeSocket; response: Response } {
  const offered = (request.headers.get("sec-websocket-protocol") ?? "").split(",").map((p) =>
    p.trim()
  );
  return offered.includes("lockd")
    ? Deno.upgradeWebSocket(request, { protocol: "lockd" })
    : Deno.upgradeWebSocket(request);
}

/**
 * Runs a bridge on its own HTTP server (`Deno.serve`).
 *
 * @param options The handler's options, plus `hostname` and `port`.
 * @returns The running bridge: its address and `shutdown()`.
 * @throws {Deno.errors.AddrInUse} If the address is taken.
 *
 * @example A bridge on a free port
 * ```ts ignore
 * import { serveBridge } from "@lockd/client/bridge";
 * const bridge = serveBridge({ servers: "127.0.0.1:7321", port: 0 });
 * console.log(`ws://127.0.0.1:${bridge.addr.port}/`);
 * await bridge.shutdown();
 * ```
 */
export function serveBridge(options: ServeBridgeOptions): BridgeServer {
  const handler = createHandler(options, options.upgradeWebSocket ?? denoUpgrade);
  const where = {
    hostname: options.hostname ?? "127.0.0.1",
    port: options.port ?? 8080,
    onListen: () => {},
  };
  const server = options.tls === undefined
    ? Deno.serve(where, handler)
    : Deno.serve({ ...where, cert: options.tls.cert, key: options.tls.key }, handler);
  const addr = server.addr as { hostname: string; port: number };
  let stopped: Promise<void> | undefined;
  return {
    addr: { hostname: addr.hostname, port: addr.port },
    shutdown(): Promise<void> {
      stopped ??= (async () => {
        await handler.close();
        await server.shutdown();
      })();
      return stopped;
    },
  };
}
