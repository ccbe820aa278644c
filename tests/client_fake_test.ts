/**
 * `LockClient` against a scripted fake server (tests/_fake_server.ts): connection handling
 * of docs/client.md (two connections, round-robin, pipelining, moves, reconnection, release
 * retries, `M` redirects), forced through drops mid-request and redirects. Errors, abort,
 * auto-extension and close(): client_fake_errors_test.ts; argument checks:
 * client_args_test.ts; corner cases: client_edges_test.ts.
 *
 * Op and resource sanitizers are on (deno.json): each test also checks that the client
 * leaves no timer, socket or pending op behind.
 */

import assert from "node:assert/strict";
import { LockClient, LockError, LockUnavailableError } from "../mod.ts";
import { type Connect, connectTransport } from "../mod.ts";
import { delay, FakeServer, lockServer, type Received, waitUntil } from "./_fake_server.ts";
import { readyClient, rejection, within } from "./_fake_client.ts";

// --- connections, round-robin, pipelining ------------------------------------------------

Deno.test("LockClient keeps exactly two connections to a single address and uses both round-robin", async () => {
  await using server = await FakeServer.start();
  server.handler = lockServer();
  await using client = await readyClient(server.address);
  assert.equal(client.connections, 2);
  await server.untilAccepted(2);

  // Sequential requests alternate between the two connections.
  for (let i = 0; i < 4; i++) {
    const lock = await client.acquire(`k${i}`);
    await lock.release();
  }
  const log = server.lines();
  assert.equal(log.length, 8);
  for (let i = 1; i < log.length; i++) {
    assert.notEqual(log[i].conn, log[i - 1].conn, `request ${i} went to the same connection`);
  }
  // Concurrent requests are spread over both as well.
  const locks = await Promise.all([0, 1, 2, 3].map((i) => client.acquire(`p${i}`)));
  const connsUsed = new Set(server.lines("A p").map((r) => r.conn.id));
  assert.equal(connsUsed.size, 2);
  await Promise.all(locks.map((l) => l.release()));
  assert.equal(server.accepted, 2, "no third connection to a single address");
  for (const conn of server.connections) assert.ok(conn.lines.length >= 4);
});

Deno.test("LockClient pipelines requests and matches out-of-order replies by (op, key)", async () => {
  await using server = await FakeServer.start();
  await using client = await readyClient(server.address);
  const keys = ["a", "b", "c", "d", "e", "f"];
  const acquiring = keys.map((key) => client.acquire(key, { lease: 10 }));
  const requests: Received[] = [];
  for (const key of keys) requests.push(await server.take(`A ${key} `));
  // All six are outstanding at once, several on each connection.
  for (const conn of server.connections) {
    assert.ok(conn.lines.length >= 2, `connection ${conn.id} carries ${conn.lines.length}`);
  }
  // Answer each connection's requests in reverse order, with a token per key.
  const tokens = new Map(keys.map((k, i) => [k, BigInt(100 + i)]));
  tokens.set("f", 18446744073709551615n); // a u64 above 2^53 stays exact
  for (const conn of server.connections) {
    const mine = requests.filter((r) => r.conn === conn).reverse();
    await conn.send(...mine.map((r) => `A ${r.key} A ${tokens.get(r.key)}`));
  }
  const locks = await Promise.all(acquiring);
  assert.deepEqual(locks.map((l) => [l.key, l.token]), keys.map((k) => [k, tokens.get(k)]));

  // Same key, different ops, both outstanding: the op tells the replies apart.
  const lock = locks[0];
  const extending = lock.extend(20);
  const again = client.acquire("a", { lease: 1 });
  const x = await server.take("X a ");
  const a = await server.take("A a 1 ");
  await a.reply("A", 200);
  await x.reply("X");
  await extending;
  assert.equal(lock.lease, 20);
  assert.equal((await again).token, 200n);

  // Releases carry the exact big token.
  server.handler = lockServer();
  await locks[5].release();
  assert.equal(server.count("R f 18446744073709551615"), 1);
  await client.close();
});

