/**
 * The lockd WebSocket bridge: lets browsers and edge code take lockd locks and read fencing
 * tokens with the same `LockClient` API, over `ws://` or `wss://`. Each WebSocket text frame
 * carries one line of the lockd protocol (SPEC §2); the bridge relays it through a
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
 * import { serveBridge } from "jsr:@lockd/client/bridge";
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

import { keyError, MAX_KEY_BYTES, MAX_LINE_BYTES, parseRequest, utf8Length } from "./codec.ts";
import { type ClientInternals, clientInternals, LockClient } from "./client.ts";

export { LockClient };
export type { AcquireOptions, LockClientOptions, TryAcquireOptions } from "./client.ts";
export type { Lock } from "./lock.ts";
export type { Address, Connect, Transport, TransportHandlers } from "./transport.ts";

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
}

/** Options of {@linkcode serveBridge}: the handler's, plus where to listen. */
export interface ServeBridgeOptions extends BridgeOptions {
  /** Interface to listen on. Default `127.0.0.1`. */
  hostname?: string;
  /** Port; 0 picks a free one. Default 8080. */
  port?: number;
}

/** A running bridge. */
export interface BridgeServer {
  /** Where it listens (the real port when 0 was asked). */
  readonly addr: { hostname: string; port: number };
  /** Closes every session (releasing their locks, per `releaseOnClose`), then stops. */
  shutdown(): Promise<void>;
}

/** A request handler with a way to end its sessions. */
export interface BridgeHandler {
  /** Handles one HTTP request (WebSocket upgrades, `/client.js`, the page). */
  (request: Request): Response | Promise<Response>;
  /** Closes every session; resolves once their locks are released. */
  close(): Promise<void>;
}

const FORBIDDEN = () => new Response("Forbidden: origin not allowed\n", { status: 403 });

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
 * ```ts ignore
 * import { createBridgeHandler } from "jsr:@lockd/client/bridge";
 * const bridge = createBridgeHandler({ servers: "127.0.0.1:7321", path: "/lockd" });
 * Deno.serve((request) => {
 *   const url = new URL(request.url);
 *   return url.pathname === "/lockd" ? bridge(request) : new Response("app");
 * });
 * ```
 */
