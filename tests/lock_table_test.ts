/**
 * Unit tests of the lock rules (docs/protocol.md, "Semantics") on the pure lock table, with a fake clock and a
 * counter for fencing tokens. Every hook call is logged as a line so that whole outcomes
 * can be compared at once.
 *
 * @module
 */

import assert from "node:assert/strict";
import { LockTable, type LockTableHooks, Waiter } from "../server/engine/lock_table.ts";

/** A table on a fake clock, with a log of every hook call. */
interface Harness {
  table: LockTable<string>;
  /** Hook calls, e.g. `granted b k 2`, `timedOut c k`, `held k 2 1100`, `freed k 1`. */
  log: string[];
  /** Sets the fake clock (ms). */
  at(ms: number): void;
  /** Returns the log lines since the last call and forgets them. */
  take(): string[];
  /** When true, nextToken throws (token exhaustion). */
  exhausted: boolean;
}

function harness(options: { firstToken?: bigint; hooks?: "all" | "required" } = {}): Harness {
  let now = 0;
  let token = (options.firstToken ?? 1n) - 1n;
  const log: string[] = [];
  const h: Harness = {
    table: undefined as unknown as LockTable<string>,
    log,
    at(ms) {
      now = ms;
    },
    take() {
      return log.splice(0, log.length);
    },
    exhausted: false,
  };
  const hooks: LockTableHooks<string> = {
    granted: (who, key, t) => log.push(`granted ${who} ${key} ${t}`),
    timedOut: (who, key) => log.push(`timedOut ${who} ${key}`),
  };
  if (options.hooks !== "required") {
    hooks.held = (key, t, deadline) => log.push(`held ${key} ${t} ${deadline}`);
    hooks.freed = (key, t) => log.push(`freed ${key} ${t}`);
  }
  h.table = new LockTable<string>({
    clock: () => now,
    nextToken: () => {
      if (h.exhausted) throw new Error("Fencing tokens are exhausted");
      return ++token;
    },
    hooks,
  });
  return h;
}

/** Acquire that must be granted at once. */
function grab(h: Harness, key: string, leaseMs: number, who = "x"): bigint {
  const result = h.table.acquire(key, leaseMs, 0, who);
  assert.equal(typeof result, "bigint", `${who} should get ${key} at once`);
  return result as bigint;
}

/** Acquire that must queue. */
function queue(h: Harness, key: string, leaseMs: number, waitMs: number, who: string) {
  const result = h.table.acquire(key, leaseMs, waitMs, who);
  assert.ok(result instanceof Waiter, `${who} should queue for ${key}`);
  return result as Waiter<string>;
}

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

Deno.test("held and freed hooks fire for grant, extend, release and expiry", () => {
  const h = harness();
  const a = grab(h, "k", 100, "a");
  assert.deepEqual(h.take(), ["held k 1 100"]);
  h.at(10);
  h.table.extend("k", a, 100);
  assert.deepEqual(h.take(), ["held k 1 110"]);
  queue(h, "k", 50, 0, "b");
  assert.deepEqual(h.take(), []);
  h.at(20);
  h.table.release("k", a);
  assert.deepEqual(h.take(), ["held k 2 70", "granted b k 2"]);
  h.at(70);
  h.table.advance();
  assert.deepEqual(h.take(), ["freed k 2"]);
  grab(h, "k", 10, "c");
  assert.deepEqual(h.take(), ["held k 3 80"]);
  h.table.release("k", 3n);
  assert.deepEqual(h.take(), ["freed k 3"]);
  // Failed operations fire nothing.
  h.table.release("k", 3n);
  h.table.extend("k", 3n, 10);
  assert.deepEqual(h.take(), []);
});

Deno.test("LockTable works without the optional held and freed hooks", () => {
  const h = harness({ hooks: "required" });
  const a = grab(h, "k", 100, "a");
  queue(h, "k", 100, 0, "b");
  h.table.extend("k", a, 100);
  h.table.release("k", a);
  h.at(1000);
  h.table.advance();
  assert.equal(h.table.restore("r", 10n, 2000), true);
  assert.equal(h.table.forget("r", 10n), true);
  assert.deepEqual(h.take(), ["granted b k 2"]);
  assert.equal(h.table.held, 0);
});

