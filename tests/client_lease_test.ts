/**
 * `LockClient` leases against the real server (docs/client.md, "Held locks"): `lock.signal`
 * when the lease runs out, auto-extension, and an abort that leaks no lock. Only the public
 * API of `mod.ts` is used.
 */

import assert from "node:assert/strict";
import { startServer } from "./_helpers.ts";
import { setTimeout as delay } from "node:timers/promises";
import { LockAbortedError, LockClient, LockError, LockLostError } from "../mod.ts";
import { TcpProxy } from "./_proxy.ts";
import { abortedWithin, assertFree, assertHeld, since, withFixture } from "./_client_fixture.ts";

Deno.test("Lock.signal fires when the lease runs out, not on release", async (t) => {
  await withFixture({}, async (f) => {
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
  await withFixture({}, async (f) => {
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
  await withFixture({}, async (f) => {
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
  await withFixture({}, async (f) => {
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
  await withFixture({}, async (f) => {
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
