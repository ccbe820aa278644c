/**
 * Unit tests of the indexed heap: ordering, ties, moves, removals, id reuse, and a long
 * random run checked against a sorted-array reference.
 *
 * @module
 */

import assert from "node:assert/strict";
import { IndexedHeap } from "../server/engine/indexed_heap.ts";
import { mulberry32 } from "./_prng.ts";

/** A named id of one heap, so tests read like the entries they schedule. */
interface Item {
  name: string;
  id: number;
}

/** An indexed heap with names for its ids and the test-side helpers of the old API. */
class Heap {
  readonly heap = new IndexedHeap(4); // small, so tests cross several growths
  #names = new Map<number, Item>();

  item(name: string): Item {
    const it = { name, id: this.heap.allocate() };
    this.#names.set(it.id, it);
    return it;
  }
  schedule(it: Item, deadline: number): void {
    this.heap.schedule(it.id, deadline);
  }
  cancel(it: Item): void {
    this.heap.remove(it.id);
  }
  get size(): number {
    return this.heap.size;
  }
  peek(): Item | undefined {
    return this.#names.get(this.heap.first());
  }
  deadline(it: Item): number {
    return this.heap.deadline(it.id);
  }
  index(it: Item): number {
    return this.heap.position(it.id);
  }
  /** Removes and returns the earliest entry if it is due at `now` (deadline <= now). */
  popDue(now: number): Item | undefined {
    const id = this.heap.first();
    if (id < 0 || this.heap.deadline(id) > now) return undefined;
    this.heap.remove(id);
    return this.#names.get(id);
  }
}

function drain(heap: Heap, now = Infinity): string[] {
  const out: string[] = [];
  for (let e = heap.popDue(now); e; e = heap.popDue(now)) out.push(e.name);
  return out;
}

Deno.test("popDue() returns entries in deadline order", () => {
  const heap = new Heap();
  const deadlines = [50, 10, 40, 30, 20, 60, 5, 45];
  for (const d of deadlines) heap.schedule(heap.item(`d${d}`), d);
  assert.equal(heap.size, deadlines.length);
  assert.deepEqual(drain(heap), [...deadlines].sort((a, b) => a - b).map((d) => `d${d}`));
  assert.equal(heap.size, 0);
  assert.equal(heap.peek(), undefined);
});

Deno.test("popDue() returns only entries with deadline <= now", async (t) => {
  const heap = new Heap();
  const a = heap.item("a");
  const b = heap.item("b");
  heap.schedule(a, 100);
  heap.schedule(b, 200);

  await t.step("nothing before the earliest deadline", () => {
    assert.equal(heap.popDue(99.999), undefined);
    assert.equal(heap.size, 2);
  });
  await t.step("an entry is due at exactly its deadline", () => {
    assert.equal(heap.popDue(100), a);
    assert.equal(heap.popDue(100), undefined);
    assert.equal(heap.size, 1);
  });
  await t.step("a late call returns everything overdue, in order", () => {
    const c = heap.item("c");
    heap.schedule(c, 150);
    assert.deepEqual(drain(heap, 10_000), ["c", "b"]);
  });
  await t.step("popDue() on an empty heap returns undefined", () => {
    assert.equal(heap.popDue(Infinity), undefined);
  });
});

Deno.test("popDue() breaks ties in insertion order", () => {
  const heap = new Heap();
  const names = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"];
  for (const n of names) heap.schedule(heap.item(n), 7);
  heap.schedule(heap.item("early"), 3);
  heap.schedule(heap.item("late"), 9);
  assert.deepEqual(drain(heap), ["early", ...names, "late"]);
});

Deno.test("peek() and size track the earliest entry", () => {
  const heap = new Heap();
  assert.equal(heap.peek(), undefined);
  assert.equal(heap.size, 0);
  const a = heap.item("a");
  const b = heap.item("b");
  heap.schedule(a, 20);
  assert.equal(heap.peek(), a);
  heap.schedule(b, 10);
  assert.equal(heap.peek(), b);
  assert.equal(heap.size, 2);
  heap.cancel(b);
  assert.equal(heap.peek(), a);
  assert.equal(heap.size, 1);
});

