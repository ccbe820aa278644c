/**
 * `LockClient` against a scripted fake server (tests/_fake_server.ts): connection handling
 * of docs/client.md (two connections, round-robin, pipelining, moves, reconnection, release
 * retries, `M` redirects), the reply-to-error mapping, abort, auto-extension and close(),
 * forced through drops mid-request, out-of-order replies, redirects, `E` and silence.
 *
 * Op and resource sanitizers are on (deno.json): each test also checks that the client
 * leaves no timer, socket or pending op behind.
 */

import assert from "node:assert/strict";
import {
  type Lock,
  LockAbortedError,
  LockClient,
  type LockClientOptions,
  LockError,
  LockLostError,
  LockRejectedError,
  LockTimeoutError,
  LockUnavailableError,
} from "../mod.ts";
import { type Connect, connectTransport } from "../mod.ts";
import { delay, FakeServer, lockServer, type Received, waitUntil } from "./_fake_server.ts";

/** Fast background reconnection, so tests wait milliseconds rather than 3 s. */
const FAST: LockClientOptions = { reconnectIntervalMs: 50 };

/** A client whose connections are all up (so round-robin has every connection to pick). */
async function readyClient(
  servers: string | string[],
  options: LockClientOptions = {},
): Promise<LockClient> {
  const client = new LockClient(servers, { ...FAST, ...options });
  await waitUntil(
    () => client.connected === client.connections,
    "every client connection to be up",
  );
  return client;
}

/** Rejects if `promise` has not settled within `ms` (instead of hanging the test). */
function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not settled within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Settles with the error `promise` rejects with (fails if it resolves). */
async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  assert.fail("expected a rejection");
}

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

// --- replies mapped to errors ------------------------------------------------------------

Deno.test("LockClient turns E into LockRejectedError carrying the server's message", async () => {
  await using server = await FakeServer.start();
  server.handler = (r) => void r.reply("E", "lease must be at most 60 seconds");
  await using client = await readyClient(server.address);
  const error = await rejection(client.acquire("k", { lease: 61 }));
  assert.ok(error instanceof LockRejectedError, String(error));
  assert.equal(error.serverMessage, "lease must be at most 60 seconds");
  assert.equal(server.count("A k 61 0"), 1, "not retried");
});

Deno.test("LockClient turns T into LockTimeoutError", async () => {
  await using server = await FakeServer.start();
  server.handler = (r) => void r.reply("T");
  await using client = await readyClient(server.address);
  const error = await rejection(client.acquire("k", { wait: 0.25 }));
  assert.ok(error instanceof LockTimeoutError, String(error));
  assert.equal(error.key, "k");
  assert.equal(server.count("A k 30 0.25"), 1);
  // tryAcquire turns T into null.
  assert.equal(await client.tryAcquire("k"), null);
  assert.equal(server.count("A k 30 0.001"), 1);
});

Deno.test("LockClient turns an extend answered N into LockLostError and fires lock.signal", async () => {
  await using server = await FakeServer.start();
  server.handler = lockServer({ firstToken: 3n });
  await using client = await readyClient(server.address);
  const lock = await client.acquire("k", { lease: 10 });
  let fired: unknown;
  lock.signal.addEventListener("abort", () => fired = lock.signal.reason);
  server.handler = (r) => void r.reply("N");
  const error = await rejection(lock.extend());
  assert.ok(error instanceof LockLostError, String(error));
  assert.equal(error.token, 3n);
  assert.ok(lock.signal.aborted);
  assert.ok(fired instanceof LockLostError);
  assert.equal(fired, lock.signal.reason);
  assert.ok(server.count("X k 3 10") === 1);
  await lock.release(); // answered N: fine
});

Deno.test("LockClient errors all extend LockError and are told apart by instanceof", async () => {
  await using server = await FakeServer.start();
  await using client = await readyClient(server.address, { retryTimeoutMs: 100 });
  const errors: Record<string, unknown> = {};
  server.handler = (r) => void r.reply("T");
  errors.timeout = await rejection(client.acquire("t", { wait: 0.01 }));
  server.handler = (r) => void r.reply("E", "bad");
  errors.rejected = await rejection(client.acquire("e"));
  server.handler = (r) => void r.reply("E", "no active node");
  errors.unavailable = await rejection(client.acquire("u"));
  server.handler = lockServer();
  const lock = await client.acquire("l");
  server.handler = (r) => void r.reply("N");
  errors.lost = await rejection(lock.extend());
  const reason = new Error("user left");
  errors.aborted = await rejection(client.acquire("a", { signal: AbortSignal.abort(reason) }));
  const classes = {
    timeout: LockTimeoutError,
    rejected: LockRejectedError,
    unavailable: LockUnavailableError,
    lost: LockLostError,
    aborted: LockAbortedError,
  };
  for (const [kind, error] of Object.entries(errors)) {
    assert.ok(error instanceof LockError, `${kind} is a LockError`);
    for (const [other, cls] of Object.entries(classes)) {
      assert.equal(error instanceof cls, kind === other, `${kind} instanceof ${cls.name}`);
    }
  }
  assert.equal(new Set(Object.values(errors).map((e) => (e as Error).name)).size, 5);
});

