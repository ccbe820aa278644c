/**
 * `LockClient` against a scripted fake server (tests/_fake_server.ts): the reply-to-error
 * mapping, abort, auto-extension, silence and close() (docs/client.md), forced through
 * out-of-order replies, `E` and silence.
 *
 * Op and resource sanitizers are on (deno.json): each test also checks that the client
 * leaves no timer, socket or pending op behind.
 */

import assert from "node:assert/strict";
import {
  type Lock,
  LockAbortedError,
  LockClient,
  LockError,
  LockLostError,
  LockRejectedError,
  LockTimeoutError,
  LockUnavailableError,
} from "../mod.ts";
import { delay, FakeServer, lockServer } from "./_fake_server.ts";
import { readyClient, rejection, within } from "./_fake_client.ts";

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

Deno.test("LockClient stops renewing a lock detached while its renewal is unanswered", async () => {
  await using server = await FakeServer.start();
  server.handler = (r) => {
    if (r.op !== "X") lockServer()(r); // renewals go unanswered
  };
  const client = await readyClient(server.address);
  const lock = await client.acquire("k", { lease: 0.3, autoExtend: true });
  await server.take("X k ");
  lock.detach();
  // The renewal in flight fails when the client closes: it must not be tried again, and no
  // timer may be left (the test's sanitizer fails on one; before, it renewed forever).
  await client.close();
  assert.equal(server.count("X k "), 1);
  assert.equal(server.count("R k "), 0, "close() releases no detached lock");
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

Deno.test("LockClient waits out a refused hello's delay and reports the refusal, not a frozen node", async () => {
  await using server = await FakeServer.start();
  server.answerHellos = false;
  // A throttled address: the refusal comes 3 s after the hello (more than staleConnectionMs),
  // and nothing else is answered meanwhile (docs/protocol.md).
  server.handler = (r) => {
    if (r.op !== "HELLO") return;
    server.later(3000, () => {
      void r.conn.send("HELLO - E authentication failed");
      void r.conn.close();
    });
  };
  server.answerPings = false;
  await using client = new LockClient(server.address, {
    auth: { name: "billing", secret: "a-wrong-secret-of-20-chars" },
    reconnectIntervalMs: 60_000,
    staleConnectionMs: 1000,
    retryTimeoutMs: 10_000,
  });
  const started = performance.now();
  // One without a wait limit (the watch's silence bound), one whose 0.5 s wait runs out
  // first (the probe at its deadline).
  const errors = await Promise.all([
    rejection(client.acquire("k")),
    rejection(client.acquire("w", { wait: 0.5 })),
  ]);
  const elapsed = performance.now() - started;
  for (const error of errors) {
    assert.ok(error instanceof LockRejectedError, String(error));
    assert.match((error as Error).message, /authentication failed/);
  }
  assert.ok(elapsed >= 2900 && elapsed < 6000, `rejected after ${Math.round(elapsed)} ms`);
});

Deno.test("LockClient without a credential takes a node that never answers its hello for frozen at the usual bound", async () => {
  // A stopped process whose kernel still accepts connections: nothing is ever answered.
  await using server = await FakeServer.start();
  server.answerHellos = false;
  server.answerPings = false;
  server.handler = () => {};
  await using client = new LockClient(server.address, {
    reconnectIntervalMs: 60_000,
    retryTimeoutMs: 1000,
  });
  const started = performance.now();
  const error = await rejection(client.acquire("k", { wait: 0.3 }));
  const elapsed = performance.now() - started;
  assert.ok(error instanceof LockError, String(error));
  // The wait, then a probe's grace on each of the two connections; not 5 s more for a refusal.
  assert.ok(elapsed < 3000, `settled after ${Math.round(elapsed)} ms`);
});
