/**
 * Unit tests of the lock table's deadlines (docs/protocol.md, "Semantics"), with a fake clock:
 * extend(), extend() and release() with a wrong token or after the grant ended, what happens
 * at the very instant a lease or a wait limit runs out, advance() after a late timer, and
 * nextDeadline() serving every lock with one timer. Harness: tests/_lock_table.ts.
 * Granting, handover, wait limits and cancel(): lock_table_test.ts; hooks, restore(),
 * forget(), holders(), clear(), tokens and the clock: lock_table_state_test.ts.
 *
 * @module
 */

import assert from "node:assert/strict";
import { grab, harness, queue } from "./_lock_table.ts";

Deno.test("extend() resets the lease to leaseMs from now", () => {
  const h = harness();
  const a = grab(h, "k", 100, "a");
  h.take();
  h.at(90);
  assert.equal(h.table.extend("k", a, 100), true);
  assert.deepEqual(h.take(), ["held k 1 190"]);
  assert.equal(h.table.holder("k")?.deadline, 190);
  assert.equal(h.table.nextDeadline(), 190);
  h.at(150);
  h.table.advance();
  assert.deepEqual(h.take(), []);
  // A shorter extend moves the deadline earlier.
  assert.equal(h.table.extend("k", a, 10), true);
  assert.deepEqual(h.take(), ["held k 1 160"]);
  h.at(160);
  h.table.advance();
  assert.deepEqual(h.take(), ["freed k 1"]);
});

Deno.test("extend() returns false and changes nothing for a wrong token or an ended grant", async (t) => {
  await t.step("wrong token", () => {
    const h = harness();
    const a = grab(h, "k", 100, "a");
    h.take();
    assert.equal(h.table.extend("k", a + 1n, 1000), false);
    assert.equal(h.table.extend("k", 0n, 1000), false);
    assert.equal(h.table.extend("other", a, 1000), false);
    assert.deepEqual(h.take(), []);
    assert.equal(h.table.holder("k")?.deadline, 100);
  });
  await t.step("expired lease", () => {
    const h = harness();
    const a = grab(h, "k", 100, "a");
    h.at(150);
    assert.equal(h.table.extend("k", a, 1000), false);
    assert.equal(h.table.held, 0);
  });
  await t.step("expired lease handed to a waiter", () => {
    const h = harness();
    const a = grab(h, "k", 100, "a");
    queue(h, "k", 100, 0, "b");
    h.at(150);
    assert.equal(h.table.extend("k", a, 1000), false);
    assert.deepEqual(h.table.holder("k"), { key: "k", token: 2n, deadline: 250, owner: 0 });
  });
  await t.step("released", () => {
    const h = harness();
    const a = grab(h, "k", 100, "a");
    h.table.release("k", a);
    assert.equal(h.table.extend("k", a, 1000), false);
    assert.equal(h.table.held, 0);
  });
});

Deno.test("release() with a wrong token returns false and changes nothing", () => {
  const h = harness();
  const a = grab(h, "k", 100, "a");
  queue(h, "k", 100, 50, "b");
  h.take();
  const before = [...h.table.holders()];
  for (const [key, token] of [["k", a + 1n], ["k", 0n], ["k", 2n ** 64n - 1n], ["nope", a]]) {
    assert.equal(h.table.release(key as string, token as bigint), false);
  }
  assert.deepEqual(h.take(), []);
  assert.deepEqual([...h.table.holders()], before);
  assert.equal(h.table.waiting, 1);
  assert.equal(h.table.nextDeadline(), 50);
});

