/**
 * Unit tests of the lock table's hooks and state, with a fake clock: the held and freed
 * hooks (and working without them), restore() and forget() of grants, holders(), holder()
 * and clear(), tokens above 2^53, a granted hook calling back into the table, nextToken()
 * throwing, and reading only the injected clock. Harness: tests/_lock_table.ts.
 * Granting, handover, wait limits and cancel(): lock_table_test.ts; extend(), wrong tokens,
 * deadlines and nextDeadline(): lock_table_deadlines_test.ts.
 *
 * @module
 */

import assert from "node:assert/strict";
import { LockTable } from "../server/engine/lock_table.ts";
import { grab, harness, queue } from "./_lock_table.ts";

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
