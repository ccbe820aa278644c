/**
 * Tests of the WebSocket bridge (issue 5, docs/protocol.md and docs/client.md) from Deno, without a browser: a real
 * lockd process (`server/main.ts` on a free port) behind a bridge made in this process with
 * `serveBridge()` / `createBridgeHandler()` (or by `--bridge`), reached with `LockClient`
 * over `ws://`, with raw WebSockets (one line per text frame), and with plain HTTP requests
 * for the refused upgrades. What lockd itself holds is checked with raw TCP clients.
 */

import assert from "node:assert/strict";
import { setTimeout as delay } from "node:timers/promises";
import {
  type BridgeHandler,
  type BridgeServer,
  createBridgeHandler,
  serveBridge,
  type ServeBridgeOptions,
} from "../client/bridge.ts";
import { LockClient, LockUnavailableError } from "../mod.ts";
import { LineClient, type ServerProcess, startServer } from "./_helpers.ts";

// ---------------------------------------------------------------------------------------
// Local helpers

/** A raw WebSocket to a bridge that collects the text frames it receives, as lines. */
class WsLines {
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
function tokenOf(reply: string | null, key: string): bigint {
  const match = new RegExp(`^A ${key.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")} A (\\d+)$`)
    .exec(reply ?? "");
  assert.ok(match, `expected a grant of ${key}, got ${JSON.stringify(reply)}`);
  return BigInt(match[1]);
}

/** Headers of a WebSocket upgrade request (for `fetch`, which passes them through). */
function upgradeHeaders(extra: Record<string, string> = {}): Record<string, string> {
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
async function refusedUpgrade(url: string, extra: Record<string, string> = {}): Promise<number> {
  const response = await fetch(url.replace(/^ws/, "http"), { headers: upgradeHeaders(extra) });
  await response.body?.cancel();
  return response.status;
}

/** Whether a WebSocket with these headers is accepted (opened, then closed again). */
async function accepted(url: string, headers?: HeadersInit): Promise<boolean> {
  try {
    const ws = await WsLines.open(url, headers);
    await ws.close();
    return true;
  } catch {
    return false;
  }
}

/** A real lockd, a bridge to it, and everything opened during a test (closed at the end). */
class Fixture {
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
async function withBridge(
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
function bridgePort(ready: string): number {
  const match = /, bridge on ws:\/\/127\.0\.0\.1:(\d+)\/$/.exec(ready);
  assert.ok(match, `ready line without the bridge: ${ready}`);
  return Number(match[1]);
}

// ---------------------------------------------------------------------------------------
// Relaying through a LockClient

Deno.test("LockClient over ws:// acquires, extends and releases through the bridge", async () => {
  await withBridge({}, async (f) => {
    const client = f.client();
    const raw = await f.raw();
    const lock = await client.acquire("bridge:door", { lease: 30 });
    assert.equal(typeof lock.token, "bigint");
    assert.equal(lock.key, "bridge:door");
    // lockd itself holds the key for the bridge.
    assert.equal(await raw.request("A bridge:door 30 0.001"), "A bridge:door T");
    await lock.extend(60);
    assert.equal(lock.lease, 60);
    await lock.release();
    const next = tokenOf(await raw.request("A bridge:door 30 0.001"), "bridge:door");
    assert.ok(next > lock.token, `${next} > ${lock.token}`);
    assert.equal(await raw.request(`R bridge:door ${next}`), "R bridge:door R");
    // The page-side timeout (T) and try-lock go through too.
    const held = tokenOf(await raw.request("A bridge:busy 30 0"), "bridge:busy");
    assert.equal(await client.tryAcquire("bridge:busy"), null);
    assert.equal(await raw.request(`R bridge:busy ${held}`), "R bridge:busy R");
  });
});

Deno.test("--bridge serves the bridge from the lockd process", async () => {
  const server = await startServer({ args: ["--bridge", "127.0.0.1:0"] });
  const client = new LockClient(`ws://127.0.0.1:${bridgePort(server.ready)}/`);
  try {
    assert.match(server.ready, /^listening on 127\.0\.0\.1:\d+ as active, bridge on ws:\/\//);
    const port = bridgePort(server.ready);
    const lock = await client.acquire("main:bridge", { lease: 10 });
    assert.equal(typeof lock.token, "bigint");
    await lock.release();
    // Without --bridge-demo there is no page and no script.
    for (const path of ["/", "/client.js"]) {
      const response = await fetch(`http://127.0.0.1:${port}${path}`);
      await response.body?.cancel();
      assert.equal(response.status, 404, path);
    }
  } finally {
    await client.close();
    assert.equal(await server.stop(), 0);
    await Deno.remove(server.dataDir, { recursive: true });
  }
});

Deno.test("--bridge-demo serves the demo page at / and the client bundle at /client.js", async () => {
  const server = await startServer({ args: ["--bridge", "127.0.0.1:0", "--bridge-demo"] });
  try {
    const base = `http://127.0.0.1:${bridgePort(server.ready)}`;
    const page = await fetch(`${base}/`);
    assert.equal(page.status, 200);
    assert.match(page.headers.get("content-type") ?? "", /^text\/html/);
    assert.match(await page.text(), /import \{[^}]*LockClient[^}]*\} from "\/client\.js"/);
    const script = await fetch(`${base}/client.js`);
    assert.equal(script.status, 200);
    assert.match(script.headers.get("content-type") ?? "", /^text\/javascript/);
    const bundle = await Deno.readTextFile(
      new URL("../server/assets/lockd-client.js", import.meta.url),
    );
    assert.equal(await script.text(), bundle);
  } finally {
    assert.equal(await server.stop(), 0);
    await Deno.remove(server.dataDir, { recursive: true });
  }
});

Deno.test("--bridge: SIGTERM exits promptly while a WebSocket session holds a lock", async () => {
  const server = await startServer({ args: ["--bridge", "127.0.0.1:0"] });
  const ws = await WsLines.open(`ws://127.0.0.1:${bridgePort(server.ready)}/`);
  try {
    tokenOf(await ws.request("A sigterm:k 30 0"), "sigterm:k");
    const started = Date.now();
    assert.equal(await server.stop("SIGTERM"), 0);
    const took = Date.now() - started;
    assert.equal((await ws.closed).code, 1001);
    // Without a session holding a lock this takes a few ms. Releasing the session's lock
    // must not wait out the client's 5 s release retry against the lockd it just stopped.
    assert.ok(took < 2000, `lockd took ${took} ms to exit after SIGTERM`);
  } finally {
    await ws.close();
    await server.stop();
    await Deno.remove(server.dataDir, { recursive: true });
  }
});

// ---------------------------------------------------------------------------------------
// Framing and reply order

Deno.test("bridge relays one line per text frame and echoes op and key", async () => {
  await withBridge({}, async (f) => {
    const ws = await f.ws();
    const token = tokenOf(await ws.request("A frame:k 30 0"), "frame:k");
    assert.equal(await ws.request(`X frame:k ${token} 60`), "X frame:k X");
    // An empty frame is an empty line: ignored, no reply.
    ws.send("");
    assert.equal(await ws.request(`R frame:k ${token}`), "R frame:k R");
    assert.equal(await ws.request(`R frame:k ${token}`), "R frame:k N");
    assert.ok(await ws.silentFor(100), "one reply per request");
  });
});

Deno.test("bridge keeps reply order per (op, key) and lets other keys pass", async () => {
  await withBridge({}, async (f) => {
    const ws = await f.ws();
    const raw = await f.raw();
    const held = tokenOf(await raw.request("A order:k 30 0"), "order:k");
    // Both queue behind the raw holder; lockd answers the second (T after 1 ms) long before
    // the first, but the bridge must send the replies of `A order:k` in request order.
    ws.send("A order:k 30 5");
    ws.send("A order:k 30 0.001");
    // Another key is not held up by them.
    tokenOf(await ws.request("A order:other 30 0"), "order:other");
    assert.ok(await ws.silentFor(300), "the T of the second acquire must wait for the first");
    assert.equal(await raw.request(`R order:k ${held}`), "R order:k R");
    const first = tokenOf(await ws.next(), "order:k");
    assert.ok(first > held);
    assert.equal(await ws.next(), "A order:k T");
  });
});

Deno.test("bridge answers E to malformed lines and binary frames, and stays usable", async () => {
  await withBridge({}, async (f) => {
    const ws = await f.ws();
    assert.equal(
      await ws.request("A bad:k -1 5"),
      "A bad:k E lease must be a positive number of seconds",
    );
    assert.equal(await ws.request("Z bad:k"), "Z bad:k E unknown op");
    assert.equal(await ws.request("?"), "? - E unknown op");
    assert.equal(await ws.request("A"), "A - E missing key");
    assert.match(await ws.request("R bad:k 007"), /^R bad:k E token must be/);
    assert.match(await ws.request("A bad:k 30"), /^A bad:k E missing field/);
    assert.match(await ws.request("A bad:k  30 0"), /^A bad:k E /);
    // Binary frames and frames with a line ending (or two lines) are refused, not relayed.
    ws.send(new TextEncoder().encode("A bad:bin 30 0"));
    assert.equal(await ws.next(), "- - E binary frames are not supported");
    for (const frame of ["A bad:nl 30 0\nA bad:nl2 30 0", "A bad:nl 30 0\n", "A bad:cr 30 0\r"]) {
      assert.match(await ws.request(frame), /^- - E /, JSON.stringify(frame));
    }
    // Nothing of that was relayed: the keys are free on lockd.
    const raw = await f.raw();
    for (const key of ["bad:bin", "bad:nl", "bad:nl2", "bad:cr"]) {
      const token = tokenOf(await raw.request(`A ${key} 30 0.001`), key);
      assert.equal(await raw.request(`R ${key} ${token}`), `R ${key} R`);
    }
    // The session still works.
    const token = tokenOf(await ws.request("A bad:ok 30 0"), "bad:ok");
    assert.equal(await ws.request(`R bad:ok ${token}`), "R bad:ok R");
  });
});

Deno.test("bridge answers malformed lines exactly as lockd does over TCP", async () => {
  await withBridge({}, async (f) => {
    const ws = await f.ws();
    const raw = await f.raw();
    const lines = [
      " ",
      "A",
      "A ",
      " A k 30 0",
      "A  k 30 0",
      "A k 30 0 ",
      "a k 30 0",
      "A k\t30 0",
      "A k 1e3 0",
      "A k 0 0",
      "A k NaN 0",
      "A k 30 -1",
      "A k 100000 0", // over lockd's --max-lease (86400): lockd's own E comes back
      "R k 0",
      "R k 18446744073709551616",
      "R k 5",
      "X k 5 0",
      `A ${"k".repeat(251)} 30 0`,
      "A k\u0001 30 0",
      "- - -",
      "\ufeffA k 30 0",
    ];
    for (const line of lines) {
      const viaTcp = await raw.request(line);
      assert.equal(await ws.request(line), viaTcp, JSON.stringify(line));
    }
  });
});

Deno.test("bridge answers a frame over 4096 bytes with E and closes the socket", async () => {
  await withBridge({}, async (f) => {
    // Exactly 4096 bytes is a line like any other (here: one field too many).
    const ws = await f.ws();
    const limit = "A long:k 30 0 " + "x".repeat(4096 - 14);
    assert.equal(new TextEncoder().encode(limit).length, 4096);
    assert.match(await ws.request(limit), /^A long:k E too many fields/);
    // 4097 bytes: refused and closed.
    ws.send(limit + "x");
    assert.equal(await ws.next(), "- - E line too long");
    const closed = await ws.closed;
    assert.equal(closed.code, 1009);
    // Bytes count, not characters: 2050 characters, 4098 bytes.
    const wide = await f.ws();
    wide.send("A " + "é".repeat(2048));
    assert.equal(await wide.next(), "- - E line too long");
    await wide.closed;
  });
});

// ---------------------------------------------------------------------------------------
// Who may connect

Deno.test("bridge refuses cross-origin upgrades by default, accepts same host and no Origin", async () => {
  await withBridge({}, async (f) => {
    const port = f.bridge.addr.port;
    assert.equal(await refusedUpgrade(f.url, { origin: "http://evil.example" }), 403);
    assert.equal(await refusedUpgrade(f.url, { origin: `http://localhost:${port}` }), 403);
    assert.equal(await refusedUpgrade(f.url, { origin: "http://127.0.0.1:1" }), 403);
    assert.equal(await refusedUpgrade(f.url, { origin: "null" }), 403);
    assert.ok(await accepted(f.url, { origin: `http://127.0.0.1:${port}` }), "same host");
    assert.ok(await accepted(f.url), "no Origin (not a browser)");
    assert.ok(!(await accepted(f.url, { origin: "https://evil.example" })), "WebSocket refused");
  });
});

Deno.test("bridge allowedOrigins accepts exactly the listed origins", async () => {
  await withBridge({ allowedOrigins: ["https://app.example.com"] }, async (f) => {
    assert.ok(await accepted(f.url, { origin: "https://app.example.com" }));
    for (
      const origin of [
        "http://app.example.com",
        "https://app.example.com:8443",
        "https://app.example.com.evil.net",
        "https://evil.example",
      ]
    ) {
      assert.equal(await refusedUpgrade(f.url, { origin }), 403, origin);
    }
    assert.ok(await accepted(f.url), "no Origin (not a browser)");
  });
});

Deno.test("bridge authorize(request) refuses with 401 when it returns false", async () => {
  const seen: string[] = [];
  await withBridge({
    authorize: async (request) => {
      await delay(1);
      seen.push(request.headers.get("authorization") ?? new URL(request.url).search);
      return request.headers.get("authorization") === "Bearer s3cret" ||
        new URL(request.url).searchParams.get("token") === "s3cret";
    },
  }, async (f) => {
    assert.equal(await refusedUpgrade(f.url), 401);
    assert.equal(await refusedUpgrade(f.url, { authorization: "Bearer wrong" }), 401);
    assert.ok(await accepted(f.url, { authorization: "Bearer s3cret" }));
    assert.ok(seen.includes("Bearer wrong") && seen.includes("Bearer s3cret"), `${seen}`);
    // The origin check comes first: a refused origin is 403 whatever the credentials.
    assert.equal(
      await refusedUpgrade(f.url, { authorization: "Bearer s3cret", origin: "https://x.example" }),
      403,
    );
    // A LockClient with the credential in its URL works; without it, it gets no connection.
    const lock = await f.client("?token=s3cret").acquire("auth:k", { lease: 5 });
    await lock.release();
    await assert.rejects(f.client().acquire("auth:k", { lease: 5 }), LockUnavailableError);
  });
});

Deno.test("bridge maxSessions refuses more sessions with 503", async () => {
  await withBridge({ maxSessions: 2 }, async (f) => {
    const one = await f.ws();
    await f.ws();
    assert.equal(await refusedUpgrade(f.url), 503);
    await one.close();
    // Once the bridge has seen the close, a new session fits again.
    const until = Date.now() + 3000;
    let again: WsLines | undefined;
    while (again === undefined) {
      again = await f.ws().catch(() => undefined);
      if (again === undefined) {
        assert.ok(Date.now() < until, "a closed session must free its place");
        await delay(20);
      }
    }
    assert.equal(await refusedUpgrade(f.url), 503);
  });
});

Deno.test("bridge maxInFlight answers E over the limit, per session", async () => {
  await withBridge({ maxInFlight: 2 }, async (f) => {
    const raw = await f.raw();
    const h1 = tokenOf(await raw.request("A flight:1 30 0"), "flight:1");
    const h2 = tokenOf(await raw.request("A flight:2 30 0"), "flight:2");
    const ws = await f.ws();
    ws.send("A flight:1 30 0");
    ws.send("A flight:2 30 0");
    assert.equal(
      await ws.request("A flight:3 30 0"),
      "A flight:3 E too many acquires in flight on this session",
    );
    // Another session has its own budget.
    const other = await f.ws();
    const t3 = tokenOf(await other.request("A flight:3 30 0"), "flight:3");
    assert.equal(await other.request(`R flight:3 ${t3}`), "R flight:3 R");
    // A reply frees a place.
    assert.equal(await raw.request(`R flight:1 ${h1}`), "R flight:1 R");
    const t1 = tokenOf(await ws.next(), "flight:1");
    const t3b = tokenOf(await ws.request("A flight:3 30 0"), "flight:3");
    assert.equal(await ws.request(`R flight:3 ${t3b}`), "R flight:3 R");
    assert.equal(await ws.request(`R flight:1 ${t1}`), "R flight:1 R");
    assert.equal(await raw.request(`R flight:2 ${h2}`), "R flight:2 R");
    const t2 = tokenOf(await ws.next(), "flight:2");
    assert.equal(await ws.request(`R flight:2 ${t2}`), "R flight:2 R");
  });
});

Deno.test("bridge keyPrefix confines a session's keys on the lockd side", async () => {
  await withBridge({ keyPrefix: "tenant-42:" }, async (f) => {
    const raw = await f.raw();
    const lock = await f.client().acquire("door", { lease: 30 });
    assert.equal(lock.key, "door");
    // lockd sees the prefixed key held, and the bare key free.
    assert.equal(await raw.request("A tenant-42:door 30 0.001"), "A tenant-42:door T");
    const bare = tokenOf(await raw.request("A door 30 0.001"), "door");
    assert.equal(await raw.request(`R door ${bare}`), "R door R");
    // Keys that would be too long once prefixed are refused with E.
    const ws = await f.ws();
    assert.match(await ws.request(`A ${"k".repeat(241)} 30 0`), / E key must be at most 240 /);
    // The session can't release the bare key's grants either.
    const other = tokenOf(await raw.request("A door 30 0"), "door");
    assert.equal(await ws.request(`R door ${other}`), "R door N");
    assert.equal(await raw.request(`X door ${other} 30`), "X door X");
    await lock.release();
    const after = tokenOf(await raw.request("A tenant-42:door 30 0.001"), "tenant-42:door");
    assert.ok(after > lock.token);
  });
});

Deno.test("bridge relays I for the session's own keys and refuses S and L", async () => {
  await withBridge({ keyPrefix: "tenant-7:" }, async (f) => {
    const ws = await f.ws();
    assert.equal(await ws.request("I door"), "I door F");
    const token = tokenOf(await ws.request("A door 30 0"), "door");
    const raw = await f.raw();
    // A waiter queued on lockd behind the page's grant, seen through the bridge by its key.
    await raw.send("A tenant-7:door 30 10");
    const { waitFor } = await import("./_helpers.ts");
    let seen = "";
    await waitFor(async () => / 1 \S+$/.test(seen = (await ws.request("I door"))!), "a waiter");
    assert.match(seen, new RegExp(`^I door I ${token} [0-9.]+ 1 \\S+$`));
    // The bare key is another key: free.
    assert.equal(await ws.request("I tenant-7:door"), "I tenant-7:door F");
    assert.equal(await ws.request("S -"), "S - E not available through the bridge");
    assert.equal(await ws.request("L - 10"), "L - E not available through the bridge");
    assert.match((await ws.request("I"))!, /^I - E /);
    assert.equal(await ws.request(`R door ${token}`), "R door R");
    tokenOf(await raw.readLine(), "tenant-7:door");
  });
});

Deno.test("bridge keyPrefix as a function separates tenants", async () => {
  await withBridge({
    keyPrefix: (request) => `${new URL(request.url).searchParams.get("tenant")}:`,
  }, async (f) => {
    const a = await f.ws("?tenant=a");
    const b = await f.ws("?tenant=b");
    const ta = tokenOf(await a.request("A door 30 0"), "door");
    const tb = tokenOf(await b.request("A door 30 0"), "door");
    const raw = await f.raw();
    assert.equal(await raw.request("A a:door 30 0.001"), "A a:door T");
    assert.equal(await raw.request("A b:door 30 0.001"), "A b:door T");
    // Tenant b cannot release tenant a's grant.
    assert.equal(await b.request(`R door ${ta}`), "R door N");
    assert.equal(await a.request(`R door ${ta}`), "R door R");
    assert.equal(await b.request(`R door ${tb}`), "R door R");
  });
});

Deno.test("bridge refuses a session whose keyPrefix is invalid and reports it to onError", async () => {
  const errors: string[] = [];
  await withBridge(
    { keyPrefix: () => "bad prefix:", onError: (m) => errors.push(m) },
    async (f) => {
      assert.equal(await refusedUpgrade(f.url), 500);
      assert.deepEqual(errors, [
        'lockd bridge: refusing a session: invalid key prefix "bad prefix:"',
      ]);
    },
  );
});

// ---------------------------------------------------------------------------------------
// What a session holds and waits for

Deno.test("bridge session cannot release or extend a token it does not hold", async () => {
  await withBridge({}, async (f) => {
    const raw = await f.raw();
    const theirs = tokenOf(await raw.request("A notmine:k 30 0"), "notmine:k");
    const ws = await f.ws();
    assert.equal(await ws.request(`R notmine:k ${theirs}`), "R notmine:k N");
    assert.equal(await ws.request(`X notmine:k ${theirs} 30`), "X notmine:k N");
    assert.equal(await raw.request(`X notmine:k ${theirs} 30`), "X notmine:k X", "still held");
    // Nor one of another session (another client id).
    const mine = tokenOf(await ws.request("A notmine:m 30 0"), "notmine:m");
    const other = await f.ws("?client=someone-else");
    assert.equal(await other.request(`R notmine:m ${mine}`), "R notmine:m N");
    assert.equal(await raw.request("A notmine:m 30 0.001"), "A notmine:m T");
    assert.equal(await ws.request(`R notmine:m ${mine}`), "R notmine:m R");
    assert.equal(await raw.request(`R notmine:k ${theirs}`), "R notmine:k R");
  });
});

Deno.test("bridge closing a WebSocket releases what the session held", async () => {
  await withBridge({}, async (f) => {
    const ws = await f.ws();
    tokenOf(await ws.request("A close:held 30 0"), "close:held");
    const raw = await f.raw();
    assert.equal(await raw.request("A close:held 30 0.001"), "A close:held T");
    await ws.close();
    const started = Date.now();
    tokenOf(await raw.request("A close:held 30 5", 6000), "close:held");
    assert.ok(Date.now() - started < 2000, `freed after ${Date.now() - started} ms, lease 30 s`);
  });
});

Deno.test("bridge sessions with one client id share grants until the last closes", async () => {
  await withBridge({}, async (f) => {
    const one = await f.ws("?client=c1");
    const two = await f.ws("?client=c1");
    const raw = await f.raw();
    const t = tokenOf(await one.request("A group:k 30 0"), "group:k");
    tokenOf(await one.request("A group:j 30 0"), "group:j");
    await one.close();
    // Still held: the client's other connection is open, and it can extend and release.
    assert.equal(await raw.request("A group:k 30 0.001"), "A group:k T");
    assert.equal(await two.request(`X group:k ${t} 30`), "X group:k X");
    assert.equal(await two.request(`R group:k ${t}`), "R group:k R");
    tokenOf(await raw.request("A group:k 30 0.001"), "group:k");
    // The last one out releases the rest.
    assert.equal(await raw.request("A group:j 30 0.001"), "A group:j T");
    await two.close();
    tokenOf(await raw.request("A group:j 30 3", 4000), "group:j");
  });
});

Deno.test("bridge closing a WebSocket cancels its queued acquires (late grants released)", async () => {
  await withBridge({}, async (f) => {
    const raw = await f.raw();
    const held = tokenOf(await raw.request("A queued:k 30 0"), "queued:k");
    const ws = await f.ws();
    ws.send("A queued:k 30 0");
    // Make sure the acquire reached lockd: later requests of this session that are answered
    // travelled behind it (the bridge's client round-robins over its two connections).
    for (const probe of ["queued:p1", "queued:p2", "queued:p3"]) {
      ws.send(`A ${probe} 30 0`);
      tokenOf(await ws.next(), probe);
    }
    await ws.close();
    // The holder releases: lockd grants the bridge's queued request, which the bridge must
    // release at once, so another client gets the key well before the 30 s lease.
    const next = await f.raw();
    next.send("A queued:k 30 10");
    assert.ok(await next.silentFor(100), "the key is still held by the raw holder");
    const started = Date.now();
    assert.equal(await raw.request(`R queued:k ${held}`), "R queued:k R");
    const token = tokenOf(await next.readLine(12_000), "queued:k");
    assert.ok(token > held);
    assert.ok(Date.now() - started < 2000, `granted after ${Date.now() - started} ms`);
  });
});

Deno.test("bridge with releaseOnClose false leaves held locks to the lease", async () => {
  await withBridge({ releaseOnClose: false }, async (f) => {
    const ws = await f.ws();
    tokenOf(await ws.request("A lease:k 1 0"), "lease:k");
    await ws.close();
    const closedAt = Date.now();
    const raw = await f.raw();
    assert.equal(await raw.request("A lease:k 30 0.2"), "A lease:k T", "still held after close");
    tokenOf(await raw.request("A lease:k 30 5", 6000), "lease:k");
    const waited = Date.now() - closedAt;
    assert.ok(waited >= 700 && waited < 3000, `freed by the 1 s lease after ${waited} ms`);
  });
});

Deno.test("serveBridge().shutdown() closes sessions and releases their locks", async () => {
  await withBridge({}, async (f) => {
    const a = await f.ws();
    const b = await f.ws("?client=other");
    tokenOf(await a.request("A shut:a 30 0"), "shut:a");
    tokenOf(await b.request("A shut:b 30 0"), "shut:b");
    const raw = await f.raw();
    await f.bridge.shutdown();
    // Released by the time shutdown resolved.
    tokenOf(await raw.request("A shut:a 30 0.001"), "shut:a");
    tokenOf(await raw.request("A shut:b 30 0.001"), "shut:b");
    assert.equal((await a.closed).code, 1001);
    assert.equal((await b.closed).code, 1001);
  });
});

Deno.test("createBridgeHandler mounts in an app, at a path, over a given client", async () => {
  assert.throws(() => createBridgeHandler({}), TypeError);
  const server = await startServer();
  const relay = new LockClient(server.address);
  let bridge: BridgeHandler | undefined;
  let http: Deno.HttpServer<Deno.NetAddr> | undefined;
  let page: LockClient | undefined;
  try {
    bridge = createBridgeHandler({
      client: relay,
      path: "/lockd",
      clientScript: "export const x = 1;\n",
      page: "<!doctype html><title>t</title>",
    });
    const handler = bridge;
    http = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, (request) => {
      const url = new URL(request.url);
      return url.pathname === "/app" ? new Response("app") : handler(request);
    });
    const base = `127.0.0.1:${http.addr.port}`;
    assert.equal(await (await fetch(`http://${base}/app`)).text(), "app");
    const script = await fetch(`http://${base}/client.js`);
    assert.match(script.headers.get("content-type") ?? "", /^text\/javascript/);
    assert.equal(await script.text(), "export const x = 1;\n");
    const html = await fetch(`http://${base}/`);
    assert.match(html.headers.get("content-type") ?? "", /^text\/html/);
    await html.body?.cancel();
    // Upgrades only on the path.
    assert.equal(await refusedUpgrade(`ws://${base}/`), 404);
    page = new LockClient(`ws://${base}/lockd`);
    const lock = await page.acquire("mounted:k", { lease: 5 });
    assert.equal(typeof lock.token, "bigint");
    const raw = await LineClient.connect(server.port);
    try {
      assert.equal(await raw.request("A mounted:k 30 0.001"), "A mounted:k T");
      await page.close();
      await bridge.close();
      // The given client is not closed by the bridge.
      const again = await relay.acquire("mounted:k", { lease: 5, wait: 3 });
      assert.ok(again.token > lock.token);
      await again.release();
    } finally {
      await raw.close();
    }
  } finally {
    await page?.close();
    await bridge?.close();
    await http?.shutdown();
    await relay.close();
    await server.stop();
    await Deno.remove(server.dataDir, { recursive: true });
  }
});

// ---------------------------------------------------------------------------------------
// lockd going away and coming back

Deno.test("bridge rides through a lockd restart", async () => {
  const first = await startServer();
  const bridge = serveBridge({ servers: first.address, port: 0 });
  const client = new LockClient(`ws://127.0.0.1:${bridge.addr.port}/`);
  let second: ServerProcess | undefined;
  try {
    const before = await client.acquire("restart:k", { lease: 30 });
    await before.release();
    assert.equal(await first.stop(), 0);
    // Asked while lockd is down: the bridge answers `E no active node`, the client retries.
    const pending = client.acquire("restart:k", { lease: 30, wait: 5 });
    await delay(300);
    second = await startServer({ listen: first.address, dataDir: first.dataDir });
    const after = await pending;
    assert.ok(after.token > before.token, `${after.token} > ${before.token}`);
    await after.release();
  } finally {
    await client.close();
    await bridge.shutdown();
    await first.stop();
    await second?.stop();
    await Deno.remove(first.dataDir, { recursive: true });
  }
});

Deno.test("bridge lets releases and extends through when acquires fill maxInFlight", async () => {
  await withBridge({ maxInFlight: 1 }, async (f) => {
    const raw = await f.raw();
    const ws = await f.ws();
    const mine = tokenOf(await ws.request("A budget:mine 30 0"), "budget:mine");
    tokenOf(await raw.request("A budget:busy 30 0"), "budget:busy");
    ws.send("A budget:busy 30 0"); // queued: the one acquire in flight
    assert.equal(await ws.request(`X budget:mine ${mine} 60`), "X budget:mine X");
    assert.equal(await ws.request(`R budget:mine ${mine}`), "R budget:mine R");
  });
});

Deno.test("bridge drops a closed page's queued acquires on lockd (its own connection closes)", async () => {
  await withBridge({}, async (f) => {
    const raw = await f.raw();
    const holder = tokenOf(await raw.request("A orphan:k 30 0"), "orphan:k");
    const page = await f.ws();
    page.send("A orphan:k 30 0");
    await page.silentFor(100); // queued behind the holder
    await page.close();
    const next = await f.raw();
    await next.send("A orphan:k 30 0");
    assert.ok(await next.silentFor(100), "queued behind the holder");
    assert.equal(await raw.request(`R orphan:k ${holder}`), "R orphan:k R");
    // No orphan was granted (and released) in between: the next token is the very next one.
    assert.equal(tokenOf(await next.readLine(), "orphan:k"), holder + 1n);
  });
});

Deno.test("bridge keeps a queued acquire alive on a connection that was idle for a while", async () => {
  await withBridge({}, async (f) => {
    const raw = await f.raw();
    const holder = tokenOf(await raw.request("A idle:k 30 0"), "idle:k");
    const client = f.client();
    await client.tryAcquire("idle:warm"); // connections up
    await delay(2500); // idle longer than a third of the stale-connection timeout
    const waiting = client.acquire("idle:k", { wait: 10 });
    await delay(2500);
    assert.equal(await raw.request(`R idle:k ${holder}`), "R idle:k R");
    const lock = await waiting;
    assert.ok(lock.token > holder);
    await lock.release();
  });
});

Deno.test("bridge refuses a key prefix that could inject protocol lines", async () => {
  await withBridge(
    { keyPrefix: (r) => `t-${new URL(r.url).searchParams.get("tenant")}:` },
    async (f) => {
      const good = await f.ws("?tenant=acme");
      tokenOf(await good.request("A inj:k 30 0"), "inj:k");
      const injected = encodeURIComponent("x 30 0\nR t-acme:inj:k 1\nA y");
      assert.equal(await refusedUpgrade(f.url + "?tenant=" + injected), 500);
      assert.equal(await refusedUpgrade(f.url + "?tenant=a%20b"), 500);
    },
  );
});

Deno.test("bridge answers a malformed upgrade with 400 and normalises allowed origins", async () => {
  await withBridge({ allowedOrigins: ["https://App.Example.com:443/"] }, async (f) => {
    const url = `http://127.0.0.1:${f.bridge.addr.port}/`;
    const bad = await fetch(url, { headers: { upgrade: "websocket", connection: "upgrade" } });
    await bad.body?.cancel();
    assert.equal(bad.status, 400);
    assert.ok(await accepted(f.url, { origin: "https://app.example.com" }));
    assert.equal(await refusedUpgrade(f.url, { origin: "https://evil.example.com" }), 403);
  });
});

Deno.test("bridge serves /client.js to pages of any origin (CORS) and answers HEAD", async () => {
  await withBridge({ clientScript: "export const x = 1;\n" }, async (f) => {
    const url = `http://127.0.0.1:${f.bridge.addr.port}/client.js`;
    const get = await fetch(url, { headers: { origin: "https://app.example.com" } });
    assert.equal(get.headers.get("access-control-allow-origin"), "*");
    assert.equal(await get.text(), "export const x = 1;\n");
    const head = await fetch(url, { method: "HEAD" });
    await head.body?.cancel();
    assert.equal(head.status, 200);
  });
});

Deno.test("bridge counts upgrades under way against maxSessions", async () => {
  await withBridge({
    maxSessions: 2,
    keyPrefix: async () => {
      await delay(200);
      return "";
    },
  }, async (f) => {
    const opened = await Promise.allSettled(Array.from({ length: 6 }, () => f.ws()));
    const open = opened.filter((o) => o.status === "fulfilled").length;
    assert.equal(open, 2, `${open} sessions opened with maxSessions 2`);
  });
});