Deno.test("LockClient matches replies with the same (op, key) in the order sent", async () => {
  await using server = await FakeServer.start();
  await using client = await readyClient(server.address);
  // Tag each request by its lease (1, 2, 3, 4 s): the line tells which call it was.
  const acquiring = [1, 2, 3, 4].map((lease) => client.acquire("same", { lease }));
  for (let i = 0; i < 4; i++) await server.take("A same ");
  for (const conn of server.connections) {
    assert.ok(conn.lines.length >= 2, "several outstanding on one connection");
    // One write answering this connection's requests in the order they arrived: the first
    // reply must go to the first request sent on it, and so on.
    await conn.send(...conn.lines.map((line) => `A same A ${Number(line.split(" ")[2]) * 10}`));
  }
  const locks = await Promise.all(acquiring);
  assert.deepEqual(locks.map((l) => l.token), [10n, 20n, 30n, 40n]);
  server.handler = lockServer();
  await Promise.all(locks.map((l) => l.release()));
});

// --- drops, moves, unavailability --------------------------------------------------------

Deno.test("LockClient moves an acquire to the next connection when its connection drops", async () => {
  await using server = await FakeServer.start();
  await using client = await readyClient(server.address);
  const acquiring = client.acquire("k", { lease: 10, wait: 5 });
  const first = await server.take("A k ");
  await first.conn.close(); // cut mid-request
  const second = await server.take("A k ");
  assert.notEqual(second.conn, first.conn);
  assert.match(second.line, /^A k 10 (5|4\.\d+)$/, "the wait left is asked again");
  await second.reply("A", 9);
  const lock = await acquiring;
  assert.equal(lock.token, 9n);
  server.handler = lockServer();
  await lock.release();
});

Deno.test("LockClient fails an acquire with LockUnavailableError after both connections drop mid-request", async () => {
  await using server = await FakeServer.start();
  await using client = await readyClient(server.address, { reconnectIntervalMs: 1000 });
  server.handler = (r) => void r.conn.close(); // every request cuts its connection
  const error = await rejection(client.acquire("k"));
  assert.ok(error instanceof LockUnavailableError, String(error));
  assert.ok(error instanceof LockError);
  const attempts = server.lines("A k ");
  assert.equal(attempts.length, 2, "one attempt per connection");
  assert.notEqual(attempts[0].conn, attempts[1].conn);
});

Deno.test("LockClient makes one attempt per address (3 addresses) before LockUnavailableError", async () => {
  await using s1 = await FakeServer.start();
  await using s2 = await FakeServer.start();
  await using s3 = await FakeServer.start();
  const servers = [s1, s2, s3];
  for (const s of servers) s.handler = (r) => void r.conn.close();
  await using client = await readyClient(servers.map((s) => s.address), {
    reconnectIntervalMs: 100,
  });
  assert.equal(client.connections, 3);
  const error = await rejection(client.acquire("k"));
  assert.ok(error instanceof LockUnavailableError, String(error));
  assert.deepEqual(servers.map((s) => s.count("A k ")), [1, 1, 1]);

  // With two nodes cutting and the third answering, the acquire succeeds on the third try.
  await waitUntil(() => client.connected === 3, "reconnection", { timeoutMs: 3000 });
  s3.handler = lockServer({ firstToken: 5n });
  const lock = await client.acquire("k2");
  assert.equal(lock.token, 5n);
  assert.equal(s3.count("A k2 "), 1);
  await lock.release();
});

Deno.test("LockClient survives one of its two connections being cut and reconnects it in the background", async () => {
  await using server = await FakeServer.start();
  server.handler = lockServer();
  await using client = await readyClient(server.address, { reconnectIntervalMs: 300 });
  const cutAt = performance.now();
  await server.connections[0].close();
  await waitUntil(() => client.connected === 1, "the client to see the drop");
  // Service goes on over the other connection meanwhile.
  const lock = await client.acquire("k");
  await lock.release();
  assert.equal(server.lines("A k ")[0].conn, server.connections[1]);
  assert.equal(server.accepted, 2);
  // And the cut connection comes back by itself.
  await server.untilAccepted(3);
  const elapsed = performance.now() - cutAt;
  assert.ok(elapsed >= 250, `reconnected after ${elapsed} ms, before reconnectIntervalMs`);
  await waitUntil(() => client.connected === 2, "both connections up again");
});

