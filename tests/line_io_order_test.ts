/**
 * Unit tests of the ordering pieces of the request path, without sockets: reply order per id
 * ({@linkcode ReplyOrder}) and the server's end of batch ({@linkcode Batch}).
 * Line framing and batched output: line_io_test.ts; the server's `LineSocket`:
 * line_io_socket_test.ts.
 *
 * @module
 */

import assert from "node:assert/strict";
import { type OrderedReply, ReplyOrder } from "../client/reply_order.ts";
import { Batch } from "../server/batch.ts";
import { tick } from "./_line_io.ts";

// ---------------------------------------------------------------------------------------
// ReplyOrder

interface Entry extends OrderedReply {
  name: string;
}

function entry(name: string, reply?: string): Entry {
  return { name, reply };
}

Deno.test("ReplyOrder sends the replies of one id in request order", () => {
  const order = new ReplyOrder<Entry>();
  const sent: string[] = [];
  const send = (e: Entry) => sent.push(`${e.name}: ${e.reply}`);
  assert.equal(order.has("k"), false);
  const first = entry("a1");
  order.push("k", first);
  order.push("k", entry("a2", "A k E bad lease"));
  order.push("j", entry("b1", "A j A 3"));
  assert.equal(order.has("k"), true);
  order.drain("k", send);
  assert.deepEqual(sent, [], "an undecided head blocks every later entry");
  order.drain("j", send);
  assert.deepEqual(sent, ["b1: A j A 3"], "other ids are not blocked");
  assert.equal(order.has("j"), false, "an id with nothing left is forgotten");
  first.reply = "A k A 7";
  order.drain("k", send);
  assert.deepEqual(sent, ["b1: A j A 3", "a1: A k A 7", "a2: A k E bad lease"]);
  assert.equal(order.has("k"), false);
  order.drain("unknown", send);
  assert.equal(sent.length, 3);
});

Deno.test("ReplyOrder stops at the next undecided entry", () => {
  const order = new ReplyOrder<Entry>();
  const sent: string[] = [];
  const e = [entry("1", "r1"), entry("2"), entry("3", "r3"), entry("4")];
  for (const x of e) order.push("k", x);
  order.drain("k", (x) => sent.push(x.name));
  assert.deepEqual(sent, ["1"]);
  e[3].reply = "r4";
  order.drain("k", (x) => sent.push(x.name));
  assert.deepEqual(sent, ["1"], "4 is decided but 2 is not");
  e[1].reply = "r2";
  order.drain("k", (x) => sent.push(x.name));
  assert.deepEqual(sent, ["1", "2", "3", "4"]);
  assert.equal(order.has("k"), false);
});

Deno.test("ReplyOrder keeps order over many entries decided one by one", () => {
  // Enough entries for the queue to compact its storage on the way.
  const order = new ReplyOrder<Entry>();
  const all = Array.from({ length: 5000 }, (_, i) => entry(String(i)));
  const sent: string[] = [];
  for (const x of all.slice(0, 3000)) order.push("k", x);
  for (let i = 0; i < all.length; i++) {
    if (i + 3000 < all.length) order.push("k", all[i + 3000]);
    all[i].reply = `r${i}`;
    order.drain("k", (x) => sent.push(x.name));
    assert.equal(sent.length, i + 1);
  }
  assert.deepEqual(sent, all.map((x) => x.name));
  assert.equal(order.has("k"), false);
});

Deno.test("ReplyOrder entries() lists every waiting entry per id in order, clear() forgets them", () => {
  const order = new ReplyOrder<Entry>();
  order.push("k", entry("k1", "done"));
  order.push("k", entry("k2"));
  order.push("j", entry("j1"));
  order.push("k", entry("k3", "held"));
  const names = [...order.entries()].map((x) => x.name);
  assert.deepEqual(names.filter((n) => n.startsWith("k")), ["k1", "k2", "k3"]);
  assert.deepEqual(names.filter((n) => n.startsWith("j")), ["j1"]);
  order.drain("k", () => {});
  assert.deepEqual([...order.entries()].map((x) => x.name).sort(), ["j1", "k2", "k3"]);
  order.clear();
  assert.deepEqual([...order.entries()], []);
  assert.equal(order.has("k"), false);
  assert.equal(order.has("j"), false);
});

// ---------------------------------------------------------------------------------------
// Batch

Deno.test("Batch flushes each added item once at the end of the batch, in a microtask", async () => {
  const batch = new Batch();
  const log: string[] = [];
  const item = (name: string) => ({ flush: () => log.push(`flush ${name}`) });
  const a = item("a");
  const b = item("b");
  setTimeout(() => log.push("next turn"), 0);
  batch.add(a);
  batch.add(b);
  assert.deepEqual(log, [], "nothing is flushed synchronously");
  await Promise.resolve();
  assert.deepEqual(log, ["flush a", "flush b"], "flushed in a microtask of this turn");
  await tick();
  assert.deepEqual(log, ["flush a", "flush b", "next turn"]);
  batch.add(a);
  await tick();
  assert.deepEqual(log.slice(3), ["flush a"], "a later batch flushes again, only what was added");
});

Deno.test("Batch runs its hooks after the flushes, until removed", async () => {
  const batch = new Batch();
  const log: string[] = [];
  const removeFirst = batch.onEnd(() => log.push("hook 1"));
  batch.onEnd(() => log.push("hook 2"));
  batch.add({ flush: () => log.push("flush") });
  await tick();
  assert.deepEqual(log, ["flush", "hook 1", "hook 2"]);
  batch.soon();
  batch.soon();
  await tick();
  assert.deepEqual(log.slice(3), ["hook 1", "hook 2"], "soon() ends one batch, items or not");
  removeFirst();
  batch.soon();
  await tick();
  assert.deepEqual(log.slice(5), ["hook 2"]);
});

Deno.test("Batch flushes an item added during a flush in a following batch of the same turn", async () => {
  const batch = new Batch();
  const log: string[] = [];
  const late = { flush: () => log.push("flush late") };
  batch.onEnd(() => log.push("end"));
  batch.add({
    flush: () => {
      log.push("flush early");
      batch.add(late);
    },
  });
  setTimeout(() => log.push("next turn"), 0);
  await tick();
  assert.deepEqual(log, ["flush early", "end", "flush late", "end", "next turn"]);
});

Deno.test("Batch end() ends the batch at once", () => {
  const batch = new Batch();
  const log: string[] = [];
  batch.onEnd(() => log.push("end"));
  batch.end();
  batch.add({ flush: () => log.push("flush") });
  batch.end();
  assert.deepEqual(log, ["end", "flush", "end"]);
});
