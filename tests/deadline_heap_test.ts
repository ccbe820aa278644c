/**
 * Tests of the client's timers without sockets: the pure deadline heap
 * (`client/deadline_heap.ts`) against a sorted model, and the queue behind every client
 * timer (`client/timer.ts`) with real, short delays.
 */

import assert from "node:assert/strict";
import { DeadlineHeap, type HeapEntry } from "../client/deadline_heap.ts";
import { after, HORIZON_MS, TimerQueue } from "../client/timer.ts";
import { mulberry32 } from "./_prng.ts";

interface Entry extends HeapEntry {
  name: number;
}

const entry = (name: number): Entry => ({ name, due: 0, slot: -1, seq: 0 });

Deno.test("DeadlineHeap pops by due time, ties in push order", () => {
  const heap = new DeadlineHeap<Entry>();
  const entries = [5, 1, 3, 1, 2, 5, 0].map((due, name) => {
    const e = entry(name);
    heap.push(e, due);
    return e;
  });
  assert.equal(heap.size, 7);
  assert.equal(heap.peek(), entries[6]);
  const order: number[] = [];
  for (let e = heap.pop(); e !== undefined; e = heap.pop()) order.push(e.name);
  // due 0: #6; due 1: #1 then #3; due 2: #4; due 3: #2; due 5: #0 then #5.
  assert.deepEqual(order, [6, 1, 3, 4, 2, 0, 5]);
  assert.equal(heap.size, 0);
  assert.ok(entries.every((e) => e.slot === -1 && !heap.has(e)));
});

Deno.test("DeadlineHeap moves an entry pushed again, and removes only what it holds", () => {
  const heap = new DeadlineHeap<Entry>();
  const [a, b, c] = [entry(0), entry(1), entry(2)];
  heap.push(a, 10);
  heap.push(b, 20);
  heap.push(c, 30);
  heap.push(c, 5); // moved earlier
  assert.equal(heap.size, 3);
  assert.equal(heap.peek(), c);
  heap.push(c, 20); // same due as b, pushed later: after b
  assert.equal(heap.remove(a), true);
  assert.equal(heap.remove(a), false, "not there any more");
  assert.equal(heap.pop(), b);
  assert.equal(heap.pop(), c);
  const other = new DeadlineHeap<Entry>();
  other.push(a, 1);
  assert.equal(heap.remove(a), false, "an entry of another heap");
  assert.equal(heap.has(a), false);
  assert.equal(other.has(a), true);
});

Deno.test("DeadlineHeap matches a sorted model over random pushes, moves and removals", () => {
  const random = mulberry32(14);
  const int = (n: number) => Math.floor(random() * n);
  const heap = new DeadlineHeap<Entry>();
  const pool = Array.from({ length: 64 }, (_, i) => entry(i));
  const model = new Map<Entry, [number, number]>(); // entry -> [due, push order]
  let order = 0;
  const first = () => [...model].sort((x, y) => x[1][0] - y[1][0] || x[1][1] - y[1][1])[0]?.[0];
  for (let step = 0; step < 5_000; step++) {
    const e = pool[int(pool.length)];
    const action = int(4);
    if (action <= 1) {
      const due = int(50);
      heap.push(e, due);
      model.set(e, [due, order++]);
    } else if (action === 2) {
      assert.equal(heap.remove(e), model.delete(e));
    } else {
      const expected = first();
      assert.equal(heap.pop(), expected);
      if (expected !== undefined) model.delete(expected);
    }
    assert.equal(heap.size, model.size);
    assert.equal(heap.peek(), first());
  }
  heap.clear();
  assert.equal(heap.size, 0);
  assert.ok(pool.every((e) => !heap.has(e)));
});

