/**
 * Tests of what a WebSocket bridge session holds and waits for (issue 5, docs/client.md),
 * from Deno against a real lockd behind `serveBridge()`: tokens it does not hold, releasing
 * on close (shared by the sessions of one client id, or left to the lease with
 * `releaseOnClose: false`), queued acquires cancelled or dropped with a closed page and kept
 * alive on an idle connection, `shutdown()`, and riding through a lockd restart. What lockd
 * itself holds is checked with raw TCP clients.
 * Relaying, serving and framing: bridge_test.ts; who may connect: bridge_access_test.ts.
 * Fixture: tests/_bridge.ts.
 */

import assert from "node:assert/strict";
import { setTimeout as delay } from "node:timers/promises";
import { serveBridge } from "../client/bridge.ts";
import { LockClient } from "../mod.ts";
import { type ServerProcess, startServer } from "./_helpers.ts";
import { tokenOf, withBridge } from "./_bridge.ts";

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
