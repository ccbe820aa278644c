/**
 * Unit tests of the lock table's read-only accessors for inspection (issue 13): the holder
 * of a key, its waiter count, held keys by prefix in key order, and the answers built on
 * them (`I`, `L` pages), on a fake clock. Reading changes nothing. No sockets.
 *
 * @module
 */

import assert from "node:assert/strict";
import { keyStateOf, parseReply } from "../client/codec.ts";
import { KeyPage } from "../server/engine/key_page.ts";
import { LockTable, type Waiter } from "../server/engine/lock_table.ts";
import { type Inspection, inspectKeyReply, keyInfos } from "../server/inspect.ts";
import { Owners } from "../server/owners.ts";
import { buildStatus } from "../server/status.ts";
import { Metrics } from "../server/metrics.ts";

function table(): { table: LockTable<string>; at(ms: number): void; events: string[] } {
  let now = 0;
  let token = 0n;
  const events: string[] = [];
  return {
    table: new LockTable<string>({
      clock: () => now,
      nextToken: () => ++token,
      hooks: {
        granted: (who, key, t) => events.push(`granted ${who} ${key} ${t}`),
        timedOut: (who, key) => events.push(`timedOut ${who} ${key}`),
        held: (key) => events.push(`held ${key}`),
        freed: (key) => events.push(`freed ${key}`),
      },
    }),
    at: (ms) => now = ms,
    events,
  };
}

Deno.test("peek() and waitersOf() read a key's holder and queue without settling anything", () => {
  const { table: t, at, events } = table();
  t.acquire("k", 1000, 0, "a", 7);
  const b = t.acquire("k", 1000, 0, "b") as Waiter<string>;
  t.acquire("k", 1000, 500, "c");
  assert.deepEqual(t.peek("k"), { key: "k", token: 1n, deadline: 1000, owner: 7 });
  assert.equal(t.waitersOf("k"), 2);
  assert.equal(t.peek("free"), undefined);
  assert.equal(t.waitersOf("free"), 0);
  events.length = 0;
  at(2000); // the lease and c's wait ran out, but nobody settled them
  assert.deepEqual(t.peek("k"), { key: "k", token: 1n, deadline: 1000, owner: 7 });
  assert.equal(t.waitersOf("k"), 2);
  t.heldKeys("", 10);
  assert.deepEqual(events, [], "reading called no hook");
  t.advance();
  assert.deepEqual(t.peek("k")?.token, 2n, "b holds it once settled");
  assert.equal(t.waitersOf("k"), 0, "c timed out");
  t.acquire("k", 1000, 0, "d");
  t.cancel(b); // already granted: nothing
  assert.equal(t.waitersOf("k"), 1);
});

Deno.test("waitersOf() follows grants, timeouts and cancels of queued acquires", () => {
  const { table: t, at } = table();
  t.acquire("k", 10_000, 0, "a");
  const waiters = ["b", "c", "d"].map((who) => t.acquire("k", 1000, 100, who) as Waiter<string>);
  assert.equal(t.waitersOf("k"), 3);
  t.cancel(waiters[1]);
  assert.equal(t.waitersOf("k"), 2);
  assert.ok(t.release("k", 1n));
  assert.equal(t.waitersOf("k"), 1, "b was granted");
  at(200);
  t.advance();
  assert.equal(t.waitersOf("k"), 0, "d timed out");
  assert.equal(t.waiting, 0);
});

Deno.test("heldKeys() lists held keys by prefix in key order, after a key, at most limit", () => {
  const { table: t } = table();
  const keys = ["b:2", "a:10", "a:9", "a:1", "c", "a:2", "é", "a:"];
  for (const key of keys) t.acquire(key, 1000, 0, key);
  assert.deepEqual(t.heldKeys("", 100), [...keys].sort());
  assert.deepEqual(t.heldKeys("a:", 100), ["a:", "a:1", "a:10", "a:2", "a:9"]);
  assert.deepEqual(t.heldKeys("a:", 2), ["a:", "a:1"]);
  assert.deepEqual(t.heldKeys("a:", 2, "a:1"), ["a:10", "a:2"]);
  assert.deepEqual(t.heldKeys("a:", 10, "a:9"), []);
  assert.deepEqual(t.heldKeys("z", 10), []);
  assert.deepEqual(t.heldKeys("", 0), []);
  assert.ok(t.release("a:10", 2n));
  assert.deepEqual(t.heldKeys("a:1", 10), ["a:1"]);
});

Deno.test("KeyPage keeps the smallest keys of any order, sorted", () => {
  const keys = Array.from(
    { length: 500 },
    (_, i) => `k${String((i * 7919) % 500).padStart(3, "0")}`,
  );
  const page = new KeyPage(10);
  for (const key of keys) page.offer(key);
  assert.deepEqual(page.keys(), [...keys].sort().slice(0, 10));
  const none = new KeyPage(0);
  none.offer("a");
  assert.deepEqual(none.keys(), []);
});