Deno.test("schedule() moves an already scheduled entry", async (t) => {
  await t.step("earlier", () => {
    const heap = new Heap();
    const [a, b, c] = [heap.item("a"), heap.item("b"), heap.item("c")];
    heap.schedule(a, 10);
    heap.schedule(b, 20);
    heap.schedule(c, 30);
    heap.schedule(c, 5);
    assert.equal(heap.size, 3);
    assert.equal(heap.deadline(c), 5);
    assert.deepEqual(drain(heap), ["c", "a", "b"]);
  });
  await t.step("later", () => {
    const heap = new Heap();
    const [a, b, c] = [heap.item("a"), heap.item("b"), heap.item("c")];
    heap.schedule(a, 10);
    heap.schedule(b, 20);
    heap.schedule(c, 30);
    heap.schedule(a, 25);
    assert.equal(heap.size, 3);
    assert.deepEqual(drain(heap), ["b", "a", "c"]);
  });
  await t.step("to the same deadline: it goes after the entries already there", () => {
    const heap = new Heap();
    const [a, b, c] = [heap.item("a"), heap.item("b"), heap.item("c")];
    heap.schedule(a, 10);
    heap.schedule(b, 10);
    heap.schedule(c, 10);
    heap.schedule(a, 10);
    assert.deepEqual(drain(heap), ["b", "c", "a"]);
  });
  await t.step("onto a tie: a moved entry counts as inserted when moved", () => {
    const heap = new Heap();
    const [a, b, c] = [heap.item("a"), heap.item("b"), heap.item("c")];
    heap.schedule(a, 50);
    heap.schedule(b, 10);
    heap.schedule(c, 20);
    heap.schedule(a, 20); // earlier, onto c's deadline: after c
    heap.schedule(b, 20); // later, onto the same deadline: after a
    assert.deepEqual(drain(heap), ["c", "a", "b"]);
  });
});

Deno.test("cancel() removes an entry and ignores one that is not scheduled", async (t) => {
  await t.step("root, middle and last positions keep the heap ordered", () => {
    const heap = new Heap();
    const items = Array.from({ length: 15 }, (_, i) => heap.item(`i${i}`));
    items.forEach((it, i) => heap.schedule(it, (i * 7) % 15));
    const root = heap.peek()!;
    heap.cancel(root);
    const last = items.find((it) => heap.index(it) === heap.size - 1)!;
    heap.cancel(last);
    const middle = items.find((it) => heap.index(it) === 3)!;
    heap.cancel(middle);
    assert.equal(heap.size, 12);
    for (const gone of [root, last, middle]) assert.equal(heap.index(gone), -1);
    const expected = items
      .filter((it) => ![root, last, middle].includes(it))
      .sort((x, y) => heap.deadline(x) - heap.deadline(y) || items.indexOf(x) - items.indexOf(y))
      .map((it) => it.name);
    assert.deepEqual(drain(heap), expected);
  });
  await t.step("a second cancel, or a cancel of a never scheduled entry, does nothing", () => {
    const heap = new Heap();
    const [a, b, c] = [heap.item("a"), heap.item("b"), heap.item("c")];
    heap.schedule(a, 1);
    heap.schedule(b, 2);
    heap.cancel(a);
    heap.cancel(a);
    heap.cancel(c);
    assert.equal(heap.size, 1);
    assert.equal(heap.peek(), b);
    assert.equal(heap.index(c), -1);
  });
  await t.step("the only entry", () => {
    const heap = new Heap();
    const a = heap.item("a");
    heap.schedule(a, 1);
    heap.cancel(a);
    assert.equal(heap.size, 0);
    assert.equal(heap.peek(), undefined);
    assert.equal(heap.index(a), -1);
  });
  await t.step("a cancelled entry can be scheduled again", () => {
    const heap = new Heap();
    const [a, b] = [heap.item("a"), heap.item("b")];
    heap.schedule(a, 1);
    heap.schedule(b, 5);
    heap.cancel(a);
    heap.schedule(a, 9);
    assert.deepEqual(drain(heap), ["b", "a"]);
  });
  await t.step("a cancel that must move the last entry up", () => {
    // Inserted in array order, each entry >= its parent, so this is the heap layout. The
    // last entry (4, right subtree) replaces 14 (left subtree, under 11 and 10): it must
    // move up two levels, not down.
    const heap = new Heap();
    const deadlines = [0, 10, 1, 11, 12, 2, 3, 13, 14, 15, 16, 4];
    const items = deadlines.map((d) => heap.item(`d${d}`));
    items.forEach((it, i) => heap.schedule(it, deadlines[i]));
    items.forEach((it, i) => assert.equal(heap.index(it), i));
    heap.cancel(items[8]);
    assert.equal(heap.index(items[11]), 1);
    const expected = deadlines.filter((d) => d !== 14).sort((a, b) => a - b).map((d) => `d${d}`);
    assert.deepEqual(drain(heap), expected);
  });
});

