/**
 * The bridge as a request handler, runtime-neutral: the origin check, the `authorize` and
 * `keyPrefix` hooks, the session cap, the grouping of a browser client's WebSockets, and
 * the static `/client.js` and page. Upgrading to a WebSocket is the runtime's part
 * (`upgradeWebSocket`, by default Deno's).
 *
 * @module
 */

import { type ClientInternals, clientInternals, LockClient } from "../client.ts";
import type { LockClientOptions } from "../options.ts";
import { contentLength, forMethod } from "../http_answer.ts";
import { BridgeSession, type BridgeSocket, ClientGroup, validPrefix } from "./session.ts";

/** Options of {@linkcode createBridgeHandler}. Give `servers` or `client`. */
export interface BridgeOptions {
  /** lockd addresses (as `LockClient` takes them); the bridge makes and owns its client. */
  servers?: string | readonly string[];
  /**
   * An existing `LockClient` to relay every session through (not closed by the bridge).
   * With `servers` instead, each browser client gets its own connection to lockd, so that
   * closing its last WebSocket also drops its queued acquires there; with a shared client
   * they stay queued (a grant that comes later is released at once).
   */
  client?: LockClient;
  /**
   * Exact origins (`https://app.example.com`) whose pages may connect. By default only
   * same-host pages (and clients that send no `Origin`, such as Deno) are accepted: a
   * cross-origin upgrade is refused with 403.
   */
  allowedOrigins?: readonly string[];
  /** Decides whether a WebSocket upgrade is allowed (e.g. check a bearer token or cookie). */
  authorize?: (request: Request) => boolean | Promise<boolean>;
  /**
   * Confines a session's keys: every key it uses is prefixed with this on the lockd side
   * (`"tenant-42:"`), invisibly to the browser. A function gets the upgrade request: derive
   * the prefix from what you authenticated (a verified cookie or token), never from what
   * the page merely asks for. A prefix with whitespace or control characters is refused.
   */
  keyPrefix?: string | ((request: Request) => string | Promise<string>);
  /** Release a session's held locks when its socket closes. Default `true` (else the lease covers). */
  releaseOnClose?: boolean;
  /** Most WebSocket sessions at once; more are refused with 503. Default 1000. */
  maxSessions?: number;
  /** Most acquires in flight per session; more are answered `E` (releases and extends always pass). Default 100. */
  maxInFlight?: number;
  /** Only upgrade requests to this path (e.g. `/lockd`). Default: any path. */
  path?: string;
  /** A browser build of the client, served at `/client.js` when given. */
  clientScript?: string;
  /** An HTML page served at `/` when given (e.g. the demo). */
  page?: string;
  /**
   * Options of the clients the bridge makes with `servers`: e.g. the bridge's own `auth`
   * credential for a server that requires one, `caCerts` for `tls://` servers.
   */
  clientOptions?: LockClientOptions;
  /**
   * Turns an upgrade request into a WebSocket and the response that completes it. Default
   * (from `@lockd/client/bridge`): `Deno.upgradeWebSocket`; give your runtime's own elsewhere.
   */
  upgradeWebSocket?: UpgradeWebSocket;
  /**
   * Where the bridge reports a session it refused for a fault of its own (an invalid key
   * prefix, an upgrade that failed), as one line of text. Default: `console.error`. The
   * message never holds a credential or a token.
   */
  onError?: (message: string) => void;
}

/** A runtime's WebSocket upgrade: the socket (with the standard surface) and the response. */
export type UpgradeWebSocket = (request: Request) => { socket: BridgeSocket; response: Response };

/** A request handler with a way to end its sessions. */
export interface BridgeHandler {
  /** Handles one HTTP request (WebSocket upgrades, `/client.js`, the page). */
  (request: Request): Response | Promise<Response>;
  /** Closes every session; resolves once their locks are released. */
  close(): Promise<void>;
}

const FORBIDDEN = () => new Response("Forbidden: origin not allowed\n", { status: 403 });

/**
 * Creates the bridge handler with `upgrade` as the runtime's WebSocket upgrade. The public
 * entry (`createBridgeHandler` of `@lockd/client/bridge`) supplies Deno's by default.
 *
 * @throws {TypeError} If neither `servers` nor `client` is given.
 */