export function createBridgeHandler(options: BridgeOptions): BridgeHandler {
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
    const client = new LockClient(options.servers!, { connectionsPerAddress: 1 });
    return { relay: clientInternals.get(client)!, client };
  };

  const upgradeSession = async (request: Request, url: URL): Promise<Response> => {
    if (!originAllowed(request, allowed)) return FORBIDDEN();
    if (options.authorize && !(await options.authorize(request))) {
      return new Response("Unauthorized\n", { status: 401 });
    }
    const prefix = typeof options.keyPrefix === "function"
      ? await options.keyPrefix(request)
      : options.keyPrefix ?? "";
    if (typeof prefix !== "string" || (prefix !== "" && keyError(prefix) !== undefined)) {
      // A prefix with a space or line break would let a page write raw protocol lines.
      console.error(
        `lockd bridge: refusing a session: invalid key prefix ${JSON.stringify(prefix)}`,
      );
      return new Response("Invalid key prefix\n", { status: 500 });
    }
    let upgraded: { socket: WebSocket; response: Response };
    try {
      upgraded = Deno.upgradeWebSocket(request);
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
    const url = new URL(request.url);
    const upgrade = request.headers.get("upgrade")?.toLowerCase() === "websocket";
    if (!upgrade) {
      const get = request.method === "GET" || request.method === "HEAD";
      if (get && url.pathname === "/client.js" && options.clientScript) {
        // Public code: any page may import it (connecting is what the origin check guards).
        return new Response(request.method === "HEAD" ? null : options.clientScript, {
          headers: {
            "content-type": "text/javascript; charset=utf-8",
            "access-control-allow-origin": "*",
          },
        });
      }
      if (get && url.pathname === "/" && options.page) {
        return new Response(request.method === "HEAD" ? null : options.page, {
          headers: { "content-type": "text/html; charset=utf-8" },
        });
      }
      return new Response("Not found\n", { status: 404 });
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
      console.error(
        `lockd bridge: refusing a session: ${error instanceof Error ? error.message : error}`,
      );
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

/**
 * Runs a bridge on its own HTTP server (`Deno.serve`).
 *
 * @param options The handler's options, plus `hostname` and `port`.
 * @returns The running bridge: its address and `shutdown()`.
 * @throws {Deno.errors.AddrInUse} If the address is taken.
 *
 * @example A bridge on a free port
 * ```ts ignore
 * import { serveBridge } from "jsr:@lockd/client/bridge";
 * const bridge = serveBridge({ servers: "127.0.0.1:7321", port: 0 });
 * console.log(`ws://127.0.0.1:${bridge.addr.port}/`);
 * await bridge.shutdown();
 * ```
 */
export function serveBridge(options: ServeBridgeOptions): BridgeServer {
  const handler = createBridgeHandler(options);
  const server = Deno.serve({
    hostname: options.hostname ?? "127.0.0.1",
    port: options.port ?? 8080,
    onListen: () => {},
  }, handler);
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

interface SessionOptions {
  prefix: string;
  maxInFlight: number;
  onEnd: () => void;
}

/**
 * The sessions of one browser client (its WebSocket connections share a `client` id): the
 * grants any of them obtained, released when the last session closes (`releaseOnClose`).
 */
class ClientGroup {
  /** How this client's requests reach lockd. */
  readonly relay: ClientInternals;
  /** Its own connection to lockd (with `servers`), closed when the client leaves. */
  #client: LockClient | undefined;
  /** Grants held: lockd key → tokens. */
  #held = new Map<string, Set<bigint>>();
  #sessions = 0;
  #releaseOnClose: boolean;
  #onEmpty: () => void;

  constructor(
    relay: ClientInternals,
    client: LockClient | undefined,
    releaseOnClose: boolean,
    onEmpty: () => void,
  ) {
    this.relay = relay;
    this.#client = client;
    this.#releaseOnClose = releaseOnClose;
    this.#onEmpty = onEmpty;
  }

  join(): void {
    this.#sessions++;
  }

  holds(key: string, token: bigint): boolean {
    return this.#held.get(key)?.has(token) ?? false;
  }

  hold(key: string, token: bigint): void {
    let tokens = this.#held.get(key);
    if (tokens === undefined) this.#held.set(key, tokens = new Set());
    tokens.add(token);
  }

  unhold(key: string, token: bigint): void {
    const tokens = this.#held.get(key);
    tokens?.delete(token);
    if (tokens?.size === 0) this.#held.delete(key);
  }

  /**
   * A session closed; the last one out releases what the client held, then closes its own
   * connection to lockd (with `servers`), which drops its queued acquires there.
   */
  async leave(): Promise<void> {
    if (--this.#sessions > 0) return;
    this.#onEmpty();
    const held = [...this.#held].flatMap(([key, tokens]) =>
      [...tokens].map((t) => [key, t] as const)
    );
    this.#held.clear();
    if (this.#releaseOnClose) {
      await Promise.all(held.map(([key, token]) => this.relay.release(key, token).catch(() => {})));
    }
    // Closing this client's own connection drops its queued acquires on lockd.
    await this.#client?.close();
  }
}

/** One WebSocket: relays its lines, keeps reply order per (op, key), tracks its locks. */
class BridgeSession {
  #socket: WebSocket;
  #group: ClientGroup;
  #options: SessionOptions;
  /** Replies not sent yet, per (op, key), in request order. */
  #order = new Map<string, { text: string | undefined }[]>();
  #inFlight = 0;
  #closed = false;
  #ended: Promise<void>;
  #end!: () => void;
  #cleanups: Promise<unknown>[] = [];

  constructor(socket: WebSocket, group: ClientGroup, options: SessionOptions) {
    this.#socket = socket;
    this.#group = group;
    this.#options = options;
    group.join();
    this.#ended = new Promise((resolve) => this.#end = resolve);
    socket.onmessage = (event) => this.#message(event.data);
    socket.onclose = () => this.#closedBySocket();
    socket.onerror = () => {};
  }

  /** Closes the socket (going away) and resolves once cleanup is done. */
  end(): Promise<void> {
    if (
      this.#socket.readyState === WebSocket.OPEN || this.#socket.readyState === WebSocket.CONNECTING
    ) {
      try {
        this.#socket.close(1001, "bridge shutting down");
      } catch {
        // Already closing.
      }
    }
    this.#closedBySocket();
    return this.#ended;
  }

  #message(data: unknown): void {
    if (this.#closed) return;
    if (typeof data !== "string") {
      this.#send("- - E binary frames are not supported");
      return;
    }
    if (data.length > MAX_LINE_BYTES || utf8Length(data) > MAX_LINE_BYTES) {
      this.#send("- - E line too long");
      this.#socket.close(1009, "line too long");
      return;
    }
    if (data.includes("\n") || data.includes("\r")) {
      this.#send("- - E one line per frame, without line ending");
      return;
    }
    if (data === "") return;
    const request = parseRequest(data, { maxLeaseMs: Number.MAX_SAFE_INTEGER });
    if ("kind" in request) {
      this.#reply(request.op, request.key, `E ${request.message}`);
      return;
    }
    const { op, key } = request;
    const target = this.#options.prefix + key;
    if (utf8Length(target) > MAX_KEY_BYTES) { // The prefix itself is checked at upgrade.
      this.#reply(
        op,
        key,
        `E key must be at most ${MAX_KEY_BYTES - utf8Length(this.#options.prefix)} bytes here`,
      );
      return;
    }
    // Only acquires count: a release or an extend must always get through.
    if (request.op === "A" && this.#inFlight >= this.#options.maxInFlight) {
      this.#reply(op, key, "E too many acquires in flight on this session");
      return;
    }
    if (request.op !== "A" && !this.#group.holds(target, request.token)) {
      // Only grants of this client: tokens are easy to guess.
      this.#reply(op, key, "N");
      return;
    }
    const line = `${op} ${target}${data.slice(op.length + 1 + key.length)}`;
    const slot = this.#slot(op, key);
    const counted = request.op === "A";
    if (counted) this.#inFlight++;
    this.#group.relay.exchange(op, target, line).then((reply) => {
      if (this.#closed) {
        // The page is gone: a late grant is released at once.
        if (reply.status === "A") this.#track(this.#group.relay.release(target, reply.token!));
        return;
      }
      if (reply.status === "A") this.#group.hold(target, reply.token!);
      if (request.op !== "A" && (reply.status === "R" || reply.status === "N")) {
        this.#group.unhold(target, request.token);
      }
      slot.text = reply.status === "A"
        ? `A ${reply.token}`
        : reply.status === "E" || reply.status === "M"
        ? `${reply.status} ${reply.text ?? ""}`
        : reply.status;
      this.#flush(op, key);
    }, () => {
      // No usable lockd connection (or the client closed): let the page's client retry.
      slot.text = "E no active node";
      this.#flush(op, key);
    }).finally(() => {
      if (counted) this.#inFlight--;
    });
  }

  /** Reserves the next reply slot of (op, key). */
  #slot(op: string, key: string): { text: string | undefined } {
    const id = `${op} ${key}`;
    const slot = { text: undefined as string | undefined };
    const queue = this.#order.get(id);
    if (queue === undefined) this.#order.set(id, [slot]);
    else queue.push(slot);
    return slot;
  }

  /** Replies now, or behind earlier replies of the same (op, key). */
  #reply(op: string, key: string, rest: string): void {
    this.#slot(op, key).text = rest;
    this.#flush(op, key);
  }

  #flush(op: string, key: string): void {
    const id = `${op} ${key}`;
    const queue = this.#order.get(id);
    while (queue !== undefined && queue.length > 0 && queue[0].text !== undefined) {
      this.#send(`${op} ${key} ${queue.shift()!.text}`);
    }
    if (queue?.length === 0) this.#order.delete(id);
  }

  #send(line: string): void {
    if (this.#socket.readyState === WebSocket.OPEN) this.#socket.send(line);
  }

  #track(promise: Promise<unknown>): void {
    this.#cleanups.push(promise.catch(() => {}));
  }

  #closedBySocket(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#order.clear();
    // Done once the client's locks are released (when this was its last session). Requests
    // still in flight finish on their own: a grant that arrives for them is released at once.
    this.#track(this.#group.leave());
    Promise.all(this.#cleanups).finally(() => {
      this.#options.onEnd();
      this.#end();
    });
  }
}