// --- abort -------------------------------------------------------------------------------

Deno.test("LockClient rejects an aborted acquire at once and releases a grant that arrives later", async () => {
  await using server = await FakeServer.start();
  await using client = await readyClient(server.address);
  const controller = new AbortController();
  const acquiring = client.acquire("k", { wait: 5, signal: controller.signal });
  const a = await server.take("A k ");
  const reason = new Error("user left");
  const abortedAt = performance.now();
  controller.abort(reason);
  const error = await rejection(acquiring); // the server has not answered: no wait for it
  assert.ok(performance.now() - abortedAt < 50);
  assert.ok(error instanceof LockAbortedError, String(error));
  assert.ok(error instanceof LockError);
  assert.equal(error.name, "AbortError");
  assert.equal(error.cause, reason);
  // The grant comes anyway: the client gives it back at once.
  await a.reply("A", 42);
  const r = await server.take("R k ");
  assert.equal(r.line, "R k 42");
  await r.reply("R");
});

Deno.test("LockClient rejects an acquire with an already-aborted signal without sending anything", async () => {
  await using server = await FakeServer.start();
  await using client = await readyClient(server.address);
  const reason = new Error("too late");
  const error = await rejection(client.acquire("k", { signal: AbortSignal.abort(reason) }));
  assert.ok(error instanceof LockAbortedError, String(error));
  assert.equal(error.name, "AbortError");
  assert.equal(error.cause, reason);
  await delay(30);
  assert.equal(server.count(), 0);
});

Deno.test("LockClient settles an acquire with a signal when the server answers T or E", async () => {
  // Regression: with a signal, a T or E reply must still reject the acquire (tryAcquire with
  // a signal is the common case), not leave it pending forever.
  await using server = await FakeServer.start();
  await using client = await readyClient(server.address);
  const signal = new AbortController().signal;
  server.handler = (r) => void r.reply("T");
  const timeout = await rejection(within(client.acquire("k", { wait: 0.1, signal }), 1000, "T"));
  assert.ok(timeout instanceof LockTimeoutError, String(timeout));
  const busy = await within(client.tryAcquire("k", { signal }), 1000, "tryAcquire, busy");
  assert.equal(busy, null);
  server.handler = (r) => void r.reply("E", "bad");
  const rejected = await rejection(within(client.acquire("k", { signal }), 1000, "E"));
  assert.ok(rejected instanceof LockRejectedError, String(rejected));
});

// --- autoExtend --------------------------------------------------------------------------

Deno.test("LockClient with autoExtend renews at about a third of the lease", async () => {
  await using server = await FakeServer.start();
  server.handler = lockServer({ firstToken: 8n });
  await using client = await readyClient(server.address, { autoExtend: true });
  const lock = await client.acquire("k", { lease: 0.6 });
  const granted = server.lines("A k ")[0].at;
  const x1 = await server.take("X k ");
  const x2 = await server.take("X k ");
  assert.equal(x1.line, "X k 8 0.6");
  const first = x1.at - granted;
  const second = x2.at - x1.at;
  assert.ok(first >= 170 && first < 350, `first renewal after ${Math.round(first)} ms`);
  assert.ok(second >= 170 && second < 350, `second renewal after ${Math.round(second)} ms`);
  assert.ok(!lock.signal.aborted);
  await lock.release();
});