Deno.test("release() at the instant a waiter's wait runs out answers it T, not the lock", async (t) => {
  await t.step("alone in the queue: the key is freed", () => {
    const h = harness();
    const a = grab(h, "k", 1000, "a");
    queue(h, "k", 100, 100, "b");
    h.take();
    h.at(100);
    assert.equal(h.table.release("k", a), true);
    assert.deepEqual(h.take(), ["timedOut b k", "freed k 1"]);
  });
  await t.step("the next waiter in line gets the lock", () => {
    const h = harness();
    const a = grab(h, "k", 1000, "a");
    queue(h, "k", 100, 100, "b");
    queue(h, "k", 100, 0, "c");
    h.take();
    h.at(100);
    assert.equal(h.table.release("k", a), true);
    assert.deepEqual(h.take(), ["timedOut b k", "held k 2 200", "granted c k 2"]);
  });
});

Deno.test("extend() and release() at the instant the lease runs out return false", async (t) => {
  await t.step("extend", () => {
    const h = harness();
    const a = grab(h, "k", 100, "a");
    h.take();
    h.at(100);
    assert.equal(h.table.extend("k", a, 1000), false);
    assert.deepEqual(h.take(), ["freed k 1"]);
  });
  await t.step("extend, with a waiter", () => {
    const h = harness();
    const a = grab(h, "k", 100, "a");
    queue(h, "k", 100, 0, "b");
    h.take();
    h.at(100);
    assert.equal(h.table.extend("k", a, 1000), false);
    assert.deepEqual(h.take(), ["held k 2 200", "granted b k 2"]);
  });
  await t.step("release", () => {
    const h = harness();
    const a = grab(h, "k", 100, "a");
    h.take();
    h.at(100);
    assert.equal(h.table.release("k", a), false);
    assert.deepEqual(h.take(), ["freed k 1"]);
  });
});

// The waiter's wait limit has run out at `now >= deadline` (module doc of lock_table.ts), and
// a release at that instant answers the waiter T first. A lease that runs out at the same
// instant must not grant it either. The outcome must not depend on which of the two
// deadlines happened to be scheduled first.
Deno.test("advance() answers T when a lease and the wait limit run out at the same instant", async (t) => {
  await t.step("lease scheduled before the wait limit", () => {
    const h = harness();
    grab(h, "k", 100, "a"); // lease deadline 100
    queue(h, "k", 100, 100, "b"); // wait deadline 100
    h.take();
    h.at(100);
    h.table.advance();
    assert.deepEqual(h.take(), ["timedOut b k", "freed k 1"]);
  });
  await t.step("lease rescheduled to the same deadline after the waiter queued", () => {
    const h = harness();
    const a = grab(h, "k", 100, "a");
    queue(h, "k", 100, 100, "b"); // wait deadline 100
    h.at(50);
    assert.equal(h.table.extend("k", a, 50), true); // lease deadline still 100
    h.take();
    h.at(100);
    h.table.advance();
    assert.deepEqual(h.take(), ["timedOut b k", "freed k 1"]);
  });
  await t.step("both overdue, settled by a late timer", () => {
    const h = harness();
    grab(h, "k", 100, "a");
    queue(h, "k", 100, 100, "b");
    queue(h, "k", 100, 0, "c");
    h.take();
    h.at(400);
    h.table.advance();
    assert.deepEqual(h.take(), ["timedOut b k", "held k 2 500", "granted c k 2"]);
  });
});

Deno.test("advance() after a late timer settles everything in deadline order", () => {
  const h = harness();
  grab(h, "k1", 100, "a"); // token 1, lease until 100
  queue(h, "k1", 30, 150, "b"); // granted at 100, before its limit at 150
  queue(h, "k1", 40, 0, "c");
  grab(h, "k2", 120, "d"); // token 2, lease until 120
  queue(h, "k2", 10, 110, "e"); // limit at 110: T before d's lease runs out
  grab(h, "k3", 300, "f"); // token 3
  grab(h, "k4", 5000, "g"); // token 4, not due
  h.take();
  h.at(1000); // far past several deadlines
  h.table.advance();
  assert.deepEqual(h.take(), [
    "held k1 5 1030",
    "granted b k1 5",
    "timedOut e k2",
    "freed k2 2",
    "freed k3 3",
  ]);
  assert.equal(h.table.nextDeadline(), 1030);
  assert.deepEqual(
    [...h.table.holders()].sort((x, y) => x.key.localeCompare(y.key)),
    [
      { key: "k1", token: 5n, deadline: 1030, owner: 0 },
      { key: "k4", token: 4n, deadline: 5000, owner: 0 },
    ],
  );
  h.at(2000);
  h.table.advance();
  assert.deepEqual(h.take(), ["held k1 6 2040", "granted c k1 6"]);
});

