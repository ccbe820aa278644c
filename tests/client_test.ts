/**
 * Tests of `LockClient` (issue 3, docs/protocol.md and docs/client.md) against the real server: a `server/main.ts`
 * process on a free port, reached directly or through a TCP proxy that can cut connections.
 * Only the public API of `mod.ts` is used.
 */

import assert from "node:assert/strict";
import { setTimeout as delay } from "node:timers/promises";
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
import { LineClient, type ServerProcess, type StartOptions, startServer } from "./_helpers.ts";
import { TcpProxy } from "./_proxy.ts";
import { assertNoUnhandledRejections } from "./_unhandled.ts";

// ---------------------------------------------------------------------------------------
// Local helpers

/** Closes every client made through it, stops the server and removes its directory. */
class Fixture {
  #clients: LockClient[] = [];
  #cleanups: (() => Promise<void> | void)[] = [];
  constructor(readonly server: ServerProcess) {}

  /** A client of the server (or of `address`), closed at the end. */
  client(
    address: string | string[] = this.server.address,
    options: LockClientOptions = {},
  ): LockClient {
    const client = new LockClient(address, options);
    this.#clients.push(client);
    return client;
  }

  /** Runs `fn` at the end, before the server stops. */
  defer(fn: () => Promise<void> | void): void {
    this.#cleanups.push(fn);
  }