Deno.test("LockClient with autoExtend fires lock.signal before the lease runs out when renewals go unanswered", async () => {
  await using server = await FakeServer.start();
  let renewals = 0;
  server.handler = (r) => {
    if (r.op === "X" && renewals++ > 0) return; // the first renewal is answered, then silence
    lockServer()(r);
  };
  await using client = await readyClient(server.address);
  const lock = await client.acquire("k", { lease: 0.6, autoExtend: true });
  const lost = Promise.withResolvers<number>();
  lock.signal.addEventListener("abort", () => lost.resolve(performance.now()));
  const firedAt = await within(lost.promise, 2000, "lock.signal");
  const answered = server.lines("X k ")[0];
  assert.ok(server.count("X k ") >= 2, "the unanswered renewal was sent");
  // The server's lease runs until 600 ms after it handled the last answered X.
  const serverExpiry = answered.at + 600;
  assert.ok(firedAt < serverExpiry, `fired ${Math.round(firedAt - serverExpiry)} ms after expiry`);
  assert.ok(lock.signal.reason instanceof LockLostError);
  await client.close();
});

Deno.test("LockClient stops renewal synchronously on release", async () => {
  await using server = await FakeServer.start();
  server.handler = lockServer();
  await using client = await readyClient(server.address);
  const lock = await client.acquire("k", { lease: 0.3, autoExtend: true });
  // Release while a renewal is outstanding; the X is answered after the release, and the R
  // only after 250 ms (2.5 renewal periods): renewal must stop at release(), not at its reply.
  server.handler = (r) => {
    if (r.op === "R") r.conn.sendLater(250, `R ${r.key} R`);
    else if (r.op !== "X") lockServer()(r);
  };
  const x = await server.take("X k ");
  const releasing = lock.release();
  assert.ok(lock.released);
  await server.take("R k ");
  await x.reply("X");
  await releasing;
  assert.equal(server.count("X k "), 1, "a renewal was sent while the release was outstanding");
  await delay(150);
  assert.equal(server.count("X k "), 1, "a renewal was sent after the release");
  assert.equal(server.log.at(-1)!.op, "R");
  assert.ok(!lock.signal.aborted, "release does not fire the signal");
});

Deno.test("LockClient with autoExtend keeps a lock that was granted after queueing", async () => {
  // A grant that arrives late in the wait (the holder released after 500 ms) starts a full
  // lease on the server. With autoExtend and a server that answers every X, the lock must
  // stay held: the client must renew before it gives up on the lease.
  await using server = await FakeServer.start();
  server.handler = (r) => {
    if (r.op === "A") r.conn.sendLater(500, `A ${r.key} A 5`);
    else lockServer()(r);
  };
  await using client = await readyClient(server.address);
  const lock = await client.acquire("k", { lease: 0.6, autoExtend: true });
  const grantedAt = performance.now();
  let firedAfter: number | undefined;
  lock.signal.addEventListener("abort", () => firedAfter = performance.now() - grantedAt);
  await delay(400);
  const renewals = server.count("X k ");
  await lock.release();
  assert.ok(
    renewals >= 1 && firedAfter === undefined,
    `${renewals} renewals within 400 ms of the grant (lease 600 ms); lock.signal fired ` +
      (firedAfter === undefined ? "never" : `${Math.round(firedAfter)} ms after the grant`),
  );
});

// --- silence and close() -----------------------------------------------------------------

Deno.test("LockClient leaks nothing when close() ends an acquire a silent server never answers", async () => {
  await using server = await FakeServer.start();
  const client = await readyClient(server.address);
  const acquiring = client.acquire("k", { wait: 0 });
  const tried = client.tryAcquire("t");
  await server.take("A k ");
  await server.take("A t ");
  await client.close();
  for (const pending of [acquiring, tried]) {
    const error = await rejection(pending);
    assert.ok(error instanceof LockError, String(error));
  }
  await server.untilOpen(0);
});

Deno.test("LockClient close() releases held locks, closes its connections and leaves nothing behind", async () => {
  await using server = await FakeServer.start();
  server.handler = lockServer({ firstToken: 11n });
  const client = await readyClient(server.address, { autoExtend: true });
  const a = await client.acquire("a", { lease: 5 });
  const b = await client.acquire("b", { lease: 5 });
  await client.close();
  assert.deepEqual(server.lines("R ").map((r) => r.line).sort(), ["R a 11", "R b 12"]);
  assert.ok(a.released && b.released);
  await server.untilOpen(0);
  assert.equal(client.connected, 0);
});

Deno.test("LockClient close() gives up on unanswered releases after about a second", async () => {
  await using server = await FakeServer.start();
  server.handler = lockServer({ silent: ["R"] });
  const client = await readyClient(server.address);
  await client.acquire("a");
  const started = performance.now();
  await client.close();
  const elapsed = performance.now() - started;
  assert.ok(elapsed >= 900 && elapsed < 1500, `close() took ${Math.round(elapsed)} ms`);
  assert.equal(server.count("R a 1"), 1);
  await server.untilOpen(0);
});