Deno.test("restore() installs a grant unless a higher token holds the key", async (t) => {
  await t.step("on a free key", () => {
    const h = harness();
    h.at(100);
    assert.equal(h.table.restore("k", 42n, 500), true);
    assert.deepEqual(h.take(), ["held k 42 500"]);
    assert.deepEqual(h.table.holder("k"), { key: "k", token: 42n, deadline: 500, owner: 0 });
    assert.equal(h.table.nextDeadline(), 500);
    // The restored grant behaves like any other.
    assert.equal(h.table.extend("k", 42n, 1000), true);
    assert.equal(h.table.release("k", 42n), true);
    assert.deepEqual(h.take(), ["held k 42 1100", "freed k 42"]);
  });
  await t.step("its lease runs out at its deadline", () => {
    const h = harness();
    h.table.restore("k", 42n, 500);
    h.take();
    h.at(500);
    h.table.advance();
    assert.deepEqual(h.take(), ["freed k 42"]);
  });
  await t.step("a deadline already past is refused", () => {
    const h = harness();
    h.at(100);
    assert.equal(h.table.restore("k", 42n, 100), false);
    assert.equal(h.table.restore("k", 42n, 50), false);
    assert.deepEqual(h.take(), []);
    assert.equal(h.table.held, 0);
  });
  await t.step("a lower token is refused, an equal token updates the deadline", () => {
    const h = harness({ firstToken: 10n });
    const a = grab(h, "k", 100, "a");
    h.take();
    assert.equal(h.table.restore("k", a - 1n, 900), false);
    assert.deepEqual(h.table.holder("k"), { key: "k", token: a, deadline: 100, owner: 0 });
    assert.equal(h.table.restore("k", a, 900), true);
    assert.deepEqual(h.table.holder("k"), { key: "k", token: a, deadline: 900, owner: 0 });
    assert.deepEqual(h.take(), ["held k 10 900"]);
  });
  await t.step("a higher token replaces the holder; waiters stay queued behind it", () => {
    const h = harness();
    const a = grab(h, "k", 100, "a");
    queue(h, "k", 100, 0, "b");
    h.take();
    assert.equal(h.table.restore("k", 50n, 400), true);
    assert.deepEqual(h.take(), ["held k 50 400"]);
    assert.equal(h.table.waiting, 1);
    assert.equal(h.table.release("k", a), false);
    h.at(100); // the old lease's deadline no longer applies
    h.table.advance();
    assert.deepEqual(h.take(), []);
    assert.equal(h.table.release("k", 50n), true);
    // The new token comes from nextToken(); keeping that above restored tokens is the
    // caller's job (token succession), not the table's.
    assert.deepEqual(h.take(), ["held k 2 200", "granted b k 2"]);
  });
});

Deno.test("forget() drops a grant without handing it over", async (t) => {
  await t.step("matching token", () => {
    const h = harness();
    const a = grab(h, "k", 100, "a");
    h.take();
    assert.equal(h.table.forget("k", a), true);
    assert.deepEqual(h.take(), ["freed k 1"]);
    assert.equal(h.table.held, 0);
    assert.equal(h.table.nextDeadline(), undefined);
    assert.equal(h.table.forget("k", a), false);
    assert.equal(grab(h, "k", 100, "b"), 2n);
  });
  await t.step("wrong token or unknown key", () => {
    const h = harness();
    const a = grab(h, "k", 100, "a");
    h.take();
    assert.equal(h.table.forget("k", a + 1n), false);
    assert.equal(h.table.forget("j", a), false);
    assert.deepEqual(h.take(), []);
    assert.equal(h.table.holder("k")?.token, a);
  });
  await t.step("refused while waiters are queued", () => {
    const h = harness();
    const a = grab(h, "k", 100, "a");
    queue(h, "k", 100, 0, "b");
    h.take();
    assert.equal(h.table.forget("k", a), false);
    assert.deepEqual(h.take(), []);
    assert.equal(h.table.holder("k")?.token, a);
    assert.equal(h.table.waiting, 1);
  });
});