Deno.test("LockClient reconnects a dropped connection after 3 s by default", async () => {
  await using server = await FakeServer.start();
  await using client = new LockClient(server.address);
  await waitUntil(() => client.connected === 2, "both connections up");
  const cutAt = performance.now();
  await server.connections[0].close();
  await waitUntil(() => client.connected === 1, "the client to see the drop");
  await delay(1000);
  assert.equal(server.accepted, 2, "no reconnection after 1 s");
  await server.untilAccepted(3, { timeoutMs: 3000 });
  const elapsed = performance.now() - cutAt;
  assert.ok(elapsed >= 2900 && elapsed <= 3700, `reconnected after ${Math.round(elapsed)} ms`);
  await waitUntil(() => client.connected === 2, "both connections up again");
});

// --- release retries ---------------------------------------------------------------------

Deno.test("LockClient retries a release until the server is back within 5 s (200 ms apart by default)", async () => {
  await using server = await FakeServer.start();
  server.handler = lockServer({ firstToken: 41n });
  const attempts: number[] = [];
  const connect: Connect = (address, handlers, signal) => {
    attempts.push(performance.now());
    return connectTransport(address, handlers, signal);
  };
  // Background reconnection out of the way: only the release's own attempts are counted.
  await using client = await readyClient(server.address, { reconnectIntervalMs: 60_000, connect });
  const lock = await client.acquire("k");
  await server.stop();
  await waitUntil(() => client.connected === 0, "the client to see the node go down");
  const from = attempts.length;
  const started = performance.now();
  const releasing = lock.release();
  await delay(1100); // down for more than a second: still retrying
  server.listen();
  await within(releasing, 1000, "release after the server came back");
  assert.ok(performance.now() - started >= 1100);
  const r = server.lines("R k ");
  assert.deepEqual(r.map((x) => x.line), ["R k 41"], "sent once, when the server was back");

  // Attempts come in rounds (every connection tried), rounds 200 ms apart.
  const times = attempts.slice(from).filter((t) => t < started + 1100);
  const rounds = times.filter((t, i) => i === 0 || t - times[i - 1] > 100);
  const gaps = rounds.slice(1).map((t, i) => t - rounds[i]);
  assert.ok(rounds.length >= 4 && rounds.length <= 7, `${rounds.length} rounds in 1.1 s`);
  for (const gap of gaps) assert.ok(gap >= 180 && gap < 400, `retry gap ${Math.round(gap)} ms`);
});

Deno.test("LockClient ends a release retry when the server answers N", async () => {
  await using server = await FakeServer.start();
  server.handler = lockServer();
  await using client = await readyClient(server.address, { releaseRetryIntervalMs: 50 });
  const lock = await client.acquire("k");
  await server.stop();
  await waitUntil(() => client.connected === 0, "the client to see the node go down");
  const releasing = lock.release();
  await delay(150);
  server.handler = (r) => void r.reply("N"); // the lease ran out meanwhile: not held
  server.listen();
  await within(releasing, 2000, "release answered N");
  await delay(200);
  assert.equal(server.count("R k "), 1, "no retry after N");
  assert.equal(lock.release(), releasing, "release() again returns the same promise");
});

Deno.test("LockClient rejects a release with LockUnavailableError once releaseRetryMs has passed", async () => {
  await using server = await FakeServer.start();
  server.handler = lockServer();
  await using client = await readyClient(server.address, {
    releaseRetryMs: 500,
    releaseRetryIntervalMs: 100,
  });
  const lock = await client.acquire("k");
  await server.stop();
  await waitUntil(() => client.connected === 0, "the client to see the node go down");
  const started = performance.now();
  const error = await rejection(lock.release());
  const elapsed = performance.now() - started;
  assert.ok(error instanceof LockUnavailableError, String(error));
  assert.ok(elapsed >= 350 && elapsed < 1000, `gave up after ${Math.round(elapsed)} ms`);
  assert.equal(server.count("R "), 0);
});

// --- M redirects and standbys ------------------------------------------------------------