Deno.test("LockClient close() twice is fine and acquire after close rejects without sending", async () => {
  await using server = await FakeServer.start();
  server.handler = lockServer();
  const client = await readyClient(server.address);
  const first = client.close();
  assert.equal(client.close(), first, "the same promise");
  await first;
  await client.close();
  await client[Symbol.asyncDispose]();
  const before = server.count();
  const error = await rejection(client.acquire("k"));
  assert.ok(error instanceof LockError, String(error));
  assert.equal(await rejection(client.tryAcquire("k")) instanceof LockError, true);
  await delay(30);
  assert.equal(server.count(), before);
  await server.untilOpen(0);
});

Deno.test("LockClient rejects acquires made while close() is in progress", async () => {
  // close() first releases the held locks (a round trip); an acquire made meanwhile must not
  // be sent, or its grant outlives the client with its lease timer running.
  await using server = await FakeServer.start();
  server.handler = (r) => {
    if (r.op === "R") r.conn.sendLater(100, `R ${r.key} R`);
    else lockServer()(r);
  };
  const client = await readyClient(server.address);
  await client.acquire("held");
  const closing = client.close();
  const late = client.acquire("late");
  const outcome = await late.then(
    (lock: Lock) => {
      void lock.release().catch(() => {}); // stop its timers, whatever happens
      return lock;
    },
    (error: unknown) => error,
  );
  await closing;
  assert.equal(server.count("A late "), 0, "an acquire was sent after close()");
  assert.ok(outcome instanceof LockError, `acquire during close() gave ${outcome}`);
});

// --- argument checks ---------------------------------------------------------------------

Deno.test("LockClient rejects an invalid key, lease or wait with TypeError and sends nothing", async () => {
  await using server = await FakeServer.start();
  await using client = await readyClient(server.address);
  const bad: [string, Record<string, unknown>][] = [
    ["", {}],
    ["a b", {}],
    ["a\nb", {}],
    ["tab\tkey", {}],
    ["x".repeat(251), {}],
    ["é".repeat(126), {}], // 252 bytes
    ["k", { lease: 0 }],
    ["k", { lease: -1 }],
    ["k", { lease: NaN }],
    ["k", { lease: Infinity }],
    ["k", { lease: "30" }],
    ["k", { wait: -1 }],
    ["k", { wait: NaN }],
  ];
  for (const [key, options] of bad) {
    const error = await rejection(client.acquire(key, options));
    assert.ok(error instanceof TypeError, `${JSON.stringify(key)} ${String(options.lease)}`);
  }
  assert.ok(await rejection(client.tryAcquire("a b")) instanceof TypeError);
  assert.ok(await rejection(client.withLock("a b", () => {})) instanceof TypeError);
  // The longest valid key is fine.
  server.handler = lockServer();
  const lock = await client.acquire("é".repeat(125));
  const sent = server.count();
  assert.ok(await rejection(lock.extend(0)) instanceof TypeError);
  assert.ok(await rejection(lock.extend(-1)) instanceof TypeError);
  await delay(30);
  assert.equal(server.count(), sent, "nothing sent for an invalid extend");
  assert.equal(server.count("A "), 1, "only the valid acquire was sent");
  await lock.release();
  // wait: Infinity is "no limit", which the protocol spells 0.
  const forever = await client.acquire("forever", { wait: Infinity });
  assert.equal(server.log.find((r) => r.key === "forever")?.line, "A forever 30 0");
  await forever.release();
});

Deno.test("LockClient writes leases and waits as plain decimal seconds, or refuses them", async () => {
  // docs/protocol.md: lease and wait match [0-9]+(\.[0-9]+)?; a huge number must not go out as "1e+21".
  await using server = await FakeServer.start();
  server.handler = (r) => void r.reply("E", "lease must be at most 86400 seconds");
  await using client = await readyClient(server.address);
  for (const options of [{ lease: 1e21 }, { wait: 1e21 }]) {
    const error = await rejection(client.acquire("k", options));
    assert.ok(error instanceof TypeError || error instanceof LockRejectedError, String(error));
  }
  for (const request of server.lines("A ")) {
    assert.match(request.line, /^A k [0-9]+(\.[0-9]+)? [0-9]+(\.[0-9]+)?$/);
  }
});

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
