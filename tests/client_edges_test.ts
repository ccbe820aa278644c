/**
 * `LockClient` corner cases against a scripted fake server (tests/_fake_server.ts;
 * docs/client.md): a grant that arrives after close() began, a try-lock behind the
 * client's own long acquire, a release on its oldest waiter's connection, waits whose reply
 * never comes or is held behind an earlier acquire, malformed replies, silent connections,
 * extend after a suspected loss, `lock.signal` when every connection drops, `tls://`
 * nodes that drop, and a wait that ends while its node is gone.
 *
 * Op and resource sanitizers are on (deno.json): each test also checks that the client
 * leaves no timer, socket or pending op behind.
 */

import assert from "node:assert/strict";
import { LockError, LockLostError, LockTimeoutError, LockUnavailableError } from "../mod.ts";
import { type Connect, connectTransport, LockClient } from "../mod.ts";
import { FakeServer, lockServer, waitUntil } from "./_fake_server.ts";
import { readyClient, rejection, within } from "./_fake_client.ts";

Deno.test("LockClient releases and rejects a grant that arrives after close() began", async () => {
  await using server = await FakeServer.start();
  server.handler = lockServer({ silent: ["R"] });
  const client = await readyClient(server.address);
  await client.acquire("held");
  // A queued acquire of our own, answered only once close() has started.
  server.handler = undefined;
  const queued = client.acquire("late", { wait: 5 });
  const request = await server.take("A late");
  const closing = client.close();
  await request.reply("A", "77");
  const error = await rejection(queued);
  assert.ok(error instanceof LockError, String(error));
  assert.ok((await server.take("R late 77")).line, "the late grant is released");
  for (const r of server.lines("R held")) await r.reply("R");
  await closing;
});

Deno.test("LockClient does not let a try-lock wait behind its own long acquire of the key", async () => {
  await using server = await FakeServer.start();
  await using client = await readyClient(server.address);
  // A long wait stays unanswered; a try-lock of the same key goes out on the other
  // connection, where the server can answer it at once.
  const long = client.acquire("k", { wait: 30 });
  const first = await server.take("A k");
  const quick = client.tryAcquire("k");
  const second = await server.take("A k");
  assert.notEqual(second.conn, first.conn, "the try-lock used the other connection");
  await second.reply("T");
  assert.equal(await within(quick, 1000, "tryAcquire"), null);
  await first.reply("T");
  assert.ok(await rejection(long) instanceof LockTimeoutError);
});

Deno.test("LockClient sends a release of a key it waits for on the connection of its oldest waiter", async () => {
  await using server = await FakeServer.start();
  await using client = await readyClient(server.address);
  const first = client.acquire("k", { lease: 10 });
  await (await server.take("A k")).reply("A", "1");
  let holder = await first;
  // Two waiters of k, one per connection (the second avoids the first's connection).
  const waiting = [client.acquire("k", { wait: 30 })];
  const queued = [await server.take("A k")];
  waiting.push(client.acquire("k", { wait: 30 }));
  queued.push(await server.take("A k"));
  assert.notEqual(queued[0].conn, queued[1].conn);
  // Each release goes where the key's next grant comes: the oldest waiter's connection, so
  // the server passes the key on in one write. Round-robin alone would send both releases
  // the same way (an acquire is picked between them).
  const releasedOn = [];
  for (let i = 0; i < 2; i++) {
    const releasing = holder.release();
    const release = await server.take(`R k ${holder.token}`);
    releasedOn.push(release.conn);
    assert.equal(release.conn, queued[i].conn, `release ${i + 1} went with the oldest waiter`);
    await release.reply("R");
    await releasing;
    await queued[i].reply("A", String(i + 2));
    holder = await waiting[i];
    if (i === 0) {
      waiting.push(client.acquire("k", { wait: 30 }));
      queued.push(await server.take("A k"));
    }
  }
  assert.notEqual(releasedOn[0], releasedOn[1]);
  server.handler = lockServer();
  await queued[2].reply("T");
  await rejection(waiting[2]);
  await holder.release();
});

Deno.test("LockClient bounds an acquire with a wait even when its reply never comes", async () => {
  await using server = await FakeServer.start();
  await using client = await readyClient(server.address);
  const started = performance.now();
  const silent = client.acquire("k", { wait: 0.2, signal: undefined });
  await server.take("A k");
  const error = await rejection(within(silent, 4000, "a silent acquire"));
  assert.ok(error instanceof LockTimeoutError, String(error));
  assert.ok(performance.now() - started < 3000, "rejected within wait + about a second");
});