Deno.test("LockClient follows M replies to the named node over a new connection", async () => {
  await using standby = await FakeServer.start();
  await using active = await FakeServer.start();
  standby.handler = (r) => void r.reply("M", active.address);
  active.handler = lockServer({ firstToken: 100n });
  await using client = await readyClient(standby.address);
  const lock = await client.acquire("k", { lease: 10, wait: 2 });
  assert.equal(lock.token, 100n);
  assert.equal(standby.count("A k "), 1);
  assert.equal(active.count("A k 10 "), 1, "the request was resent to the active node");
  assert.equal(active.accepted, 1, "one new connection to the named node");
  assert.equal(client.connections, 3);
  // Later requests go to the known active node directly.
  await lock.release();
  assert.equal(active.count("R k 100"), 1);
  assert.equal(standby.count("R "), 0);
});

Deno.test("LockClient retries a standby's 'E no active node' until an active node answers", async () => {
  await using first = await FakeServer.start();
  await using second = await FakeServer.start();
  // The client's node redirects to a node that is still promoting.
  first.handler = (r) => void r.reply("M", second.address);
  let refusals = 0;
  second.handler = (r) => {
    if (r.op === "A" && refusals < 3) {
      refusals++;
      void r.reply("E", "no active node");
    } else lockServer({ firstToken: 7n })(r);
  };
  await using client = await readyClient(first.address);
  const lock = await client.acquire("k");
  assert.equal(lock.token, 7n);
  assert.equal(second.count("A k "), 4);
  second.handler = lockServer();
  await lock.release();
});

Deno.test("retryTimeoutMs does not count the time a node held the request in its queue", async () => {
  await using first = await FakeServer.start();
  await using second = await FakeServer.start();
  // The first node keeps the acquire queued for twice retryTimeoutMs, then hands off: it
  // redirects to the second, which answers 'no active node' a few times while it takes over.
  first.handler = (r) => {
    if (r.op === "A") first.later(600, () => void r.reply("M", second.address));
  };
  let refusals = 0;
  second.handler = (r) => {
    if (r.op === "A" && refusals < 3) {
      refusals++;
      void r.reply("E", "no active node");
    } else lockServer({ firstToken: 9n })(r);
  };
  await using client = await readyClient(first.address, { retryTimeoutMs: 300 });
  const started = performance.now();
  const lock = await client.acquire("k", { wait: 30 });
  assert.equal(lock.token, 9n);
  assert.ok(performance.now() - started >= 600, "granted after the handoff");
  assert.equal(second.count("A k "), 4);
  second.handler = lockServer();
  await lock.release();
});

Deno.test("only an acquire gets back the time a node held it: other requests keep retryTimeoutMs", async () => {
  // A node that holds every request 400 ms, then answers 'no active node': nothing is queued
  // there but an acquire, so an inspection or an extend gives up after retryTimeoutMs.
  await using server = await FakeServer.start();
  server.handler = (r) => server.later(400, () => void r.reply("E", "no active node"));
  await using client = await readyClient(server.address, { retryTimeoutMs: 300 });
  for (const call of [() => client.inspect("k"), () => client.extend("k", 5n, 10)]) {
    const started = performance.now();
    const error = await rejection(call());
    const elapsed = performance.now() - started;
    assert.ok(error instanceof LockUnavailableError, String(error));
    // The first try (400 ms), then retries until 300 ms are spent: one more (400 ms) here.
    // Given the held time back, it would go on for four more tries (about 2 s).
    assert.ok(elapsed < 1400, `gave up after ${Math.round(elapsed)} ms`);
  }
});

Deno.test("LockClient gives up on 'E no active node' after retryTimeoutMs with LockUnavailableError", async () => {
  await using server = await FakeServer.start();
  server.handler = (r) => void r.reply("E", "no active node");
  await using client = await readyClient(server.address, { retryTimeoutMs: 300 });
  const started = performance.now();
  const error = await rejection(client.acquire("k"));
  const elapsed = performance.now() - started;
  assert.ok(error instanceof LockUnavailableError, String(error));
  assert.ok(elapsed >= 100 && elapsed < 1000, `gave up after ${Math.round(elapsed)} ms`);
  assert.ok(server.count("A k ") >= 3, "retried meanwhile");
});
