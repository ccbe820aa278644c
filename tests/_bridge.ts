/**
 * Shared fixture of the WebSocket bridge tests (tests/bridge_test.ts, bridge_access_test.ts,
 * bridge_sessions_test.ts): a raw WebSocket that collects text frames as lines, a real lockd
 * process behind a bridge made with `serveBridge()` (closed with everything opened during a
 * test), plain HTTP upgrade requests for the refused upgrades, and reply parsing.
 */

import assert from "node:assert/strict";
import { type BridgeServer, serveBridge, type ServeBridgeOptions } from "../client/bridge.ts";
import { LockClient } from "../mod.ts";
import { LineClient, type ServerProcess, startServer } from "./_helpers.ts";

/** A raw WebSocket to a bridge that collects the text frames it receives, as lines. */
export class WsLines {
  readonly socket: WebSocket;
  /** Resolves with the close event, however the socket closed. */
  readonly closed: Promise<CloseEvent>;
  #lines: string[] = [];
  #waiting: ((line: string) => void) | undefined;

  private constructor(socket: WebSocket) {
    this.socket = socket;
    this.closed = new Promise((resolve) => socket.addEventListener("close", resolve));
    socket.addEventListener("message", (event) => {
      const line = typeof event.data === "string" ? event.data : `<binary ${event.data}>`;
      if (this.#waiting) this.#waiting(line);
      else this.#lines.push(line);
    });
  }

  /** Opens a WebSocket; rejects (after it is closed) if the upgrade is refused. */
  static async open(url: string, headers?: HeadersInit): Promise<WsLines> {
    const socket = new WebSocket(url, headers === undefined ? undefined : { headers });
    const ws = new WsLines(socket);
    const opened = await new Promise<boolean>((resolve) => {
      socket.addEventListener("open", () => resolve(true), { once: true });
      socket.addEventListener("close", () => resolve(false), { once: true });
    });
    if (!opened) {
      await ws.closed;
      throw new Error(`WebSocket ${url} was refused`);
    }
    return ws;
  }

  send(data: string | Uint8Array<ArrayBuffer>): void {
    this.socket.send(data);
  }

  /** The next line received; rejects after `timeoutMs`. */
  next(timeoutMs = 3000): Promise<string> {
    const line = this.#lines.shift();
    if (line !== undefined) return Promise.resolve(line);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#waiting = undefined;
        reject(new Error(`no frame within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#waiting = (l) => {
        clearTimeout(timer);
        this.#waiting = undefined;
        resolve(l);
      };
    });
  }

  /** Sends `line` and returns the next line received. */
  async request(line: string, timeoutMs = 3000): Promise<string> {
    this.send(line);
    return await this.next(timeoutMs);
  }

  /** `true` if nothing arrives within `ms`. */
  async silentFor(ms: number): Promise<boolean> {
    if (this.#lines.length > 0) return false;
    try {
      const line = await this.next(ms);
      this.#lines.unshift(line);
      return false;
    } catch {
      return true;
    }
  }

  /** Closes the socket and waits for the close to complete. */
  async close(): Promise<CloseEvent> {
    if (this.socket.readyState <= WebSocket.OPEN) this.socket.close();
    return await this.closed;
  }
}

/** `A <key> A <token>` → the token. */
export function tokenOf(reply: string | null, key: string): bigint {
  const match = new RegExp(`^A ${key.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")} A (\\d+)$`)
    .exec(reply ?? "");
  assert.ok(match, `expected a grant of ${key}, got ${JSON.stringify(reply)}`);
  return BigInt(match[1]);
}

/** Headers of a WebSocket upgrade request (for `fetch`, which passes them through). */
export function upgradeHeaders(extra: Record<string, string> = {}): Record<string, string> {
  return {
    upgrade: "websocket",
    connection: "Upgrade",
    "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
    "sec-websocket-version": "13",
    ...extra,
  };
}

/**
 * Sends an upgrade request with plain `fetch` and returns the HTTP status. Only for upgrades
 * that must be refused (an accepted one would switch protocols).
 */
export async function refusedUpgrade(
  url: string,
  extra: Record<string, string> = {},
): Promise<number> {
  const response = await fetch(url.replace(/^ws/, "http"), { headers: upgradeHeaders(extra) });
  await response.body?.cancel();
  return response.status;
}

/** Whether a WebSocket with these headers is accepted (opened, then closed again). */
export async function accepted(url: string, headers?: HeadersInit): Promise<boolean> {
  try {
    const ws = await WsLines.open(url, headers);
    await ws.close();
    return true;
  } catch {
    return false;
  }
}

/** A real lockd, a bridge to it, and everything opened during a test (closed at the end). */
export class Fixture {
  readonly server: ServerProcess;
  readonly bridge: BridgeServer;
  readonly url: string;
  #sockets: WsLines[] = [];
  #lines: LineClient[] = [];
  #clients: LockClient[] = [];

  constructor(server: ServerProcess, bridge: BridgeServer) {
    this.server = server;
    this.bridge = bridge;
    this.url = `ws://127.0.0.1:${bridge.addr.port}/`;
  }

  /** A raw WebSocket to the bridge (`suffix` is appended to its URL). */
  async ws(suffix = "", headers?: HeadersInit): Promise<WsLines> {
    const ws = await WsLines.open(this.url + suffix, headers);
    this.#sockets.push(ws);
    return ws;
  }

  /** A raw TCP client of lockd itself. */
  async raw(): Promise<LineClient> {
    const line = await LineClient.connect(this.server.port);
    this.#lines.push(line);
    return line;
  }

  /** A `LockClient` of the bridge. */
  client(suffix = ""): LockClient {
    const client = new LockClient(this.url + suffix);
    this.#clients.push(client);
    return client;
  }

  async cleanup(): Promise<void> {
    await Promise.all(this.#clients.map((c) => c.close()));
    await Promise.all(this.#sockets.map((s) => s.close()));
    await this.bridge.shutdown();
    await Promise.all(this.#lines.map((l) => l.close()));
    await this.server.stop();
    await Deno.remove(this.server.dataDir, { recursive: true }).catch(() => {});
  }
}

/** Starts lockd and a bridge to it (`serveBridge` on a free port), runs `fn`, cleans up. */
export async function withBridge(
  options: Omit<ServeBridgeOptions, "servers" | "port" | "client">,
  fn: (f: Fixture) => Promise<void>,
): Promise<void> {
  const server = await startServer();
  let bridge: BridgeServer;
  try {
    bridge = serveBridge({ ...options, servers: server.address, port: 0 });
  } catch (error) {
    await server.stop();
    throw error;
  }
  const fixture = new Fixture(server, bridge);
  try {
    await fn(fixture);
  } finally {
    await fixture.cleanup();
  }
}

/** Bridge port from a ready line ending in `, bridge on ws://HOST:PORT/`. */
export function bridgePort(ready: string): number {
  const match = /, bridge on ws:\/\/127\.0\.0\.1:(\d+)\/$/.exec(ready);
  assert.ok(match, `ready line without the bridge: ${ready}`);
  return Number(match[1]);
}
