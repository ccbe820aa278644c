/**
 * `--http host:port` (docs/server.md, "HTTP endpoints"): the endpoints of `http_routes.ts`
 * on their own `Deno.serve` listener (HTTPS with the node's certificate), or on the bridge's
 * when `--http` and `--bridge` name the same address: then WebSocket upgrades go to the
 * bridge and every other request to the endpoints.
 *
 * @module
 */

import {
  type BridgeHandler,
  type BridgeServer,
  createBridgeHandler,
  serveBridge,
  type ServeBridgeOptions,
} from "../client/bridge.ts";
import { serveLasting } from "../client/bridge/deno.ts";
import { type Config, formatHostPort, type HostPort } from "./cli.ts";
import { httpRoutes, type HttpRoutesOptions, type HttpSource, notFound } from "./http_routes.ts";
import type { Logger } from "./log.ts";
import type { Security } from "./security.ts";

/**
 * Whether `a` and `b` are the same `HOST:PORT` as written (port 0 included: `--http` and
 * `--bridge` both at `127.0.0.1:0` share one free port).
 */
export function sameAddress(a: HostPort, b: HostPort): boolean {
  return a.hostname === b.hostname && a.port === b.port;
}

/** Why listening failed, for a fatal message: an address in use names the flag to change. */
export function listenFailure(error: unknown, flag: string): string {
  if (error instanceof Deno.errors.AddrInUse) {
    return `the address is already in use; choose another ${flag}`;
  }
  return error instanceof Error ? error.message : String(error);
}

/** Options of {@linkcode serveHttp}. */
export interface ServeHttpOptions extends HttpRoutesOptions {
  /** Interface to listen on. */
  hostname: string;
  /** Port; 0 picks a free one. */
  port: number;
  /** What the endpoints read. */
  source: HttpSource;
  /** Serve HTTPS with this certificate chain and key (PEM). Default: plain HTTP. */
  tls?: { cert: string; key: string };
  /**
   * Told when the listener stopped accepting (out of file descriptors), and when it listens
   * again (`recovered`).
   */
  report?: (message: string, recovered: boolean) => void;
}

/** The running HTTP endpoints. */
export interface HttpServer {
  /** Where it listens (the real port when 0 was asked). */
  readonly addr: HostPort;
  /** Its base URL, `http://HOST:PORT/` (`https://` with TLS), as the ready line shows it. */
  readonly url: string;
  /** Whether it listens where `where` asks, as written: a bridge there shares the listener. */
  serves(where: HostPort): boolean;
  /** Hands WebSocket upgrades (at any path) to `bridge`. */
  mount(bridge: BridgeHandler): void;
  /** Stops listening (after the requests in flight). */
  shutdown(): Promise<void>;
}

/**
 * Serves the endpoints on `Deno.serve`.
 *
 * @throws {Error} If the address is taken or cannot be listened on (the message says which).
 */
export function serveHttp(options: ServeHttpOptions): HttpServer {
  const routes = httpRoutes(options.source, options);
  const asked: HostPort = { hostname: options.hostname, port: options.port };
  let bridge: BridgeHandler | undefined;
  const handler = (request: Request): Response | Promise<Response> => {
    if (bridge !== undefined && request.headers.get("upgrade")?.toLowerCase() === "websocket") {
      return bridge(request);
    }
    // A shared bridge serves no page of its own (--bridge-demo needs its own address).
    return routes(request) ?? notFound(request);
  };
  let server: ReturnType<typeof serveLasting>;
  try {
    server = serveLasting(
      {
        ...asked,
        tls: options.tls,
        report: options.report ?? (() => {}),
        failed: (message) => options.onError?.(new Error(message)),
      },
      handler,
    );
  } catch (error) {
    throw new Error(
      `cannot serve --http on ${formatHostPort(asked)}: ${listenFailure(error, "--http")}`,
    );
  }
  const addr = { hostname: server.addr.hostname, port: server.addr.port };
  let stopped: Promise<void> | undefined;
  return {
    addr,
    url: `${options.tls === undefined ? "http" : "https"}://${formatHostPort(addr)}/`,
    serves: (other) => sameAddress(asked, other),
    mount(handler: BridgeHandler): void {
      bridge = handler;
    },
    shutdown(): Promise<void> {
      return stopped ??= server.shutdown();
    },
  };
}

/**
 * The HTTP endpoints `config` asks for (`--http`), over `source`, with the node's TLS; with
 * `--auth-file`, `/locks` and `/` take the bridge's tokens when `--bridge-token-file` is
 * given (else they stay open, which is logged once).
 *
 * @returns The running endpoints, or `undefined` without `--http`.
 * @throws {Error} If the address cannot be listened on.
 */
export function startHttp(
  config: Config,
  source: HttpSource,
  options: { security: Security; log: Logger },
): HttpServer | undefined {
  if (config.http === undefined) return undefined;
  const { security, log } = options;
  const token = config.authFile === undefined ? undefined : security.bridgeToken;
  if (config.authFile !== undefined && token === undefined) {
    log.warn(
      "--http: /locks and the status page list keys and holder names to anyone who reaches " +
        `${formatHostPort(config.http)} (give --bridge-token-file to require a token)`,
      { event: "http-open" },
    );
  }
  const http = serveHttp({
    hostname: config.http.hostname,
    port: config.http.port,
    source,
    tls: security.tls && { cert: security.tls.cert, key: security.tls.key },
    token,
    report: (message, recovered) => {
      const line = `--http on ${formatHostPort(http.addr)}: ${message}`;
      if (recovered) log.info(line, { event: "http-listen" });
      else log.error(line, { event: "http-listen" });
    },
    onError: (error) =>
      log.error(`--http: ${error instanceof Error ? error.message : String(error)}`, {
        event: "http-error",
      }),
  });
  return http;
}

/**
 * Runs the bridge: on `http`'s listener when it serves the bridge's address (the same
 * `HOST:PORT`), else on its own (`serveBridge`).
 *
 * @throws {Deno.errors.AddrInUse} If the bridge's own address is taken.
 */
export function serveBridgeOn(
  http: HttpServer | undefined,
  options: ServeBridgeOptions,
): BridgeServer {
  const where = { hostname: options.hostname ?? "127.0.0.1", port: options.port ?? 8080 };
  if (http === undefined || !http.serves(where)) return serveBridge(options);
  const handler = createBridgeHandler(options);
  http.mount(handler);
  let stopped: Promise<void> | undefined;
  return {
    addr: http.addr,
    // The listener is the HTTP server's: it stops with it.
    shutdown: () => stopped ??= handler.close(),
  };
}