Deno.test("LockClient drops a connection that sends a malformed reply, and moves on", async () => {
  await using server = await FakeServer.start();
  await using client = await readyClient(server.address);
  const pending = client.acquire("k");
  const first = await server.take("A k");
  await first.conn.send("A k A 0"); // token 0 is not a token
  const retry = await server.take("A k");
  assert.notEqual(retry.conn, first.conn);
  await retry.reply("A", "5");
  assert.equal((await pending).token, 5n);
  server.handler = lockServer();
  await (await pending).release();
});

Deno.test("LockClient answers T at the wait when the server holds the T behind an earlier acquire", async () => {
  await using server = await FakeServer.start();
  // Acquires of "k" queue forever, as behind a long-held lock: the server never answers them,
  // and (docs/protocol.md ordering) a later T for "k" on the same connection would come after them.
  server.handler = () => {};
  await using client = await readyClient(server.address);
  const queued = [client.acquire("k"), client.acquire("k")].map((p) => p.catch((e) => e));
  await server.until(() => server.count("A k 30 0") === 2, "both acquires to be sent");
  assert.deepEqual(server.open.map((c) => c.lines.filter((l) => l.startsWith("A k")).length), [
    1,
    1,
  ]);
  // Before, the client waited a whole second past the wait for a T that could not come.
  let started = performance.now();
  assert.equal(await within(client.tryAcquire("k"), 1500, "tryAcquire"), null);
  let took = performance.now() - started;
  assert.ok(took < 800, `tryAcquire answered after ${took} ms`);
  started = performance.now();
  const error = await rejection(within(client.acquire("k", { wait: 0.2 }), 1500, "acquire"));
  assert.ok(error instanceof LockTimeoutError, String(error));
  took = performance.now() - started;
  assert.ok(took >= 200 && took < 1000, `a 0.2 s wait answered after ${took} ms`);
  await client.close();
  for (const e of await Promise.all(queued)) assert.ok(e instanceof LockError, String(e));
});

Deno.test("LockClient moves a try-lock off a connection that went silent instead of answering null", async () => {
  await using server = await FakeServer.start();
  let token = 1n;
  // The first connection is frozen (nothing comes back, probes included); the other serves.
  server.answerPings = false;
  server.handler = (r) => {
    if (r.conn.id === 1) return;
    if (r.op === "?") void r.conn.send("? - E unknown op");
    else if (r.op === "A") void r.reply("A", token++);
    else if (r.op === "R") void r.reply("R");
  };
  await using client = await readyClient(server.address, { reconnectIntervalMs: 60_000 });
  const locks = await within(
    Promise.all([client.tryAcquire("a"), client.tryAcquire("b")]),
    1900, // below the 2 s after which a silent connection is dropped anyway
    "both try-locks",
  );
  for (const lock of locks) assert.ok(lock !== null, "a free key is granted, not refused");
  assert.equal(server.open.find((c) => c.id === 1), undefined, "the frozen connection dropped");
  assert.equal(server.lines(/^A [ab] /).filter((r) => r.conn.id === 1).length, 1);
  assert.equal(server.lines(/^A [ab] /).filter((r) => r.conn.id === 2).length, 2);
  for (const lock of locks) await lock!.release();
});

Deno.test("LockClient asks the server on extend() after a suspected loss, not after a known one", async () => {
  await using server = await FakeServer.start();
  server.handler = lockServer({ firstToken: 5n });
  await using client = await readyClient(server.address);
  const lock = await client.acquire("k", { lease: 0.3 });
  await waitUntil(() => lock.signal.aborted, "the signal to fire near the end of the lease");
  assert.ok(lock.signal.reason instanceof LockLostError);
  await lock.extend(10); // the server still holds it: answered X
  assert.equal(server.count("X k 5 10"), 1);
  assert.equal(lock.lease, 10);
  server.handler = (r) => void r.reply("N");
  assert.ok((await rejection(lock.extend(10))) instanceof LockLostError);
  assert.equal(server.count("X k 5 10"), 2);
  assert.ok((await rejection(lock.extend(10))) instanceof LockLostError, "known lost");
  assert.equal(server.count("X k 5 10"), 2, "a known loss is not asked about again");
});

