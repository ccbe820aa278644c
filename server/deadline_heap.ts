/**
 * An indexed binary min-heap of deadlines: the one timer structure behind every lease and
 * every wait limit, so a million leases cost one `setTimeout`, not a million.
 *
 * Entries are the caller's own objects (a lock, a waiter) carrying `deadline` and
 * `heapIndex`, so scheduling allocates nothing and an entry can be moved or removed in
 * O(log n) when a lease is extended or a waiter leaves.
 *
 * @module
 */

/** Something with a deadline that the heap orders. */
export interface Timed {
  /** Monotonic time in milliseconds at which it is due. */
  deadline: number;
  /** Tie-breaker among equal deadlines: lower runs first (insertion order). */
  seq: number;
  /** Position in the heap, or -1 when not scheduled. Owned by the heap. */
  heapIndex: number;
}

function before(a: Timed, b: Timed): boolean {
  return a.deadline < b.deadline || (a.deadline === b.deadline && a.seq < b.seq);
}

/** A min-heap of {@linkcode Timed} entries ordered by (deadline, seq). */
export class DeadlineHeap<T extends Timed> {
  #items: T[] = [];
  #seq = 0;

  /** Number of scheduled entries. */
  get size(): number {
    return this.#items.length;
  }

  /** The earliest entry, or `undefined` when empty. */
  peek(): T | undefined {
    return this.#items[0];
  }

  /** Schedules `item` at `deadline` (ms), or moves it there if already scheduled. */
  schedule(item: T, deadline: number): void {
    if (item.heapIndex >= 0) {
      const earlier = deadline < item.deadline;
      item.deadline = deadline;
      item.seq = this.#seq++;
      if (earlier) this.#up(item.heapIndex);
      else this.#down(item.heapIndex);
      return;
    }
    item.deadline = deadline;
    item.seq = this.#seq++;
    item.heapIndex = this.#items.length;
    this.#items.push(item);
    this.#up(item.heapIndex);
  }

  /** Removes `item` if scheduled; does nothing otherwise. */
  cancel(item: T): void {
    const i = item.heapIndex;
    if (i < 0) return;
    item.heapIndex = -1;
    const last = this.#items.pop()!;
    if (i === this.#items.length) return;
    this.#items[i] = last;
    last.heapIndex = i;
    if (i > 0 && before(last, this.#items[(i - 1) >> 1])) this.#up(i);
    else this.#down(i);
  }

  /** Removes and returns the earliest entry if it is due at `now` (deadline <= now). */
  popDue(now: number): T | undefined {
    const top = this.#items[0];
    if (top === undefined || top.deadline > now) return undefined;
    this.cancel(top);
    return top;
  }

  #up(i: number): void {
    const items = this.#items;
    const item = items[i];
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const p = items[parent];
      if (!before(item, p)) break;
      items[i] = p;
      p.heapIndex = i;
      i = parent;
    }
    items[i] = item;
    item.heapIndex = i;
  }

  #down(i: number): void {
    const items = this.#items;
    const n = items.length;
    const item = items[i];
    for (;;) {
      let child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && before(items[child + 1], items[child])) child++;
      const c = items[child];
      if (!before(c, item)) break;
      items[i] = c;
      c.heapIndex = i;
      i = child;
    }
    items[i] = item;
    item.heapIndex = i;
  }
}