Deno.test("holders() lists every current grant after settling what is due", () => {
  const h = harness();
  assert.deepEqual([...h.table.holders()], []);
  grab(h, "a", 100);
  grab(h, "b", 200);
  grab(h, "c", 300);
  queue(h, "a", 500, 0, "w");
  h.at(200);
  const list = [...h.table.holders()].sort((x, y) => x.key.localeCompare(y.key));
  assert.deepEqual(list, [
    { key: "a", token: 4n, deadline: 700, owner: 0 },
    { key: "c", token: 3n, deadline: 300, owner: 0 },
  ]);
});

Deno.test("holder() returns the current grant of a key", () => {
  const h = harness();
  assert.equal(h.table.holder("k"), undefined);
  grab(h, "k", 100);
  assert.deepEqual(h.table.holder("k"), { key: "k", token: 1n, deadline: 100, owner: 0 });
  h.at(100);
  assert.equal(h.table.holder("k"), undefined);
});

Deno.test("clear() drops every grant and waiter without any hook", () => {
  const h = harness();
  const a = grab(h, "k", 100, "a");
  const b = queue(h, "k", 100, 50, "b");
  const c = queue(h, "k", 100, 0, "c");
  grab(h, "j", 100, "d");
  h.take();
  h.table.clear();
  assert.deepEqual(h.take(), []);
  assert.equal(h.table.held, 0);
  assert.equal(h.table.waiting, 0);
  assert.equal(h.table.nextDeadline(), undefined);
  assert.deepEqual([...h.table.holders()], []);
  // Nothing that was dropped comes back.
  h.table.cancel(b);
  h.table.cancel(c);
  assert.equal(h.table.waiting, 0);
  assert.equal(h.table.release("k", a), false);
  h.at(10_000);
  h.table.advance();
  assert.deepEqual(h.take(), []);
  // The table is usable afterwards; tokens keep growing.
  assert.equal(grab(h, "k", 100, "e"), 3n);
  queue(h, "k", 100, 0, "f");
  assert.equal(h.table.release("k", 3n), true);
  assert.deepEqual(h.take(), ["held k 3 10100", "held k 4 10100", "granted f k 4"]);
});

Deno.test("tokens above 2^53 are kept exactly", () => {
  const first = 2n ** 64n - 3n;
  const h = harness({ firstToken: first });
  const a = grab(h, "k", 100, "a");
  assert.equal(a, first);
  queue(h, "k", 100, 0, "b");
  h.take();
  assert.equal(h.table.release("k", a), true);
  assert.deepEqual(h.take(), [`held k ${first + 1n} 100`, `granted b k ${first + 1n}`]);
  assert.equal(h.table.release("k", first + 1n), true);
  assert.equal(h.table.extend("k", first + 1n, 10), false);
});

Deno.test("a granted hook may call back into the table", () => {
  const log: string[] = [];
  let now = 0;
  let token = 0n;
  const table: LockTable<string> = new LockTable<string>({
    clock: () => now,
    nextToken: () => ++token,
    hooks: {
      granted(who, key, t) {
        log.push(`granted ${who} ${t}`);
        if (who === "b") assert.equal(table.release(key, t), true); // gave up meanwhile
      },
      timedOut: (who) => log.push(`timedOut ${who}`),
    },
  });
  table.acquire("k", 100, 0, "a");
  table.acquire("k", 100, 0, "b");
  table.acquire("k", 100, 0, "c");
  now = 100;
  table.advance();
  assert.deepEqual(log, ["granted b 2", "granted c 3"]);
  assert.deepEqual(table.holder("k"), { key: "k", token: 3n, deadline: 200, owner: 0 });
  assert.equal(table.waiting, 0);
});

