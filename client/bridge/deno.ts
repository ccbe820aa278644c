/**
 * The Deno part of the bridge, its only use of `Deno.*`: the WebSocket upgrade,
 * {@linkcode serveBridge}, a bridge on its own `Deno.serve` server, and
 * {@linkcode serveLasting}, the `Deno.serve` under it and under `--http`. Deno's HTTP server
 * stops for good, rejecting its `finished`, when accepting a connection fails (out of file
 * descriptors: a flood of connections); unhandled, that rejection ends the whole process.
 * `serveLasting` serves again on the same address once accepting works, so that a flood on an
 * HTTP port costs that port a pause, never the node and its locks.
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
 * Runs a bridge on its own HTTP server (`Deno.serve`). If accepting connections fails (out of
 * file descriptors), the server listens again on the same address a second later, and says
 * so through `onError`.
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
  const report = options.onError ?? ((message: string) => console.error(message));
  // A failing accept (a flood of connections) stops Deno's server: it listens again.
  const server = serveLasting({
    hostname: options.hostname ?? "127.0.0.1",
    port: options.port ?? 8080,
    tls: options.tls,
    report: (message) => report(`lockd bridge: ${message}`),
    failed: (message) => report(`lockd bridge: ${message}`),
  }, handler);
  const addr = server.addr;
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

/** How long to wait before listening again after the server stopped on an error (ms). */
export const RELISTEN_MS = 1000;
/** The longest wait before listening again (ms): the wait doubles while stops keep coming. */
const MAX_RELISTEN_MS = 30_000;
/** A listen that lasted this long (ms) was not part of the same flood: the wait starts over. */
const STABLE_MS = 60_000;
/** At most one line about stops per this long (ms), counting the others. */
const REPORT_EVERY_MS = 10_000;
/** Stopped servers kept serving their connections; past this many, the oldest is shut down. */
const MAX_STOPPED = 4;

/** Where and how to listen: `Deno.serve`'s options, with TLS when `cert` and `key` are set. */
export interface LastingServeOptions {
  /** Interface to listen on. */
  hostname: string;
  /** Port; 0 picks a free one, kept when the server listens again. */
  port: number;
  /** Serve HTTPS with this certificate chain and key (PEM). */
  tls?: { cert: string; key: string };
  /**
   * Told (in one line) when the server stopped on an error or cannot listen again
   * (`recovered` false: at most one line every 10 s, counting the others), and when it
   * listens again after a stop it was told of (`recovered` true).
   */
  report(message: string, recovered: boolean): void;
  /**
   * Told (in one line, at most one every 10 s counting the others) when a request's handler
   * threw; the request is answered 500. Default: nothing told.
   */
  failed?(message: string): void;
  /** How to listen on `port` (tests); default `Deno.serve` with the options above. */
  serve?(port: number): ServedLike;
}

/** The part of a `Deno.HttpServer` that {@linkcode serveLasting} uses. */
export interface ServedLike {
  /** Where it listens. */
  readonly addr: Deno.Addr;
  /** Settles when it stopped: rejected when accepting failed. */
  readonly finished: Promise<void>;
  /** Stops it, after the requests in flight. */
  shutdown(): Promise<void>;
}

/** A server started by {@linkcode serveLasting}. */
export interface LastingServer {
  /** Where it listens (the real port when 0 was asked). */
  readonly addr: { hostname: string; port: number };
  /** Stops it, any listening again, and the stopped servers' connections still open. */
  shutdown(): Promise<void>;
}

/**
 * Serves `handler` on `options`' address, listening again there after the server stopped on
 * an error: {@linkcode RELISTEN_MS} later, doubling up to 30 s while it keeps stopping within
 * a minute of listening or cannot listen yet (a flood that goes on holds the file
 * descriptors; the port taken meanwhile): it keeps trying until it listens or shuts down.
 * The last few stopped servers keep serving the connections they had.
 *
 * @throws {Deno.errors.AddrInUse} (and `Deno.serve`'s other errors) If the first listen fails.
 */
export function serveLasting(
  options: LastingServeOptions,
  handler: (request: Request) => Response | Promise<Response>,
): LastingServer {
  // Not Deno's default, which prints the error's stack on stderr for every failed request.
  const failed = limited((message) => options.failed?.(message));
  const onError = (error: unknown): Response => {
    failed(`a request failed: ${messageOf(error)}`);
    return new Response("Internal server error\n", { status: 500 });
  };
  const listen = options.serve ?? ((port: number): ServedLike => {
    const where = { hostname: options.hostname, port, onListen: () => {}, onError };
    const tls = options.tls;
    return tls === undefined
      ? Deno.serve(where, handler)
      : Deno.serve({ ...where, cert: tls.cert, key: tls.key }, handler);
  });
  let server = listen(options.port);
  const { hostname, port } = server.addr as Deno.NetAddr;
  // A stopped server still serves the connections it had: shut down with the rest.
  const stopped: ServedLike[] = [];
  let listenedAt = performance.now();
  let waitMs = RELISTEN_MS;
  let owed = false;
  let stopping = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const troubleLine = limited((message) => options.report(message, false));
  const trouble = (message: string) => {
    if (troubleLine(message)) owed = true;
  };
  const watch = (current: ServedLike) => {
    current.finished.catch((error) => {
      if (stopping) return;
      stopped.push(current);
      if (stopped.length > MAX_STOPPED) stopped.shift()!.shutdown().catch(() => {});
      const now = performance.now();
      if (now - listenedAt >= STABLE_MS) waitMs = RELISTEN_MS;
      trouble(`stopped accepting connections: ${messageOf(error)}; listening again`);
      relisten();
    });
  };
  const relisten = () => {
    const wait = waitMs;
    waitMs = Math.min(waitMs * 2, MAX_RELISTEN_MS);
    timer = setTimeout(() => {
      timer = undefined;
      if (stopping) return;
      try {
        server = listen(port);
      } catch (error) {
        // Out of descriptors still, or the port taken meanwhile: try again, later each time.
        trouble(`cannot listen again yet: ${messageOf(error)}; trying again`);
        return relisten();
      }
      listenedAt = performance.now();
      if (owed) options.report("listening again", true);
      owed = false;
      watch(server);
    }, wait);
  };
  watch(server);
  return {
    addr: { hostname, port },
    async shutdown(): Promise<void> {
      stopping = true;
      clearTimeout(timer);
      await Promise.all([server, ...stopped].map((s) => s.shutdown().catch(() => {})));
    },
  };
}

/**
 * Tells `tell` at most one line every {@linkcode REPORT_EVERY_MS}, the next one counting
 * those held back; the function returned says whether it told this one.
 */
function limited(tell: (message: string) => void): (message: string) => boolean {
  let toldAt = -Infinity;
  let held = 0;
  return (message) => {
    const now = performance.now();
    if (now - toldAt < REPORT_EVERY_MS) {
      held++;
      return false;
    }
    tell(held > 0 ? `${message} (${held} more since the last line)` : message);
    toldAt = now;
    held = 0;
    return true;
  };
}

function messageOf(error: unknown): string {
  return (error instanceof Error ? error.message : String(error)).split("\n")[0];
}
