/**
 * A client that shuts down its sending side (docs/protocol.md, "Semantics"; docs/client.md,
 * `close()`): lockd drops its acquires still queued, which are never granted, but every reply
 * decided before it read the close (an `E`, a `T`) is still written, in request order. The
 * close settles what is due first, like any request: a wait limit that ran out before it
 * was read is answered `T`, even if the node's timer has not fired yet.
 */

import assert from "node:assert/strict";
import { LockServer } from "../server/server.ts";
import { grantOf, LineClient, waitFor, withServer } from "./_helpers.ts";

const SILENT = { debug() {}, info() {}, warn() {}, error() {} };

/** The waiter count of held `key` in an `I` reply (`I <key> I <token> <left> <waiters> ...`). */
async function waiters(client: LineClient, key: string): Promise<number> {
  const reply = await client.request(`I ${key}`);
  const fields = reply?.split(" ") ?? [];
  assert.equal(fields[2], "I", `${key} is held: ${reply}`);
  return Number(fields[5]);
}

/** Shuts down the sending side of `client` and reads what is left, to the end of the stream. */
async function halfCloseAndRead(client: LineClient): Promise<string[]> {
  await (client.conn as Deno.TcpConn).closeWrite();
  return await client.closedByPeer(3000);
}

Deno.test("a half-closed connection still gets the replies decided behind its queued acquire", async () => {
  await withServer({}, async (_server, clients) => {
    const holder = await clients.connect();
    const c = await clients.connect();
    const token = grantOf(await holder.request("A hb 30 0"), "hb");
    // The E and the T are decided at once and after 0.2 s, but wait behind the first acquire.
    await c.write(`A hb 30 0\nA hb x 0\nA hb 30 0.2\nR hb ${token + 1n}\nI hb\n`);
    assert.equal(await c.readLine(), "R hb N");
    assert.match(await c.readLine() ?? "", /^I hb I \d+ \S+ 2 /);
    await waitFor(async () => await waiters(holder, "hb") === 1, "the 0.2 s wait to run out");

    assert.deepEqual(await halfCloseAndRead(c), [
      "A hb E lease must be a positive number of seconds",
      "A hb T",
    ]);
    // The first acquire was dropped: never granted, the key is free once released.
    assert.equal(await waiters(holder, "hb"), 0);
    assert.equal(await holder.request(`R hb ${token}`), "R hb R");
    assert.equal(await holder.request("I hb"), "I hb F");
  });
});

Deno.test("a half-closed connection gets its decided replies in order, skipping the dropped acquires", async () => {
  await withServer({}, async (_server, clients) => {
    const holder = await clients.connect();
    const c = await clients.connect();
    const token = grantOf(await holder.request("A hc 30 0"), "hc");
    await c.write("A hc 30 0\nA hc x 0\nA hc 30 0\nA hc 30 y\nA other 30 0\n");
    const other = grantOf(await c.readLine(), "other"); // another key is not held back
    assert.equal(await waiters(holder, "hc"), 2);

    assert.deepEqual(await halfCloseAndRead(c), [
      "A hc E lease must be a positive number of seconds",
      "A hc E wait must be a number of seconds, 0 or more",
    ]);
    assert.equal(await waiters(holder, "hc"), 0, "both queued acquires were dropped");
    assert.equal(await holder.request(`R hc ${token}`), "R hc R");
    assert.equal(await holder.request("I hc"), "I hc F");
    assert.match(await holder.request("I other") ?? "", new RegExp(`^I other I ${other} `));
  });
});

Deno.test("a half-closed connection with nothing decided is closed without a reply", async () => {
  await withServer({}, async (_server, clients) => {
    const holder = await clients.connect();
    const c = await clients.connect();
    const token = grantOf(await holder.request("A hd 30 0"), "hd");
    await c.write("A hd 30 0\nA hd 30 0\n");
    await waitFor(async () => await waiters(holder, "hd") === 2, "both acquires to queue");
    assert.deepEqual(await halfCloseAndRead(c), []);
    assert.equal(await waiters(holder, "hd"), 0);
    assert.equal(await holder.request(`R hd ${token}`), "R hd R");
  });
});

Deno.test("a half-close settles a wait limit that ran out before it was read: T, not dropped", async () => {
  // A fake clock: moved on by the test, while the node's timer waits for real time.
  let now = 1000;
  const dataDir = await Deno.makeTempDir({ prefix: "lockd-half-close-" });
  const server = await LockServer.start({ port: 0, dataDir, log: SILENT, clock: () => now });
  const holder = await LineClient.connect(server.addr.port);
  const c = await LineClient.connect(server.addr.port);
  try {
    const token = grantOf(await holder.request("A he 60 0"), "he");
    await c.write("A he 30 5\nA he 30 0\n");
    await waitFor(async () => await waiters(holder, "he") === 2, "both acquires to queue");
    now += 5000; // The 5 s wait limit has run out; its timer is armed for 5 s of real time.
    assert.deepEqual(await halfCloseAndRead(c), ["A he T"]);
    assert.equal(await waiters(holder, "he"), 0, "the acquire without a limit was dropped");
    assert.equal(await holder.request(`R he ${token}`), "R he R");
    assert.equal(await holder.request("I he"), "I he F");
  } finally {
    await holder.close();
    await c.close();
    await server.shutdown();
    await Deno.remove(dataDir, { recursive: true });
  }
});
