/**
 * Tests of who may use the WebSocket bridge (issue 5, docs/client.md), from Deno against a
 * real lockd behind `serveBridge()`: cross-origin upgrades and `allowedOrigins`, malformed
 * upgrades, `authorize(request)`, `maxSessions` (counting upgrades under way) and
 * `maxInFlight` per session, and `keyPrefix` (a string or a function per request) confining
 * a session's keys on the lockd side, including the `I`, `S` and `L` ops and prefixes that
 * are refused. Refused upgrades are checked with plain HTTP requests.
 * Relaying, serving and framing: bridge_test.ts; what a session holds and waits for:
 * bridge_sessions_test.ts. Fixture: tests/_bridge.ts.
 */

import assert from "node:assert/strict";
import { setTimeout as delay } from "node:timers/promises";
import { LockUnavailableError } from "../mod.ts";
import { accepted, refusedUpgrade, tokenOf, withBridge, type WsLines } from "./_bridge.ts";

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
    const refused = await f.client().acquire("auth:k", { lease: 5 }).catch((e) => e);
    assert.ok(refused instanceof LockUnavailableError, `${refused}`);
    // The URL's client id lets whoever has it act on this client's grants: never in messages.
    assert.doesNotMatch(refused.message, /client=/);
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
