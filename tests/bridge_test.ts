/**
 * Tests of the WebSocket bridge (issue 5, docs/protocol.md and docs/client.md) from Deno,
 * without a browser: relaying through `LockClient` over `ws://`, the ways to serve a bridge
 * (`serveBridge()`, `--bridge` and `--bridge-demo` in the lockd process, and
 * `createBridgeHandler()` mounted in an app over a given client, with `/client.js`), and the
 * framing: one line per text frame, reply order per (op, key), malformed lines, binary and
 * oversized frames, checked against what lockd answers over raw TCP.
 * Who may connect (origins, authorize, limits, key prefixes): bridge_access_test.ts; what a
 * session holds and waits for, and lockd restarting: bridge_sessions_test.ts. Fixture:
 * tests/_bridge.ts.
 */

import assert from "node:assert/strict";
import { type BridgeHandler, createBridgeHandler } from "../client/bridge.ts";
import { CLOSE_DRAIN_MS } from "../client/bridge/session.ts";
import { LockClient } from "../mod.ts";
import { LineClient, startServer } from "./_helpers.ts";
import { bridgePort, refusedUpgrade, tokenOf, withBridge, WsLines } from "./_bridge.ts";

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

Deno.test("bridge closing for an over-long frame sends the replies to the requests before it first", async () => {
  await withBridge({}, async (f) => {
    const ws = await f.ws();
    for (const line of ["A drain:a 30 0", "I drain:a", "A drain:b 30 0"]) ws.send(line);
    ws.send("A " + "x".repeat(5000));
    ws.send("A drain:c 30 0"); // after the over-long frame: ignored
    const replies = [await ws.next(), await ws.next(), await ws.next()].sort();
    assert.match(replies[0], /^A drain:a A \d+$/);
    assert.match(replies[1], /^A drain:b A \d+$/);
    assert.match(replies[2], /^I drain:a I /);
    assert.equal(await ws.next(), "- - E line too long");
    assert.equal((await ws.closed).code, 1009);
    // Its grants went with it, and drain:c was never asked for.
    const raw = await f.raw();
    for (const key of ["drain:a", "drain:b", "drain:c"]) {
      assert.match((await raw.request(`A ${key} 30 5`, 6000))!, new RegExp(`^A ${key} A \\d+$`));
    }
  });
});

Deno.test("bridge closing for an over-long frame waits at most CLOSE_DRAIN_MS for a queued acquire", async () => {
  await withBridge({}, async (f) => {
    const raw = await f.raw();
    const token = tokenOf(await raw.request("A drain:q 30 0"), "drain:q");
    const ws = await f.ws();
    ws.send("A drain:q 30 20");
    assert.equal(await ws.silentFor(200), true); // queued on lockd
    const sentAt = performance.now();
    ws.send("A " + "x".repeat(5000));
    assert.equal(await ws.next(3000), "- - E line too long");
    assert.ok(performance.now() - sentAt >= CLOSE_DRAIN_MS - 50, "closed before the drain bound");
    assert.equal((await ws.closed).code, 1009);
    // The grant that comes after the close is released at once: another client gets the key.
    assert.equal(await raw.request(`R drain:q ${token}`), "R drain:q R");
    const next = await f.raw();
    assert.match((await next.request("A drain:q 30 5", 6000))!, /^A drain:q A \d+$/);
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