Deno.test("keyInfos() and inspectKeyReply() give token, holder name, lease left and waiters", () => {
  const { table: t, at } = table();
  const owners = new Owners();
  const worker = owners.intern("worker-1", undefined, false);
  t.acquire("jobs:1", 30_000, 0, "a", worker.id);
  t.acquire("jobs:1", 1000, 0, "b");
  t.acquire("jobs:2", 1500, 0, "c"); // no hello: owner 0
  at(1000.4);
  const ctx: Inspection = {
    clock: () => 1000.4,
    owners,
    status: () => {
      throw new Error("unused");
    },
  };
  assert.deepEqual(keyInfos(t, ctx, "jobs:", 10), {
    locks: [
      { key: "jobs:1", token: "1", holder: "worker-1", leaseLeftSeconds: 29, waiters: 1 },
      { key: "jobs:2", token: "2", holder: null, leaseLeftSeconds: 0.5, waiters: 0 },
    ],
    more: false,
  });
  assert.deepEqual(keyInfos(t, ctx, "", 1), {
    locks: [{ key: "jobs:1", token: "1", holder: "worker-1", leaseLeftSeconds: 29, waiters: 1 }],
    more: true,
  });
  assert.equal(inspectKeyReply(t, ctx, { op: "I", key: "jobs:1" }), "I jobs:1 I 1 29 1 worker-1");
  assert.deepEqual(keyStateOf(parseReply(inspectKeyReply(t, ctx, { op: "I", key: "jobs:2" }))!), {
    key: "jobs:2",
    held: true,
    token: 2n,
    leaseLeft: 0.5,
    waiters: 0,
  });
  assert.equal(inspectKeyReply(t, ctx, { op: "I", key: "nope" }), "I nope F");
  // An owner forgotten meanwhile (swept) shows no name rather than a wrong one.
  owners.forget(worker.id);
  assert.equal(keyInfos(t, ctx, "jobs:1", 1).locks[0].holder, null);
});

Deno.test("a lease granted in this turn never shows more left than was granted", () => {
  // (t + 60000) - t is 60000.00000000001 at this clock reading: rounded up, 60.001 s.
  const t0 = 12345.678901;
  assert.ok((t0 + 60_000) - t0 > 60_000);
  let now = t0;
  const { table: t, at } = table();
  at(t0);
  t.acquire("k", 60_000, 0, "a");
  const ctx: Inspection = {
    clock: () => now,
    status: () => {
      throw new Error("unused");
    },
  };
  assert.equal(keyInfos(t, ctx, "", 10).locks[0].leaseLeftSeconds, 60);
  assert.equal(inspectKeyReply(t, ctx, { op: "I", key: "k" }), "I k I 1 60 0 -");
  // Still rounded up a microsecond later, and never negative once the lease is over.
  now = t0 + 0.001;
  assert.equal(inspectKeyReply(t, ctx, { op: "I", key: "k" }), "I k I 1 60 0 -");
  now = t0 + 60_001;
  assert.equal(inspectKeyReply(t, ctx, { op: "I", key: "k" }), "I k I 1 0 0 -");
});

Deno.test("buildStatus() of a single node reports itself active, with the table's sizes", () => {
  const { table: t } = table();
  t.acquire("k", 1000, 0, "a");
  t.acquire("k", 1000, 0, "b");
  const metrics = new Metrics({ clock: () => 0 });
  const parts = {
    address: "127.0.0.1:7321",
    version: "9.9.9",
    now: 61_234.5,
    startedAt: 1000,
    stopping: false,
    table: t,
    tokens: { last: 2n, reserved: 1_000_000n },
    metrics,
    connections: 4,
    sessions: 2,
    cluster: undefined,
  };
  const status = buildStatus(parts);
  assert.equal(status.role, "active");
  assert.equal(status.active, "127.0.0.1:7321");
  assert.equal(status.uptimeSeconds, 60.235);
  assert.deepEqual(status.replication, { mode: "none", degraded: false, inSync: [] });
  assert.deepEqual(status.peers, []);
  assert.equal(status.holders, 1);
  assert.equal(status.waiters, 1);
  assert.deepEqual(status.tokens, { last: "2", mark: "1000000" });
  assert.equal(status.counts.grants, 0, "this table counted into its own counts");
  assert.equal(status.connections, 4);
  assert.equal(status.sessions, 2);
  const stopping = buildStatus({ ...parts, stopping: true });
  assert.equal(stopping.role, "leaving");
  assert.equal(stopping.active, null);
  assert.deepEqual(JSON.parse(JSON.stringify(status)), status, "plain JSON, no bigint");
});