Deno.test("TimerQueue fires entries in due order behind one runtime timer, and cancels", async () => {
  const queue = new TimerQueue(false);
  const fired: string[] = [];
  const { promise: done, resolve } = Promise.withResolvers<void>();
  const alarm = (name: string) => ({
    due: 0,
    slot: -1,
    seq: 0,
    fire() {
      fired.push(name);
      if (name === "last") resolve();
    },
  });
  const now = performance.now();
  const late = alarm("late"), early = alarm("early"), cancelled = alarm("cancelled");
  const last = alarm("last");
  queue.schedule(late, now + 30);
  queue.schedule(early, now + 5);
  queue.schedule(cancelled, now + 10);
  queue.schedule(last, now + 40);
  assert.equal(queue.size, 4);
  queue.cancel(cancelled);
  assert.equal(queue.scheduled(cancelled), false);
  queue.schedule(late, now + 20); // moved
  await done;
  assert.deepEqual(fired, ["early", "late", "last"]);
  assert.ok(performance.now() - now >= 39, "nothing fires early");
  assert.equal(queue.size, 0);
});

Deno.test("TimerQueue: an entry scheduled while firing waits for the next turn; a throw does not stop the rest", async () => {
  const queue = new TimerQueue(false);
  const fired: string[] = [];
  const { promise: done, resolve } = Promise.withResolvers<void>();
  const errors: unknown[] = [];
  const onError = (event: ErrorEvent) => {
    event.preventDefault();
    errors.push(event.error);
  };
  globalThis.addEventListener("error", onError);
  try {
    const again = {
      due: 0,
      slot: -1,
      seq: 0,
      fire() {
        fired.push("again");
        resolve();
      },
    };
    const first = {
      due: 0,
      slot: -1,
      seq: 0,
      fire() {
        fired.push("first");
        queue.schedule(again, 0); // due already: still the next turn, not this loop
        assert.deepEqual(fired, ["first"]);
      },
    };
    const thrower = {
      due: 0,
      slot: -1,
      seq: 0,
      fire(): void {
        throw new Error("boom");
      },
    };
    const now = performance.now();
    queue.schedule(thrower, now);
    queue.schedule(first, now);
    await done;
    assert.deepEqual(fired, ["first", "again"]);
    await new Promise((r) => setTimeout(r, 0));
    assert.equal(errors.length, 1);
    assert.match(String(errors[0]), /boom/);
  } finally {
    globalThis.removeEventListener("error", onError);
  }
});

Deno.test("TimerQueue: entries due past its horizon come and go without a new runtime timer, and fire on time", async () => {
  const queue = new TimerQueue(false);
  const real = globalThis.setTimeout;
  let made = 0;
  globalThis.setTimeout = ((...args: Parameters<typeof setTimeout>) => {
    made++;
    return real(...args);
  }) as typeof setTimeout;
  try {
    const entry = (fire = () => {}) => ({ due: 0, slot: -1, seq: 0, fire });
    const wait = entry(), lease = entry(), bound = entry();
    const now = performance.now();
    // A lock cycle at a time: the acquire's wait, the lease's warning, the release's bound,
    // each due sooner than the one before, and the queue empty in between.
    for (let i = 0; i < 100; i++) {
      queue.schedule(wait, now + 10_000 - i);
      queue.cancel(wait);
      queue.schedule(lease, now + 9000 - i);
      queue.cancel(lease);
      queue.schedule(bound, now + 5000 - i);
      queue.cancel(bound);
    }
    assert.equal(made, 1, "one runtime timer for all 300");
    const { promise: fired, resolve } = Promise.withResolvers<number>();
    const start = performance.now();
    queue.schedule(entry(() => resolve(performance.now())), start + HORIZON_MS + 200);
    const at = await fired;
    assert.ok(at - start >= HORIZON_MS + 199, `fired after ${at - start} ms`);
    assert.ok(made >= 2, "re-armed at the horizon");
    assert.equal(queue.size, 0);
  } finally {
    globalThis.setTimeout = real;
  }
});

Deno.test("after() fires once after its delay, never for Infinity, not at all once cancelled", async () => {
  let count = 0;
  const { promise: fired, resolve } = Promise.withResolvers<void>();
  const started = performance.now();
  after(15, () => {
    count++;
    resolve();
  });
  const never = after(Infinity, () => count += 100);
  const cancelled = after(5, () => count += 10);
  cancelled();
  cancelled(); // twice does nothing
  await fired;
  assert.ok(performance.now() - started >= 14);
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(count, 1);
  never();
});