Deno.test("popDue() and cancel() leave the entry unscheduled", () => {
  const heap = new Heap();
  const [a, b] = [heap.item("a"), heap.item("b")];
  heap.schedule(a, 1);
  heap.schedule(b, 2);
  assert.ok(heap.index(a) >= 0 && heap.index(b) >= 0);
  assert.equal(heap.popDue(1), a);
  assert.equal(heap.index(a), -1);
  heap.cancel(b);
  assert.equal(heap.index(b), -1);
});

Deno.test("IndexedHeap matches a sorted-array reference under random operations", async (t) => {
  for (const seed of [1, 42, 20240601, 0xdeadbeef]) {
    await t.step(`seed ${seed}`, () => {
      const random = mulberry32(seed);
      const int = (n: number) => Math.floor(random() * n);
      const heap = new Heap();
      const pool = Array.from({ length: 60 }, (_, i) => heap.item(`i${i}`));
      // Reference: scheduled entries with the insertion counter of their last schedule().
      const ref: { it: Item; deadline: number; order: number }[] = [];
      let order = 0;
      let now = 0;
      const sortRef = () => ref.sort((x, y) => x.deadline - y.deadline || x.order - y.order);
      let step = 0;
      try {
        for (step = 0; step < 4000; step++) {
          const op = random();
          if (op < 0.45) {
            // schedule (new or move); small deadline range for many ties
            const it = pool[int(pool.length)];
            const deadline = now + int(40) - 5;
            heap.schedule(it, deadline);
            const found = ref.find((r) => r.it === it);
            if (found) {
              found.deadline = deadline;
              found.order = order++;
            } else ref.push({ it, deadline, order: order++ });
          } else if (op < 0.65) {
            // cancel (scheduled or not)
            const it = pool[int(pool.length)];
            heap.cancel(it);
            const i = ref.findIndex((r) => r.it === it);
            if (i >= 0) ref.splice(i, 1);
          } else if (op < 0.95) {
            // popDue at a clock that goes forward
            now += int(6);
            sortRef();
            const got = heap.popDue(now);
            const want = ref.length > 0 && ref[0].deadline <= now ? ref.shift()!.it : undefined;
            assert.equal(got?.name, want?.name);
          } else {
            // drain everything due
            now += int(20);
            sortRef();
            const want: string[] = [];
            while (ref.length > 0 && ref[0].deadline <= now) want.push(ref.shift()!.it.name);
            assert.deepEqual(drain(heap, now), want);
          }
          sortRef();
          assert.equal(heap.size, ref.length);
          assert.equal(heap.peek()?.name, ref[0]?.it.name);
          // Every entry knows whether it is scheduled, and positions are distinct.
          const positions = new Set<number>();
          for (const it of pool) {
            const scheduled = ref.some((r) => r.it === it);
            if (scheduled) {
              assert.ok(heap.index(it) >= 0 && heap.index(it) < heap.size, `${it.name} index`);
              positions.add(heap.index(it));
            } else assert.equal(heap.index(it), -1, `${it.name} should be unscheduled`);
          }
          assert.equal(positions.size, ref.length);
        }
        // Finally everything comes out in reference order.
        sortRef();
        assert.deepEqual(drain(heap), ref.map((r) => r.it.name));
      } catch (error) {
        throw new Error(`seed ${seed} failed at step ${step}`, { cause: error });
      }
    });
  }
});

Deno.test("allocate() reuses freed ids, last freed first, and free() unschedules", () => {
  const heap = new IndexedHeap(2);
  const ids = [heap.allocate(), heap.allocate(), heap.allocate()];
  assert.deepEqual(ids, [0, 1, 2]);
  assert.ok(heap.capacity >= 3);
  heap.schedule(1, 10);
  heap.schedule(2, 5);
  heap.free(2);
  assert.equal(heap.scheduled(2), false);
  assert.equal(heap.first(), 1);
  heap.free(0);
  assert.equal(heap.allocate(), 0);
  assert.equal(heap.allocate(), 2);
  assert.equal(heap.allocate(), 3);
  assert.equal(heap.top, 4);
  heap.clear();
  assert.equal(heap.size, 0);
  assert.equal(heap.allocate(), 0);
});