Deno.test("advance() is idempotent", () => {
  const h = harness();
  grab(h, "k", 100, "a");
  queue(h, "k", 100, 0, "b");
  queue(h, "k", 100, 150, "c");
  grab(h, "j", 100, "d");
  h.take();
  h.at(150);
  h.table.advance();
  const first = h.take();
  assert.deepEqual(first, ["held k 3 250", "granted b k 3", "freed j 2", "timedOut c k"]);
  const snapshot = [...h.table.holders()];
  const next = h.table.nextDeadline();
  for (let i = 0; i < 5; i++) h.table.advance();
  assert.deepEqual(h.take(), []);
  assert.deepEqual([...h.table.holders()], snapshot);
  assert.equal(h.table.nextDeadline(), next);
  assert.equal(h.table.waiting, 0);
});

Deno.test("nextDeadline() returns the earliest pending deadline, so one timer serves every lock", async (t) => {
  await t.step("follows leases, wait limits, extends, cancels and releases", () => {
    const h = harness();
    assert.equal(h.table.nextDeadline(), undefined);
    const a = grab(h, "k", 500, "a");
    assert.equal(h.table.nextDeadline(), 500);
    const b = queue(h, "k", 100, 300, "b");
    assert.equal(h.table.nextDeadline(), 300);
    h.table.cancel(b);
    assert.equal(h.table.nextDeadline(), 500);
    grab(h, "j", 200, "c");
    assert.equal(h.table.nextDeadline(), 200);
    h.table.extend("j", 2n, 1000);
    assert.equal(h.table.nextDeadline(), 500);
    h.table.release("k", a);
    assert.equal(h.table.nextDeadline(), 1000);
    h.table.release("j", 2n);
    assert.equal(h.table.nextDeadline(), undefined);
  });
  await t.step("thousands of locks and waiters, without setTimeout or setInterval", () => {
    const saved = { setTimeout, setInterval };
    const refuse = () => {
      throw new Error("the lock table must not arm timers");
    };
    globalThis.setTimeout = refuse as unknown as typeof setTimeout;
    globalThis.setInterval = refuse as unknown as typeof setInterval;
    try {
      const h = harness({ hooks: "required" });
      let earliest = Infinity;
      for (let i = 0; i < 3000; i++) {
        const lease = 1000 + ((i * 7919) % 5000);
        earliest = Math.min(earliest, lease);
        grab(h, `key${i}`, lease);
        queue(h, `key${i}`, 100, 0, `w${i}`);
      }
      assert.equal(h.table.held, 3000);
      assert.equal(h.table.waiting, 3000);
      assert.equal(h.table.nextDeadline(), earliest);
      h.at(earliest);
      h.table.advance();
      assert.equal(h.log.filter((l) => l.startsWith("granted")).length, 1);
      // Every lease expires: every other waiter is granted, with a lease from 1e9, and the
      // key granted at `earliest` is freed.
      h.at(1e9);
      h.table.advance();
      assert.equal(h.table.waiting, 0);
      assert.equal(h.table.held, 2999);
      assert.equal(h.table.nextDeadline(), 1e9 + 100);
      h.at(2e9);
      h.table.advance();
      assert.equal(h.table.held, 0);
      assert.equal(h.table.nextDeadline(), undefined);
    } finally {
      globalThis.setTimeout = saved.setTimeout;
      globalThis.setInterval = saved.setInterval;
    }
  });
});
