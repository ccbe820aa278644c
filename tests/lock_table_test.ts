/**
 * Unit tests of the lock rules (docs/protocol.md, "Semantics") on the pure lock table, with a
 * fake clock and a counter for fencing tokens: granting a free key, queueing and FIFO
 * handover on release() and lease expiry, wait limits answered T, and cancel(). Every hook
 * call is logged as a line so that whole outcomes can be compared at once (tests/_lock_table.ts).
 * extend(), wrong tokens, deadlines at the same instant and nextDeadline():
 * lock_table_deadlines_test.ts; hooks, restore(), forget(), holders(), clear(), tokens and
 * the clock: lock_table_state_test.ts.
 *
 * @module
 */

import assert from "node:assert/strict";
import { grab, harness, queue } from "./_lock_table.ts";

Deno.test("acquire() grants a free key at once whatever the wait", async (t) => {
  for (const wait of [0, 1, 0.001, 5_000, Infinity]) {
    await t.step(`wait ${wait}`, () => {
      const h = harness();
      h.at(1000);
      const token = h.table.acquire("k", 30_000, wait, "a");
      assert.equal(token, 1n);
      assert.deepEqual(h.take(), ["held k 1 31000"]);
      assert.deepEqual(h.table.holder("k"), { key: "k", token: 1n, deadline: 31_000, owner: 0 });
      assert.equal(h.table.held, 1);
      assert.equal(h.table.waiting, 0);
    });
  }
});

Deno.test("acquire() of a held key queues and release() hands over in FIFO order", () => {
  const h = harness();
  const a = grab(h, "k", 100, "a");
  const waiters = ["b", "c", "d"].map((who) => queue(h, "k", 100, 0, who));
  assert.equal(h.table.waiting, 3);
  assert.deepEqual(waiters.map((w) => w.ticket), ["b", "c", "d"]);
  h.take();

  h.at(10);
  assert.equal(h.table.release("k", a), true);
  assert.deepEqual(h.take(), ["held k 2 110", "granted b k 2"]);
  h.at(20);
  assert.equal(h.table.release("k", 2n), true);
  assert.deepEqual(h.take(), ["held k 3 120", "granted c k 3"]);
  h.at(30);
  assert.equal(h.table.release("k", 3n), true);
  assert.deepEqual(h.take(), ["held k 4 130", "granted d k 4"]);
  assert.equal(h.table.waiting, 0);
  assert.equal(h.table.release("k", 4n), true);
  assert.deepEqual(h.take(), ["freed k 4"]);
  assert.equal(h.table.held, 0);
});

Deno.test("release() hands over with a fresh token strictly greater than every earlier one", () => {
  const h = harness();
  const other = grab(h, "other", 1000);
  const a = grab(h, "k", 1000, "a");
  queue(h, "k", 1000, 0, "b");
  const later = grab(h, "third", 1000);
  h.take();
  assert.equal(h.table.release("k", a), true);
  const [, granted] = h.take();
  const token = BigInt(granted.split(" ")[3]);
  assert.ok(token > a && token > other && token > later, `${token} must exceed all`);
  assert.equal(h.table.holder("k")?.token, token);
  // The old token is dead: it can neither release nor extend.
  assert.equal(h.table.release("k", a), false);
  assert.equal(h.table.extend("k", a, 1000), false);
});

Deno.test("release() of the last holder frees the key", () => {
  const h = harness();
  const a = grab(h, "k", 100, "a");
  h.take();
  assert.equal(h.table.release("k", a), true);
  assert.deepEqual(h.take(), ["freed k 1"]);
  assert.equal(h.table.holder("k"), undefined);
  assert.equal(h.table.held, 0);
  assert.equal(h.table.nextDeadline(), undefined);
  assert.equal(grab(h, "k", 100, "b"), 2n);
});

Deno.test("advance() passes an expired lease to the next waiter, its lease counted from then", () => {
  const h = harness();
  grab(h, "k", 100, "a");
  queue(h, "k", 50, 0, "b");
  h.take();
  h.at(99);
  h.table.advance();
  assert.deepEqual(h.take(), []);
  // The timer fires late, at 130: b's lease of 50 starts at 130.
  h.at(130);
  h.table.advance();
  assert.deepEqual(h.take(), ["held k 2 180", "granted b k 2"]);
  assert.deepEqual(h.table.holder("k"), { key: "k", token: 2n, deadline: 180, owner: 0 });
  h.at(179);
  h.table.advance();
  assert.deepEqual(h.take(), []);
  h.at(180);
  h.table.advance();
  assert.deepEqual(h.take(), ["freed k 2"]);
});

Deno.test("advance() frees the key when an expired lease has no waiter", () => {
  const h = harness();
  const a = grab(h, "k", 100, "a");
  h.take();
  h.at(100);
  h.table.advance();
  assert.deepEqual(h.take(), ["freed k 1"]);
  assert.equal(h.table.held, 0);
  assert.equal(h.table.release("k", a), false);
  assert.equal(h.table.extend("k", a, 100), false);
  assert.deepEqual(h.take(), []);
});

Deno.test("acquire() settles an overdue lease before deciding", () => {
  const h = harness();
  grab(h, "k", 100, "a");
  h.take();
  h.at(500); // nobody called advance() at 100
  assert.equal(h.table.acquire("k", 100, 1, "b"), 2n);
  assert.deepEqual(h.take(), ["freed k 1", "held k 2 600"]);
});