  async cleanup(): Promise<void> {
    for (const fn of this.#cleanups.reverse()) await fn();
    await Promise.all(this.#clients.map((c) => c.close()));
    await this.server.stop();
    await Deno.remove(this.server.dataDir, { recursive: true }).catch(() => {});
  }
}

/** Starts a server, runs `fn`, then cleans up and checks for unhandled rejections. */
async function withServer(
  options: StartOptions,
  fn: (f: Fixture) => Promise<void>,
): Promise<void> {
  const fixture = new Fixture(await startServer(options));
  try {
    await fn(fixture);
  } finally {
    await fixture.cleanup();
  }
  await assertNoUnhandledRejections();
}

/** Tracks whether a promise has settled, without ever leaving it unhandled. */
function watch<T>(promise: Promise<T>): { settled: () => boolean; promise: Promise<T> } {
  let settled = false;
  promise.then(() => settled = true, () => settled = true);
  return { settled: () => settled, promise };
}

/** Resolves with the ms elapsed until `signal` aborts; rejects after `timeoutMs`. */
function abortedWithin(signal: AbortSignal, timeoutMs: number): Promise<number> {
  const start = performance.now();
  if (signal.aborted) return Promise.resolve(0);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      reject(new Error(`lock.signal did not fire within ${timeoutMs} ms`));
    }, timeoutMs);
    const onAbort = () => {
      clearTimeout(timer);
      resolve(performance.now() - start);
    };
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/** Asserts that `other` can take `key` at once (it is free), and releases it again. */
async function assertFree(other: LockClient, key: string, message?: string): Promise<void> {
  const lock = await other.tryAcquire(key, { lease: 5 });
  assert.ok(lock !== null, message ?? `"${key}" should be free`);
  await lock.release();
}

/** Asserts that `other` cannot take `key` now (someone holds it). */
async function assertHeld(other: LockClient, key: string, message?: string): Promise<void> {
  const lock = await other.tryAcquire(key, { lease: 5 });
  if (lock !== null) await lock.release();
  assert.equal(lock, null, message ?? `"${key}" should be held`);
}

/** A free TCP port on 127.0.0.1 with nothing listening. */
function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

/** Time since `start` in ms. */
function since(start: number): number {
  return performance.now() - start;
}

/** The `A <key> ...` lines a proxied connection carried. */
function acquiresOf(lines: readonly string[], key: string): string[] {
  return lines.filter((l) => l.startsWith(`A ${key} `));
}

// ---------------------------------------------------------------------------------------

Deno.test("LockClient acquires, extends and releases locks on a real server", async (t) => {
  await withServer({}, async (f) => {
    const client = f.client();
    const other = f.client();

    await t.step(
      "acquire() does grant a Lock with key, bigint token, lease and signal",
      async () => {
        const lock = await client.acquire("basic:a");
        assert.equal(lock.key, "basic:a");
        assert.equal(typeof lock.token, "bigint");
        assert.ok(lock.token > 0n);
        assert.equal(lock.lease, 30, "default lease is 30 s");
        assert.ok(lock.signal instanceof AbortSignal);
        assert.equal(lock.signal.aborted, false);
        await assertHeld(other, "basic:a");
        await lock.release();
        await assertFree(other, "basic:a");
      },
    );

    await t.step("new LockClient() does accept an array of addresses", async () => {
      const down = `127.0.0.1:${freePort()}`;
      const arrayClient = f.client([f.server.address]);
      const mixed = f.client([down, f.server.address]);
      const a = await arrayClient.acquire("basic:array", { lease: 5, wait: 2 });
      await a.release();
      // A dead address is skipped: every request goes to the live one.
      for (let i = 0; i < 4; i++) {
        const m = await mixed.acquire(`basic:mixed:${i}`, { lease: 5, wait: 2 });
        await m.release();
      }
    });

    await t.step("acquire() does issue strictly increasing tokens", async () => {
      let last = 0n;
      for (let i = 0; i < 5; i++) {
        const lock = await client.acquire(`basic:inc:${i % 2}`);
        assert.ok(lock.token > last, `${lock.token} > ${last}`);
        last = lock.token;
        await lock.release();
      }
    });

    await t.step("acquire() does wait without limit by default (wait 0)", async () => {
      const holder = await other.acquire("basic:nolimit");
      const waiting = watch(client.acquire("basic:nolimit"));
      await delay(300);
      assert.equal(waiting.settled(), false, "a default acquire must keep waiting");
      await holder.release();
      const lock = await waiting.promise;
      assert.ok(lock.token > holder.token);
      await lock.release();
    });

    await t.step("acquire() does take fractional seconds for lease and wait", async () => {
      const lock = await client.acquire("basic:frac", { lease: 0.25, wait: 0.5 });
      assert.equal(lock.lease, 0.25);
      // The server frees it after a quarter of a second: a waiter gets it.
      const start = performance.now();
      const next = await other.acquire("basic:frac", { lease: 5, wait: 2.5 });
      assert.ok(since(start) < 1500, `granted after ${since(start)} ms`);
      assert.ok(next.token > lock.token);
      await next.release();
      await lock.release(); // N: already gone; resolves anyway.
    });

    await t.step("extend() does reset the lease and update lock.lease", async () => {
      const lock = await client.acquire("basic:extend", { lease: 0.3 });
      await lock.extend(30);
      assert.equal(lock.lease, 30);
      await delay(450); // Past the first lease: still held because of the extend.
      assert.equal(lock.signal.aborted, false);
      await assertHeld(other, "basic:extend");
      await lock.extend(0.3);
      assert.equal(lock.lease, 0.3);
      await lock.release();
      await assertFree(other, "basic:extend");
    });

    await t.step("release() does free the key at once for another client", async () => {
      const lock = await client.acquire("basic:release", { lease: 30 });
      const waiting = other.acquire("basic:release", { lease: 5, wait: 2 });
      await delay(50);
      const start = performance.now();
      await lock.release();
      const next = await waiting;
      assert.ok(since(start) < 500, `the waiter got it ${since(start)} ms after the release`);
      await next.release();
      assert.equal(lock.signal.aborted, false, "release does not fire the signal");
    });

    await t.step("await using does release the lock at the end of the block", async () => {
      let token: bigint;
      {
        await using lock = await client.acquire("basic:using");
        token = lock.token;
        await assertHeld(other, "basic:using");
      }
      const next = await other.tryAcquire("basic:using");
      assert.ok(next !== null, "free right after the block");
      assert.ok(next.token > token);
      await next.release();
    });

    await t.step("withLock() does return fn's value and release afterwards", async () => {
      let seen: Lock | undefined;
      const value = await client.withLock("basic:with", { lease: 10 }, async (lock) => {
        seen = lock;
        assert.equal(lock.key, "basic:with");
        assert.equal(lock.lease, 10);
        await assertHeld(other, "basic:with");
        return 42;
      });
      assert.equal(value, 42);
      assert.ok(seen !== undefined);
      await assertFree(other, "basic:with");
    });

    await t.step("withLock() does release and rethrow when fn throws", async () => {
      const boom = new Error("boom");
      await assert.rejects(
        client.withLock("basic:with-throw", { lease: 10 }, () => {
          throw boom;
        }),
        (error) => error === boom,
      );
      await assertFree(other, "basic:with-throw");
      const rejected = new Error("async boom");
      await assert.rejects(
        client.withLock("basic:with-throw", { lease: 10 }, async () => {
          await delay(10);
          throw rejected;
        }),
        (error) => error === rejected,
      );
      await assertFree(other, "basic:with-throw");
    });

    await t.step("tryAcquire() does return a Lock or null and never queue", async () => {
      const lock = await client.tryAcquire("basic:try", { lease: 10 });
      assert.ok(lock !== null);
      assert.equal(lock.lease, 10);
      const start = performance.now();
      assert.equal(await other.tryAcquire("basic:try", { lease: 10 }), null);
      assert.ok(since(start) < 500, `tryAcquire took ${since(start)} ms`);
      await lock.release();
      // The failed tryAcquire left nothing queued: the key is free, not given to `other`.
      const third = f.client();
      await assertFree(third, "basic:try", "a tryAcquire that got null must not stay queued");
    });

    await t.step("acquire() does pipeline many requests on one client", async () => {
      const locks = await Promise.all(
        Array.from({ length: 100 }, (_, i) => client.acquire(`basic:pipe:${i}`, { lease: 10 })),
      );
      const tokens = new Set(locks.map((l) => l.token));
      assert.equal(tokens.size, 100, "every grant has its own token");
      await Promise.all(locks.map((l) => l.release()));
      await assertFree(other, "basic:pipe:0");
      await assertFree(other, "basic:pipe:99");
    });

    await t.step("acquire() does match several waits for one key on one client", async () => {
      const grants: bigint[] = [];
      await Promise.all(
        Array.from(
          { length: 4 },
          () =>
            client.acquire("basic:same", { lease: 10, wait: 5 }).then(async (lock) => {
              grants.push(lock.token);
              await delay(5);
              await lock.release();
            }),
        ),
      );
      assert.equal(grants.length, 4);
      assert.deepEqual([...grants].sort((a, b) => (a < b ? -1 : 1)), grants);
      await assertFree(other, "basic:same");
    });

    await t.step("acquire() does reject invalid arguments with TypeError", async () => {
      await assert.rejects(client.acquire("has space"), TypeError);
      await assert.rejects(client.acquire(""), TypeError);
      await assert.rejects(client.acquire("k", { lease: 0 }), TypeError);
      await assert.rejects(client.acquire("k", { lease: -1 }), TypeError);
      await assert.rejects(client.acquire("k", { wait: -1 }), TypeError);
      await assert.rejects(client.acquire("k", { lease: NaN }), TypeError);
    });
  });
});

Deno.test("LockClient rejects with typed errors", async (t) => {
  await withServer({ args: ["--max-lease", "60"] }, async (f) => {
    const client = f.client();
    const other = f.client();

    await t.step("acquire() does reject with LockTimeoutError when the wait runs out", async () => {
      const holder = await other.acquire("err:t", { lease: 30 });
      const start = performance.now();
      const error = await client.acquire("err:t", { wait: 0.2 }).then(
        () => assert.fail("granted"),
        (e) => e,
      );
      assert.ok(error instanceof LockTimeoutError, String(error));
      assert.ok(error instanceof LockError);
      assert.ok(!(error instanceof LockUnavailableError));
      assert.ok(since(start) >= 150, `timed out after ${since(start)} ms`);
      assert.ok(since(start) < 2000, `timed out after ${since(start)} ms`);
      await holder.release();
      // The timed-out request is gone: the key is free, not granted to `client`.
      await assertFree(f.client(), "err:t");
    });

    await t.step("acquire() does reject with LockRejectedError above --max-lease", async () => {
      const error = await client.acquire("err:e", { lease: 61 }).then(
        () => assert.fail("granted"),
        (e) => e,
      );
      assert.ok(error instanceof LockRejectedError, String(error));
      assert.ok(error instanceof LockError);
      assert.match(error.serverMessage, /at most 60/);
      await assertFree(other, "err:e");
    });

    await t.step("extend() does reject with LockRejectedError above --max-lease", async () => {
      const lock = await client.acquire("err:xe", { lease: 10 });
      await assert.rejects(lock.extend(61), LockRejectedError);
      assert.equal(lock.signal.aborted, false);
      await assertHeld(other, "err:xe", "a rejected extend changes nothing");
      await lock.release();
    });

    await t.step("extend() does reject with LockLostError after the lease ran out", async () => {
      const lock = await client.acquire("err:n", { lease: 0.2 });
      const taker = await other.acquire("err:n", { lease: 10, wait: 2 }); // After the lease.
      const error = await lock.extend(10).then(() => assert.fail("extended"), (e) => e);
      assert.ok(error instanceof LockLostError, String(error));
      assert.ok(error instanceof LockError);
      assert.equal(error.token, lock.token);
      assert.equal(lock.signal.aborted, true);
      assert.ok(lock.signal.reason instanceof LockLostError);
      await assertHeld(client, "err:n", "the failed extend did not touch the new holder");
      await taker.release();
      await lock.release(); // Resolves: the lock is gone either way.
    });

    await t.step("extend() does reject with LockLostError when the server answers N", async () => {
      const lock = await client.acquire("err:n2", { lease: 30 });
      // Someone else releases this grant behind the client's back (same token).
      const raw = await LineClient.connect(f.server.port);
      try {
        assert.equal(await raw.request(`R err:n2 ${lock.token}`), "R err:n2 R");
      } finally {
        await raw.close();
      }
      assert.equal(lock.signal.aborted, false);
      await assert.rejects(lock.extend(30), LockLostError);
      assert.equal(lock.signal.aborted, true, "an N fires lock.signal");
      assert.ok(lock.signal.reason instanceof LockLostError);
      await lock.release();
    });

    await t.step(
      "acquire() does reject with LockUnavailableError when nothing listens",
      async () => {
        const nowhere = f.client(`127.0.0.1:${freePort()}`);
        const start = performance.now();
        const error = await nowhere.acquire("err:u", { wait: 1 }).then(
          () => assert.fail("granted"),
          (e) => e,
        );
        assert.ok(error instanceof LockUnavailableError, String(error));
        assert.ok(error instanceof LockError);
        assert.ok(!(error instanceof LockTimeoutError));
        assert.ok(since(start) < 3000, `took ${since(start)} ms`);
        // tryAcquire tells unavailability from contention: it rejects instead of null.
        await assert.rejects(nowhere.tryAcquire("err:u"), LockUnavailableError);
      },
    );

    await t.step(
      "acquire() does reject with LockUnavailableError once the server stopped",
      async () => {
        const server = await startServer();
        const stopped = new LockClient(server.address);
        try {
          const lock = await stopped.acquire("err:stop", { lease: 30 });
          assert.equal(await server.stop("SIGTERM"), 0);
          await assert.rejects(stopped.acquire("err:stop2", { wait: 1 }), LockUnavailableError);
          await assert.rejects(stopped.tryAcquire("err:stop3"), LockUnavailableError);
          await assert.rejects(lock.extend(30), LockUnavailableError);
        } finally {
          await stopped.close();
          await server.stop();
          await Deno.remove(server.dataDir, { recursive: true }).catch(() => {});
        }
      },
    );

    await t.step(
      "contention, timeout and unavailability are told apart by instanceof",
      async () => {
        const holder = await other.acquire("err:kinds", { lease: 30 });
        assert.equal(await client.tryAcquire("err:kinds"), null, "contention: null");
        const timeout = await client.acquire("err:kinds", { wait: 0.05 }).catch((e) => e);
        const nowhere = f.client(`127.0.0.1:${freePort()}`);
        const unavailable = await nowhere.acquire("err:kinds").catch((e) => e);
        assert.ok(timeout instanceof LockTimeoutError);
        assert.ok(!(timeout instanceof LockUnavailableError));
        assert.ok(unavailable instanceof LockUnavailableError);
        assert.ok(!(unavailable instanceof LockTimeoutError));
        for (const e of [timeout, unavailable]) {
          assert.ok(e instanceof LockError);
          assert.ok(e instanceof Error);
          assert.ok(!(e instanceof LockRejectedError));
          assert.ok(!(e instanceof LockLostError));
        }
        await holder.release();
      },
    );
  });
});

Deno.test("Lock.signal fires when the lease runs out, not on release", async (t) => {
  await withServer({}, async (f) => {
    const client = f.client();
    const other = f.client();

    await t.step("lock.signal does fire before the lease runs out without autoExtend", async () => {
      const lock = await client.acquire("sig:expire", { lease: 0.3 });
      const elapsed = await abortedWithin(lock.signal, 2000);
      assert.ok(elapsed >= 200, `fired after ${elapsed} ms of a 300 ms lease`);
      assert.ok(elapsed <= 320, `fired after ${elapsed} ms of a 300 ms lease`);
      assert.ok(lock.signal.reason instanceof LockLostError);
      assert.ok(lock.signal.reason instanceof LockError);
      // The server did take it back: another client gets it soon.
      const next = await other.acquire("sig:expire", { lease: 5, wait: 2 });
      assert.ok(next.token > lock.token);
      await next.release();
      await lock.release();
    });

    await t.step("lock.signal does not fire on release, nor on withLock's release", async () => {
      const lock = await client.acquire("sig:release", { lease: 0.3 });
      let fired = false;
      lock.signal.addEventListener("abort", () => fired = true);
      await lock.release();
      let signal: AbortSignal | undefined;
      await client.withLock("sig:with", { lease: 0.3 }, (held) => {
        signal = held.signal;
      });
      await delay(450); // Past both leases: nothing may fire.
      assert.equal(fired, false);
      assert.equal(lock.signal.aborted, false);
      assert.equal(signal?.aborted, false);
    });
  });
});

Deno.test("Lock.signal follows the server's lease: from the grant, with latency, when long", async (t) => {
  await withServer({}, async (f) => {
    const holderClient = f.client();
    const client = f.client();
    const other = f.client();

    await t.step(
      "lock.signal does not fire at once after a wait longer than the lease",
      async () => {
        const holder = await holderClient.acquire("grant:signal", { lease: 30 });
        const waiting = client.acquire("grant:signal", { lease: 0.6 });
        await delay(700); // Queued for longer than its lease.
        await holder.release();
        const lock = await waiting;
        await delay(100);
        // The server granted a fresh 0.6 s lease: the lock is held, not lost.
        await assertHeld(other, "grant:signal", "the server holds the fresh grant");
        assert.equal(
          lock.signal.aborted,
          false,
          "lock.signal fired 100 ms into a fresh 0.6 s lease (counted from the request)",
        );
        await lock.release();
      },
    );

    await t.step("autoExtend does keep a lock that queued longer than its lease", async () => {
      const holder = await holderClient.acquire("grant:auto", { lease: 30 });
      const waiting = client.acquire("grant:auto", { lease: 0.4, autoExtend: true });
      await delay(500); // Queued for longer than its lease.
      await holder.release();
      const lock = await waiting;
      await delay(900); // Two leases: only renewals keep it.
      await assertHeld(other, "grant:auto", "an auto-extended lock was taken by another client");
      assert.equal(lock.signal.aborted, false);
      await lock.release();
    });

    await t.step(
      "lock.signal does fire before the server lets go, with network latency",
      async () => {
        // 100 ms each way: the server's lease starts about 100 ms after the request was sent
        // and 100 ms before the grant arrives. A fresh client has measured no latency yet.
        const proxy = TcpProxy.start(f.server.port, { delayMs: 100 });
        const slow = new LockClient(proxy.address);
        try {
          const lock = await slow.acquire("grant:latency", { lease: 1 });
          await abortedWithin(lock.signal, 3000);
          await assertHeld(other, "grant:latency", "lock.signal fired after the server let go");
          await lock.release();
        } finally {
          await slow.close();
          await proxy.close();
        }
      },
    );

    await t.step("lock.signal does not fire early for a lease above 2^31 ms", async () => {
      const server = await startServer({ args: ["--max-lease", "5000000"] });
      const long = new LockClient(server.address);
      try {
        const lock = await long.acquire("grant:long", { lease: 3_000_000 }); // About 35 days.
        await delay(100);
        assert.equal(
          lock.signal.aborted,
          false,
          `lock.signal fired 100 ms into a 3,000,000 s lease: ${lock.signal.reason}`,
        );
        await lock.release();
      } finally {
        await long.close();
        await server.stop();
        await Deno.remove(server.dataDir, { recursive: true }).catch(() => {});
      }
    });
  });
});

Deno.test("LockClient autoExtend keeps a short lease alive until release", async () => {
  await withServer({}, async (f) => {
    const proxy = TcpProxy.start(f.server.port);
    f.defer(() => proxy.close());
    const perAcquire = f.client(proxy.address);
    const perClient = f.client(f.server.address, { autoExtend: true });
    const other = f.client();

    const a = await perAcquire.acquire("auto:acquire", { lease: 0.6, autoExtend: true });
    const b = await perClient.acquire("auto:client", { lease: 0.6 });
    const c = await perClient.acquire("auto:off", { lease: 0.3, autoExtend: false });
    const start = performance.now();
    while (since(start) < 2000) { // More than three leases.
      await delay(250);
      await assertHeld(other, "auto:acquire", `lost after ${since(start)} ms`);
      await assertHeld(other, "auto:client", `lost after ${since(start)} ms`);
    }
    assert.equal(a.signal.aborted, false);
    assert.equal(b.signal.aborted, false);
    assert.equal(a.lease, 0.6);
    assert.equal(c.signal.aborted, true, "autoExtend: false per acquire overrides the client");

    const extends_ = () => proxy.connections.flatMap((p) => p.sent).filter((l) => l[0] === "X");
    assert.ok(extends_().length >= 3, `only ${extends_().length} renewals in 2 s`);
    await a.release();
    await b.release();
    await assertFree(other, "auto:acquire", "free at once after release");
    await assertFree(other, "auto:client", "free at once after release");
    const renewals = extends_().length;
    await delay(500); // More than two renewal intervals.
    assert.equal(extends_().length, renewals, "release stops the renewal");
    await c.release();
  });
});

Deno.test("LockClient autoExtend fires lock.signal before the lease ends when it cannot renew", async () => {
  await withServer({}, async (f) => {
    const proxy = TcpProxy.start(f.server.port);
    f.defer(() => proxy.close());
    const client = f.client(proxy.address, { autoExtend: true });
    const other = f.client();
    const lock = await client.acquire("auto:cutoff", { lease: 1.2 });
    await proxy.until(
      () => proxy.connections.some((c) => c.sent.some((l) => l.startsWith("X auto:cutoff "))),
      "a first renewal",
    );
    const downAt = performance.now();
    await proxy.down(); // Renewals cannot reach the server any more.
    await abortedWithin(lock.signal, 2000);
    assert.ok(since(downAt) <= 1250, `fired ${since(downAt)} ms after the last renewal`);
    assert.ok(lock.signal.reason instanceof LockLostError);
    // It fired first: the server still held the lock at that moment.
    await assertHeld(other, "auto:cutoff", "signal fired only after the server let go");
    const next = await other.acquire("auto:cutoff", { lease: 5, wait: 3 });
    await next.release();
    proxy.up();
    await lock.release(); // Gone either way: resolves.
  });
});

Deno.test("LockClient abort rejects at once and leaks no lock", async (t) => {
  await withServer({}, async (f) => {
    const holderClient = f.client();
    const client = f.client();
    const other = f.client();
    await assertFree(client, "abort:warmup");

    await t.step("acquire() does reject at once when aborted while queued", async () => {
      const holder = await holderClient.acquire("abort:queued", { lease: 30 });
      const controller = new AbortController();
      const waiting = client.acquire("abort:queued", { signal: controller.signal });
      const outcome = waiting.then(() => assert.fail("granted"), (e) => e);
      await delay(100); // Queued on the server by now.
      const reason = new Error("gave up");
      const start = performance.now();
      controller.abort(reason);
      const error = await outcome;
      assert.ok(since(start) < 50, `rejected ${since(start)} ms after the abort`);
      assert.ok(error instanceof LockAbortedError, String(error));
      assert.ok(error instanceof LockError);
      assert.equal(error.cause, reason);
      // The holder releases: the late grant to the aborted request is released at once.
      await holder.release();
      const startNext = performance.now();
      const next = await other.acquire("abort:queued", { lease: 5, wait: 3 });
      assert.ok(since(startNext) < 1000, `got it after ${since(startNext)} ms`);
      await next.release();
    });

    await t.step("acquire() does release a grant that arrives after the abort", async () => {
      const controller = new AbortController();
      const racing = client.acquire("abort:late", { signal: controller.signal });
      controller.abort();
      await assert.rejects(racing, LockAbortedError);
      const next = await other.acquire("abort:late", { lease: 5, wait: 3 });
      await next.release();
    });

    await t.step("acquire() does reject at once with an already aborted signal", async () => {
      const signal = AbortSignal.abort(new Error("already"));
      await assert.rejects(client.acquire("abort:before", { signal }), LockAbortedError);
      await assert.rejects(client.tryAcquire("abort:before", { signal }), LockAbortedError);
      await assertFree(other, "abort:before");
    });
  });
});

Deno.test("LockClient serves clients queued on one key in FIFO order", async () => {
  await withServer({}, async (f) => {
    const holderClient = f.client();
    const clients = Array.from({ length: 5 }, () => f.client());
    await Promise.all(clients.map((c, i) => assertFree(c, `fifo:warmup:${i}`)));
    const holder = await holderClient.acquire("fifo:k", { lease: 30 });
    const order: number[] = [];
    const tokens: bigint[] = [];
    const done: Promise<void>[] = [];
    for (const [i, c] of clients.entries()) {
      done.push(
        c.acquire("fifo:k", { lease: 10 }).then(async (lock) => {
          order.push(i);
          tokens.push(lock.token);
          await lock.release();
        }),
      );
      await delay(30); // Arrive one after another.
    }
    await holder.release();
    await Promise.all(done);
    assert.deepEqual(order, [0, 1, 2, 3, 4]);
    assert.ok(tokens[0] > holder.token);
    for (let i = 1; i < tokens.length; i++) assert.ok(tokens[i] > tokens[i - 1]);
  });
});

Deno.test("LockClient keeps tokens above 2^53 exact", async (t) => {
  for (const seed of [9007199254740993n, 18446744073709550000n]) {
    await t.step(`tokens do stay exact above ${seed}`, async () => {
      const dataDir = await Deno.makeTempDir({ prefix: "lockd-client-test-" });
      await Deno.writeTextFile(`${dataDir}/tokens`, `${seed}\n`);
      await withServer({ dataDir }, async (f) => {
        const client = f.client();
        const other = f.client();
        const tokens: bigint[] = []; // Every grant, in order, from both clients.
        for (let i = 0; i < 4; i++) {
          const lock = await client.acquire(`big:${i}`, { lease: 10 });
          assert.equal(typeof lock.token, "bigint");
          assert.ok(lock.token > seed, `${lock.token} > ${seed}`);
          tokens.push(lock.token);
          // Extend and release carry the exact token: N would mean a rounded one.
          await lock.extend(10);
          assert.equal(lock.signal.aborted, false);
          await lock.release();
          const next = await other.tryAcquire(`big:${i}`, { lease: 10 });
          assert.ok(next !== null, `release of token ${lock.token} freed the key`);
          tokens.push(next.token);
          await next.release();
        }
        for (let i = 1; i < tokens.length; i++) {
          assert.ok(tokens[i] > tokens[i - 1], `${tokens[i]} > ${tokens[i - 1]}`);
        }
        // Doubles above 2^53 are even: an odd token proves it was never a JS number.
        assert.ok(tokens.some((t) => t % 2n === 1n), `no odd token among ${tokens}`);
      });
    });
  }
});

Deno.test("LockClient single address keeps two connections and survives one being cut", async () => {
  await withServer({}, async (f) => {
    const proxy = TcpProxy.start(f.server.port);
    f.defer(() => proxy.close());
    const client = f.client(proxy.address);
    await proxy.until(() => proxy.live.length === 2, "two connections");

    // What goes on the wire: defaults lease 30 and wait 0 (no limit); seconds as decimals.
    const sentLines = () => proxy.connections.flatMap((c) => c.sent);
    const defaults = await client.acquire("wire:defaults");
    await defaults.release();
    const frac = await client.acquire("wire:frac", { lease: 0.25, wait: 1.5 });
    await frac.release();
    const tried = await client.tryAcquire("wire:try", { lease: 10 });
    await tried?.release();
    assert.deepEqual(acquiresOf(sentLines(), "wire:defaults"), ["A wire:defaults 30 0"]);
    assert.deepEqual(acquiresOf(sentLines(), "wire:frac"), ["A wire:frac 0.25 1.5"]);
    const tryLine = acquiresOf(sentLines(), "wire:try");
    assert.equal(tryLine.length, 1);
    const tryWait = Number(tryLine[0].split(" ")[3]);
    assert.ok(tryWait > 0 && tryWait <= 0.1, `tryAcquire must not queue: ${tryLine[0]}`);
    assert.ok(
      sentLines().includes(`R wire:defaults ${defaults.token}`),
      "release carries the exact token",
    );

    // Round-robin: concurrent requests are spread over both connections.
    const locks = await Promise.all(
      Array.from({ length: 6 }, (_, i) => client.acquire(`cut:rr:${i}`, { lease: 10 })),
    );
    await Promise.all(locks.map((l) => l.release()));
    for (const conn of proxy.live) {
      assert.ok(
        conn.sent.filter((l) => l.startsWith("A cut:rr:")).length >= 2,
        `connection ${conn.id} carried ${conn.sent.length} lines: ${conn.sent}`,
      );
    }
    assert.equal(proxy.connections.length, 2, "exactly two connections for one address");

    // Cut one: requests keep succeeding, and the cut one comes back in the background.
    const cut = proxy.live[0];
    const cutAt = performance.now();
    cut.cut();
    let requests = 0;
    while (proxy.live.length < 2 && since(cutAt) < 5000) {
      const lock = await client.acquire(`cut:during:${requests % 3}`, { lease: 10, wait: 2 });
      await lock.extend(10);
      await lock.release();
      requests++;
      await delay(25);
    }
    const back = since(cutAt);
    assert.equal(proxy.live.length, 2, `not reconnected ${back} ms after the cut`);
    assert.ok(back <= 4000, `reconnected after ${back} ms (should be about 3000)`);
    assert.ok(requests >= 10, `only ${requests} requests while one connection was down`);
    assert.equal(proxy.connections.length, 3, "one new connection replaced the cut one");

    // Both connections carry traffic again.
    const again = await Promise.all(
      Array.from({ length: 4 }, (_, i) => client.acquire(`cut:after:${i}`, { lease: 10 })),
    );
    await Promise.all(again.map((l) => l.release()));
    for (const conn of proxy.live) {
      assert.ok(conn.sent.some((l) => l.startsWith("A cut:after:")), `connection ${conn.id} idle`);
    }
  });
});

Deno.test("LockClient acquire survives its connection dropping", async (t) => {
  await withServer({}, async (f) => {
    const proxy = TcpProxy.start(f.server.port);
    f.defer(() => proxy.close());
    const holderClient = f.client();
    const client = f.client(proxy.address);
    await proxy.until(() => proxy.live.length === 2, "two connections");

    await t.step("a queued acquire does move to the other connection and is granted", async () => {
      const holder = await holderClient.acquire("drop:k", { lease: 30 });
      const waiting = watch(client.acquire("drop:k", { lease: 10 }));
      const carrier = () => proxy.live.find((c) => acquiresOf(c.sent, "drop:k").length > 0);
      await proxy.until(() => carrier() !== undefined, "the acquire to pass the proxy");
      const first = carrier()!;
      await delay(50); // Queued on the server.
      first.cut();
      await proxy.until(
        () => proxy.live.some((c) => c !== first && acquiresOf(c.sent, "drop:k").length > 0),
        "the acquire to be resent on the other connection",
        2000,
      );
      await delay(50);
      assert.equal(waiting.settled(), false, "still waiting behind the holder");
      const start = performance.now();
      await holder.release();
      const lock = await waiting.promise;
      assert.ok(since(start) < 1000, `granted ${since(start)} ms after the release`);
      assert.ok(lock.token > holder.token);
      await lock.release();
      await assertFree(holderClient, "drop:k");
    });

    await t.step("a queued acquire does move again when its new connection drops too", async () => {
      // Reconnect quickly so that the first cut connection is back before the second cut.
      const firstId = proxy.connections.length;
      const quick = f.client(proxy.address, { reconnectIntervalMs: 300 });
      const mine = () => proxy.live.filter((c) => c.id >= firstId);
      await proxy.until(() => mine().length === 2, "two connections of the new client");
      const holder = await holderClient.acquire("drop:twice", { lease: 30 });
      const waiting = watch(quick.acquire("drop:twice", { lease: 10 }));
      const carrier = () => mine().find((c) => acquiresOf(c.sent, "drop:twice").length > 0);
      await proxy.until(() => carrier() !== undefined, "the acquire to pass the proxy");
      await delay(50);
      const first = carrier()!;
      first.cut();
      await proxy.until(
        () => carrier() !== undefined,
        "the acquire to be resent on the other connection",
        2000,
      );
      await proxy.until(() => mine().length === 2, "the cut connection to come back", 3000);
      await delay(50);
      const second = carrier()!;
      second.cut(); // The other connection is up: the acquire must move there.
      await proxy.until(
        () => carrier() !== undefined || waiting.settled(),
        "the acquire to be resent a second time or to fail",
        2000,
      );
      await delay(50);
      await holder.release();
      const outcome = await waiting.promise.then((lock) => lock, (e) => e);
      assert.ok(
        !(outcome instanceof Error),
        `the acquire failed although a connection was up: ${outcome}`,
      );
      assert.ok(outcome.token > holder.token);
      await outcome.release();
    });

    await t.step(
      "acquire() does reject with LockUnavailableError when every connection is gone",
      async () => {
        const holder = await holderClient.acquire("drop:all", { lease: 30 });
        const waiting = client.acquire("drop:all", { lease: 10 }).catch((e) => e);
        await proxy.until(
          () => proxy.live.some((c) => acquiresOf(c.sent, "drop:all").length > 0),
          "the acquire to pass the proxy",
        );
        await delay(50);
        const start = performance.now();
        await proxy.down(); // Cut both, and refuse new connections.
        const error = await waiting;
        assert.ok(error instanceof LockUnavailableError, String(error));
        assert.ok(since(start) < 2000, `rejected after ${since(start)} ms`);
        await holder.release();

        // When the node is reachable again, the client works again.
        proxy.up();
        const lock = await client.acquire("drop:all", { lease: 10, wait: 2 });
        await lock.release();
      },
    );
  });
});

Deno.test("LockClient release retried until the server is back within 5 s", async () => {
  const dataDir = await Deno.makeTempDir({ prefix: "lockd-client-test-" });
  const first = await startServer({ dataDir });
  let second: ServerProcess | undefined;
  const client = new LockClient(first.address);
  try {
    const lock = await client.acquire("retry:k", { lease: 30 });
    assert.equal(await first.stop("SIGTERM"), 0, first.stderr());
    const releasedAt = performance.now();
    const release = watch(lock.release());
    await delay(1200); // The node is down for a while: the release keeps trying.
    assert.equal(release.settled(), false, "release gave up while the node was down");
    second = await startServer({ listen: `127.0.0.1:${first.port}`, dataDir });
    await release.promise; // `N` from the restarted node is fine: the lock is gone either way.
    assert.ok(since(releasedAt) < 5000, `release took ${since(releasedAt)} ms`);
    // The client works against the restarted node, and tokens kept growing.
    const next = await client.acquire("retry:k", { lease: 10, wait: 2 });
    assert.ok(next.token > lock.token);
    await next.release();
  } finally {
    await client.close();
    await first.stop();
    await second?.stop();
    await Deno.remove(dataDir, { recursive: true }).catch(() => {});
  }
  await assertNoUnhandledRejections();
});

Deno.test("LockClient close() releases, rejects what is pending and leaves nothing behind", async (t) => {
  await withServer({}, async (f) => {
    const other = f.client();

    await t.step("close() does release held locks and reject queued acquires", async () => {
      const client = new LockClient(f.server.address);
      const held = await client.acquire("close:held", { lease: 30 });
      const auto = await client.acquire("close:auto", { lease: 0.6, autoExtend: true });
      const holder = await other.acquire("close:queued", { lease: 30 });
      const queued = client.acquire("close:queued", { lease: 30 }).catch((e) => e);
      await delay(50);
      await client.close();
      const error = await queued;
      assert.ok(error instanceof LockError, String(error));
      await client.close(); // Again: fine.
      await assertFree(other, "close:held", "close() released a held lock");
      await assertFree(other, "close:auto", "close() released an auto-extended lock");
      assert.equal(held.signal.aborted, false);
      assert.equal(auto.signal.aborted, false);
      await delay(100); // Let the server see the closed connection before the release.
      await holder.release();
      await assertFree(other, "close:queued", "the closed client's queued acquire was dropped");
      await assert.rejects(client.acquire("close:after"), LockError);
    });

    await t.step("await using does close the client at the end of the block", async () => {
      {
        await using client = new LockClient(f.server.address);
        await client.acquire("close:using", { lease: 30, autoExtend: true });
        await assertHeld(other, "close:using");
      }
      await assertFree(other, "close:using");
    });

    await t.step("close() does return promptly with nothing to do", async () => {
      const client = new LockClient(f.server.address);
      const start = performance.now();
      await client.close();
      assert.ok(since(start) < 500, `close took ${since(start)} ms`);
      const unused = new LockClient(`127.0.0.1:${freePort()}`);
      await unused.close();
    });
  });
});