Deno.test("nextToken() throwing (tokens exhausted) leaves the table consistent", async (t) => {
  await t.step("acquire() of a free key throws and changes nothing", () => {
    const h = harness();
    h.exhausted = true;
    assert.throws(() => h.table.acquire("k", 100, 0, "a"), /exhausted/);
    assert.deepEqual(h.take(), []);
    assert.equal(h.table.held, 0);
    assert.equal(h.table.nextDeadline(), undefined);
    h.exhausted = false;
    assert.equal(grab(h, "k", 100, "a"), 1n);
  });
  await t.step("acquire() of a held key still queues (no token needed)", () => {
    const h = harness();
    grab(h, "k", 100, "a");
    h.exhausted = true;
    queue(h, "k", 100, 0, "b");
    assert.equal(h.table.waiting, 1);
  });
  await t.step("a failed handover at release() keeps the lease as a safety net", () => {
    const h = harness();
    const a = grab(h, "k", 100, "a");
    queue(h, "k", 100, 0, "b");
    h.take();
    h.at(10);
    h.exhausted = true;
    assert.throws(() => h.table.release("k", a), /exhausted/);
    h.exhausted = false;
    assert.equal(h.table.waiting, 1);
    // Whatever the release did, a's grant must still end when its lease runs out.
    assert.equal(h.table.nextDeadline(), 100, "a lease must still be pending");
    h.at(100);
    h.table.advance();
    assert.equal(h.table.extend("k", a, 100), false, "a's lease ran out: it must not extend");
    assert.equal(h.table.holder("k")?.token, 2n);
  });
  await t.step("a failed handover at lease expiry does not revive the expired grant", () => {
    const h = harness();
    const a = grab(h, "k", 100, "a");
    queue(h, "k", 100, 0, "b");
    h.take();
    h.at(100);
    h.exhausted = true;
    assert.throws(() => h.table.advance(), /exhausted/);
    h.exhausted = false;
    // The expiry is still pending: the next advance hands the key over.
    assert.equal(h.table.extend("k", a, 1000), false, "an expired lease must not extend");
    assert.equal(h.table.holder("k")?.token, 2n);
    assert.deepEqual(h.take(), ["held k 2 200", "granted b k 2"]);
  });
  await t.step("other due deadlines are settled by the next advance()", () => {
    const h = harness();
    grab(h, "k", 100, "a");
    queue(h, "k", 100, 0, "b");
    grab(h, "j", 200, "c");
    queue(h, "j", 100, 150, "d");
    h.take();
    h.at(300);
    h.exhausted = true;
    assert.throws(() => h.table.advance(), /exhausted/);
    h.exhausted = false;
    h.table.advance();
    const log = h.take();
    assert.ok(log.includes("timedOut d j"), log.join("\n"));
    assert.equal(h.table.holder("j"), undefined);
  });
});

Deno.test("the table reads only the injected clock, never the wall clock", () => {
  function scenario(): string[] {
    const h = harness();
    const a = grab(h, "k", 100, "a");
    queue(h, "k", 50, 70, "b");
    queue(h, "k", 50, 0, "c");
    h.at(60);
    h.table.extend("k", a, 100);
    h.at(200);
    h.table.advance();
    h.at(300);
    h.table.advance();
    return [...h.log, JSON.stringify([...h.table.holders()], (_, v) => String(v))];
  }
  const normal = scenario();
  const dateNow = Date.now;
  let wall = 1_700_000_000_000;
  Date.now = () => (wall += 86_400_000 * (wall % 2 === 0 ? 1 : -3)); // jumps both ways
  Object.defineProperty(performance, "now", {
    value: () => {
      throw new Error("the lock table must not read performance.now()");
    },
    configurable: true,
    writable: true,
  });
  let jumped: string[];
  try {
    jumped = scenario();
  } finally {
    Date.now = dateNow;
    Reflect.deleteProperty(performance, "now");
  }
  assert.deepEqual(jumped, normal);
  assert.deepEqual(normal.slice(0, -1), [
    "held k 1 100",
    "held k 1 160",
    "timedOut b k",
    "held k 2 250",
    "granted c k 2",
    "freed k 2",
  ]);
});