Deno.test("acquire() with a wait limit is answered T exactly once and never granted", () => {
  const h = harness();
  const a = grab(h, "k", 1000, "a");
  const b = queue(h, "k", 100, 50, "b");
  h.take();
  h.at(49.999);
  h.table.advance();
  assert.deepEqual(h.take(), []);
  h.at(50);
  h.table.advance();
  assert.deepEqual(h.take(), ["timedOut b k"]);
  assert.equal(h.table.waiting, 0);
  h.table.advance();
  h.at(60);
  h.table.advance();
  h.table.cancel(b); // too late to matter: no hook, no change
  assert.equal(h.table.release("k", a), true);
  assert.deepEqual(h.take(), ["freed k 1"]);
  h.at(5000);
  h.table.advance();
  assert.deepEqual(h.take(), []);
  assert.equal(h.table.held, 0);
});

Deno.test("acquire() behind a timed-out waiter is granted in its place", () => {
  const h = harness();
  const a = grab(h, "k", 1000, "a");
  queue(h, "k", 100, 50, "b");
  queue(h, "k", 100, 0, "c");
  queue(h, "k", 100, 20, "d");
  h.take();
  h.at(60);
  h.table.advance();
  assert.deepEqual(h.take(), ["timedOut d k", "timedOut b k"]);
  assert.equal(h.table.release("k", a), true);
  assert.deepEqual(h.take(), ["held k 2 160", "granted c k 2"]);
});

Deno.test("acquire() with wait 0 queues without a limit", () => {
  const h = harness();
  const a = grab(h, "k", 1e9, "a");
  queue(h, "k", 100, 0, "b");
  h.take();
  assert.equal(h.table.nextDeadline(), 1e9); // only the lease
  h.at(1e9 - 1);
  h.table.advance();
  assert.deepEqual(h.take(), []);
  assert.equal(h.table.waiting, 1);
  assert.equal(h.table.release("k", a), true);
  assert.deepEqual(h.take(), [`held k 2 ${1e9 - 1 + 100}`, "granted b k 2"]);
});

Deno.test("cancel() drops a waiter so that it is never granted and the next one gets it", async (t) => {
  await t.step("the head of the queue", () => {
    const h = harness();
    const a = grab(h, "k", 100, "a");
    const b = queue(h, "k", 100, 0, "b");
    queue(h, "k", 100, 0, "c");
    h.take();
    h.table.cancel(b);
    assert.deepEqual(h.take(), []); // no hook for a cancel
    assert.equal(h.table.waiting, 1);
    assert.equal(h.table.release("k", a), true);
    assert.deepEqual(h.take(), ["held k 2 100", "granted c k 2"]);
  });
  await t.step("the middle and the tail of the queue", () => {
    const h = harness();
    const a = grab(h, "k", 100, "a");
    queue(h, "k", 100, 0, "b");
    const c = queue(h, "k", 100, 0, "c");
    queue(h, "k", 100, 0, "d");
    const e = queue(h, "k", 100, 0, "e");
    h.table.cancel(c);
    h.table.cancel(e);
    assert.equal(h.table.waiting, 2);
    h.take();
    assert.equal(h.table.release("k", a), true);
    assert.equal(h.table.release("k", 2n), true);
    assert.equal(h.table.release("k", 3n), true);
    assert.deepEqual(h.take(), [
      "held k 2 100",
      "granted b k 2",
      "held k 3 100",
      "granted d k 3",
      "freed k 3",
    ]);
    // A waiter queued after cancels still lands at the tail.
    grab(h, "k", 100, "f");
    queue(h, "k", 100, 0, "g");
    assert.equal(h.table.waiting, 1);
  });
  await t.step("the only waiter: the key is freed on release", () => {
    const h = harness();
    const a = grab(h, "k", 100, "a");
    const b = queue(h, "k", 100, 0, "b");
    h.table.cancel(b);
    h.take();
    assert.equal(h.table.release("k", a), true);
    assert.deepEqual(h.take(), ["freed k 1"]);
  });
  await t.step("its wait limit goes away with it", () => {
    const h = harness();
    grab(h, "k", 1000, "a");
    const b = queue(h, "k", 100, 50, "b");
    assert.equal(h.table.nextDeadline(), 50);
    h.table.cancel(b);
    assert.equal(h.table.nextDeadline(), 1000);
    h.take();
    h.at(60);
    h.table.advance();
    assert.deepEqual(h.take(), []);
  });
  await t.step("a cancelled waiter is not granted at lease expiry either", () => {
    const h = harness();
    grab(h, "k", 100, "a");
    const b = queue(h, "k", 100, 0, "b");
    queue(h, "k", 100, 0, "c");
    h.table.cancel(b);
    h.take();
    h.at(100);
    h.table.advance();
    assert.deepEqual(h.take(), ["held k 2 200", "granted c k 2"]);
  });
  await t.step("cancel() twice, or after the grant, does nothing", () => {
    const h = harness();
    const a = grab(h, "k", 100, "a");
    const b = queue(h, "k", 100, 0, "b");
    const c = queue(h, "k", 100, 0, "c");
    h.table.release("k", a);
    h.table.cancel(b); // already granted: b keeps the lock, c stays queued
    h.table.cancel(c);
    h.table.cancel(c);
    assert.equal(h.table.holder("k")?.token, 2n);
    assert.equal(h.table.waiting, 0);
    h.take();
    assert.equal(h.table.release("k", 2n), true);
    assert.deepEqual(h.take(), ["freed k 2"]);
  });
});
