/**
 * `LockClient` against the real server when connections drop (docs/client.md, "Connections"
 * and "Retries"): through a TCP proxy that cuts them, a server that restarts, and close().
 * Only the public API of `mod.ts` is used.
 */

import assert from "node:assert/strict";
import { type ServerProcess, startServer } from "./_helpers.ts";
import { assertNoUnhandledRejections } from "./_unhandled.ts";
import { setTimeout as delay } from "node:timers/promises";
import { LockClient, LockError, LockUnavailableError } from "../mod.ts";
import { TcpProxy } from "./_proxy.ts";
import {
  acquiresOf,
  assertFree,
  assertHeld,
  freePort,
  since,
  watch,
  withFixture,
} from "./_client_fixture.ts";

Deno.test("LockClient single address keeps two connections and survives one being cut", async () => {
  await withFixture({}, async (f) => {
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
  await withFixture({}, async (f) => {
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
  await withFixture({}, async (f) => {
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
