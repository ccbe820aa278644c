/**
 * Tests of `LockClient` (issue 3, docs/protocol.md and docs/client.md) against the real server:
 * a `server/main.ts` process on a free port. Acquire, extend and release, typed errors, FIFO
 * order and tokens above 2^53. Leases and signals: client_lease_test.ts; dropped connections
 * and close(): client_drop_test.ts. Only the public API of `mod.ts` is used.
 */

import assert from "node:assert/strict";
import { LineClient, startServer } from "./_helpers.ts";
import { setTimeout as delay } from "node:timers/promises";
import {
  type Lock,
  LockClient,
  LockError,
  LockLostError,
  LockRejectedError,
  LockTimeoutError,
  LockUnavailableError,
} from "../mod.ts";
import { assertFree, assertHeld, freePort, since, watch, withFixture } from "./_client_fixture.ts";

Deno.test("LockClient acquires, extends and releases locks on a real server", async (t) => {
  await withFixture({}, async (f) => {
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
  await withFixture({ args: ["--max-lease", "60"] }, async (f) => {
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

Deno.test("LockClient serves clients queued on one key in FIFO order", async () => {
  await withFixture({}, async (f) => {
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
      await withFixture({ dataDir }, async (f) => {
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