Deno.test("LockClient fires lock.signal when every connection drops, not when one node of several does", async () => {
  await using a = await FakeServer.start();
  await using b = await FakeServer.start();
  a.handler = b.handler = lockServer();
  await using single = await readyClient(a.address, { reconnectIntervalMs: 60_000 });
  await using pair = await readyClient([a.address, b.address], { reconnectIntervalMs: 60_000 });
  const alone = await single.acquire("k1", { lease: 30 });
  const both = await pair.acquire("k2", { lease: 30 });
  await a.stopListening();
  await a.dropAll();
  await waitUntil(() => alone.signal.aborted, "the single-node lock's signal");
  assert.match(String(alone.signal.reason), /every connection to lockd dropped/);
  await waitUntil(() => pair.connected === 1, "the pair client to see node a gone");
  assert.equal(both.signal.aborted, false, "node b still answers: a standby keeps the locks");
  await both.release();
});

Deno.test("LockClient treats tls:// nodes as nodes, not as a bridge, when one of them drops", async () => {
  await using a = await FakeServer.start();
  await using b = await FakeServer.start();
  a.handler = b.handler = lockServer();
  // Node a is reached over "TLS" (plain TCP underneath, for the fake): losing it is losing one
  // node of two, not losing every connection to a bridge.
  const plainTcp: Connect = (address, handlers, signal) =>
    connectTransport({ ...address, scheme: "tcp" }, handlers, signal);
  await using pair = await readyClient([`tls://${a.address}`, b.address], {
    connect: plainTcp,
    reconnectIntervalMs: 60_000,
  });
  const lock = await pair.acquire("k3", { lease: 30 });
  await a.stopListening();
  await a.dropAll();
  await waitUntil(() => pair.connected === 1, "the client to see node a gone");
  assert.equal(lock.signal.aborted, false, `still held: ${lock.signal.reason}`);
  await lock.release();
});

Deno.test("LockClient: a wait that ends while its node is gone is no timeout", async () => {
  // The node drops every connection 50 ms after an acquire reaches it, and from then on a
  // connection attempt hangs (its host is gone) until the client gives up on it.
  let gone = false;
  const open = new Set<() => void>();
  const connect: Connect = async (_address, handlers, signal) => {
    if (gone) {
      await new Promise((_, reject) =>
        signal.addEventListener("abort", () => reject(signal.reason))
      );
    }
    let up = true;
    const drop = () => {
      if (!up) return;
      up = false;
      open.delete(drop);
      handlers.closed();
    };
    open.add(drop);
    return {
      send(line) {
        if (!up) return;
        if (line === "?") queueMicrotask(() => up && handlers.line("? - E unknown op"));
        else if (line.startsWith("HELLO ")) {
          queueMicrotask(() => up && handlers.line(`HELLO ${line.split(" ")[2]} OK`));
        } else if (line.startsWith("A ")) {
          setTimeout(() => {
            gone = true;
            for (const d of [...open]) d();
          }, 50);
        }
      },
      close: drop,
    };
  };
  await using client = new LockClient("node:1", { connect, connectTimeoutMs: 600 });
  await waitUntil(() => client.connected === 2, "both connections up");
  const error = await rejection(client.acquire("free", { wait: 0.3 }));
  // Nothing answered: the key may well be free. The wait's deadline fell while the request
  // waited for a connection (before: LockTimeoutError, "not granted within 0.3 s").
  assert.ok(error instanceof LockUnavailableError, `${error}`);
});

Deno.test("LockClient probes a connection a third of staleConnectionMs after a request to it went unanswered", async () => {
  await using server = await FakeServer.start();
  let answer = true;
  server.handler = (r) => {
    if (answer && r.op === "I") void r.reply("F");
  };
  await using client = await readyClient(server.address, {
    connectionsPerAddress: 1,
    reconnectIntervalMs: 60_000,
    staleConnectionMs: 1500,
  });
  // A busy spell, then the next request at once, which the node never answers: the look that
  // was due for the busy spell must not set the pace (before, the probe came at 1000 ms).
  await client.inspect("warm");
  answer = false;
  server.answerPings = false;
  const sent = performance.now();
  const unanswered = rejection(client.inspect("frozen"));
  const probe = await server.take("?");
  const after = probe.at - sent;
  assert.ok(after >= 450 && after < 850, `probed ${Math.round(after)} ms after the request`);
  assert.ok((await unanswered) instanceof LockError);
});