export function createHandler(options: BridgeOptions, upgrade: UpgradeWebSocket): BridgeHandler {
  if (options.client === undefined && options.servers === undefined) {
    throw new TypeError("createBridgeHandler needs `servers` or `client`");
  }
  const shared = options.client === undefined ? undefined : clientInternals.get(options.client)!;
  const allowed = options.allowedOrigins?.map(normalizeOrigin);
  const sessions = new Set<BridgeSession>();
  const groups = new Map<string, ClientGroup>();
  const maxSessions = options.maxSessions ?? 1000;
  const releaseOnClose = options.releaseOnClose ?? true;
  let upgrading = 0;
  let closing = false;

  /** A new client's relay: its own connection with `servers` (closing it drops its queued
   * acquires on lockd), or the shared client. */
  const relayFor = (): { relay: ClientInternals; client?: LockClient } => {
    if (shared !== undefined) return { relay: shared };
    const client = new LockClient(options.servers!, {
      ...options.clientOptions,
      connectionsPerAddress: 1,
    });
    return { relay: clientInternals.get(client)!, client };
  };

  const report = options.onError ?? ((message: string) => console.error(message));
  const upgradeSession = async (request: Request, url: URL): Promise<Response> => {
    if (!originAllowed(request, allowed)) return FORBIDDEN();
    if (options.authorize && !(await options.authorize(request))) {
      return new Response("Unauthorized\n", { status: 401 });
    }
    const prefix = typeof options.keyPrefix === "function"
      ? await options.keyPrefix(request)
      : options.keyPrefix ?? "";
    if (!validPrefix(prefix)) {
      // A prefix with a space or line break would let a page write raw protocol lines.
      report(`lockd bridge: refusing a session: invalid key prefix ${JSON.stringify(prefix)}`);
      return new Response("Invalid key prefix\n", { status: 500 });
    }
    let upgraded: { socket: BridgeSocket; response: Response };
    try {
      upgraded = upgrade(request);
    } catch {
      return new Response("Bad WebSocket upgrade\n", { status: 400 });
    }
    // The connections of one LockClient carry the same `client` id: they share grants, and
    // what they hold is released once the last of them closes.
    const clientId = url.searchParams.get("client");
    const groupKey = clientId === null ? undefined : `${prefix}\u0000${clientId}`;
    let group = groupKey === undefined ? undefined : groups.get(groupKey);
    if (group === undefined) {
      const { relay, client } = relayFor();
      group = new ClientGroup(relay, client, releaseOnClose, () => {
        if (groupKey !== undefined) groups.delete(groupKey);
      });
      if (groupKey !== undefined) groups.set(groupKey, group);
    }
    const session = new BridgeSession(upgraded.socket, group, {
      prefix,
      maxInFlight: options.maxInFlight ?? 100,
      onEnd: () => sessions.delete(session),
    });
    sessions.add(session);
    return upgraded.response;
  };

  const handler = async (request: Request): Promise<Response> => {
    let url: URL;
    try {
      url = new URL(request.url);
    } catch {
      return plain(request, 400, "Bad request: the URL is not valid (check the Host header)\n");
    }
    const upgrade = request.headers.get("upgrade")?.toLowerCase() === "websocket";
    if (!upgrade) {
      const get = request.method === "GET" || request.method === "HEAD";
      if (get && url.pathname === "/client.js" && options.clientScript) {
        // Public code: any page may import it (connecting is what the origin check guards).
        return plain(request, 200, options.clientScript, {
          "content-type": "text/javascript; charset=utf-8",
          "access-control-allow-origin": "*",
        });
      }
      if (get && url.pathname === "/" && options.page) {
        return plain(request, 200, options.page, { "content-type": "text/html; charset=utf-8" });
      }
      return plain(request, 404, "Not found\n");
    }
    if (options.path !== undefined && url.pathname !== options.path) {
      return new Response("Not found\n", { status: 404 });
    }
    // Count upgrades under way too: the checks below await.
    if (closing || sessions.size + upgrading >= maxSessions) {
      return new Response("Too many sessions\n", { status: 503 });
    }
    upgrading++;
    try {
      return await upgradeSession(request, url);
    } catch (error) {
      report(`lockd bridge: refusing a session: ${error instanceof Error ? error.message : error}`);
      return new Response("Internal error\n", { status: 500 });
    } finally {
      upgrading--;
    }
  };

  return Object.assign(handler, {
    async close(): Promise<void> {
      closing = true;
      await Promise.all([...sessions].map((s) => s.end()));
    },
  });
}

/** `https://App.example.com:443/` → `https://app.example.com`; unparsable stays as is. */
function normalizeOrigin(origin: string): string {
  try {
    return new URL(origin).origin;
  } catch {
    return origin;
  }
}

/** Same host, or a listed origin; requests without `Origin` (not from a browser) pass. */
function originAllowed(request: Request, allowed: readonly string[] | undefined): boolean {
  const origin = request.headers.get("origin");
  if (origin === null) return true;
  if (allowed !== undefined) return allowed.includes(normalizeOrigin(origin));
  try {
    return new URL(origin).host === new URL(request.url).host;
  } catch {
    return false;
  }
}

/** An answer to a request that is not an upgrade (a HEAD gets no body: `forMethod`). */
function plain(
  request: Request,
  status: number,
  body: string,
  headers: Record<string, string> = {},
): Response {
  const init = { status, headers: { ...headers, "content-length": contentLength(body) } };
  return forMethod(request, new Response(body, init));
}
