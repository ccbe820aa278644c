/**
 * A binary min-heap of deadlines, the one structure behind every timer of a client
 * ({@linkcode TimerQueue} in `timer.ts`), as the server's `IndexedHeap` is behind its leases
 * and waits. Entries carry their own place in the heap (`slot`), so removing one is
 * O(log n) without a search and without allocating; entries due at the same time come out
 * in the order they were pushed. Pure: no clock, no timers.
 *
 * @module
 */

/** What the heap holds: any object with these fields, which the heap alone writes. */
export interface HeapEntry {
  /** When it is due (any monotonic unit; the client uses `performance.now()` ms). */
  due: number;
  /** Its index in the heap, or -1 while it is not in one. */
  slot: number;
  /** Push order, which breaks ties between equal `due`s. */
  seq: number;
}

/** A min-heap of {@linkcode HeapEntry} by (`due`, push order). */
export class DeadlineHeap<E extends HeapEntry> {
  #items: E[] = [];
  #seq = 0;

  /** Number of entries. */
  get size(): number {
    return this.#items.length;
  }

  /** The push order the next entry will get (entries pushed before it have a smaller one). */
  get nextSeq(): number {
    return this.#seq;
  }

  /** The earliest entry, or `undefined` when empty. */
  peek(): E | undefined {
    return this.#items[0];
  }

  /** Whether `entry` is in this heap. */
  has(entry: E): boolean {
    return entry.slot >= 0 && this.#items[entry.slot] === entry;
  }

  /**
   * Adds `entry` due at `due`, or moves it there if it is already in the heap (it then counts
   * as pushed now).
   */
  push(entry: E, due: number): void {
    if (this.has(entry)) this.remove(entry);
    entry.due = due;
    entry.seq = this.#seq++;
    const items = this.#items;
    entry.slot = items.length;
    items.push(entry);
    this.#up(entry.slot);
  }

  /** Removes `entry`; returns whether it was in the heap. */
  remove(entry: E): boolean {
    if (!this.has(entry)) return false;
    const items = this.#items;
    const at = entry.slot;
    const last = items.pop()!;
    entry.slot = -1;
    if (last !== entry) {
      items[at] = last;
      last.slot = at;
      // The moved entry may belong above or below its new place.
      if (at > 0 && before(last, items[(at - 1) >> 1])) this.#up(at);
      else this.#down(at);
    }
    return true;
  }

  /** Removes and returns the earliest entry, or `undefined` when empty. */
  pop(): E | undefined {
    const top = this.#items[0];
    if (top !== undefined) this.remove(top);
    return top;
  }

  /** Removes every entry. */
  clear(): void {
    for (const entry of this.#items) entry.slot = -1;
    this.#items = [];
  }

  #up(at: number): void {
    const items = this.#items;
    const entry = items[at];
    while (at > 0) {
      const parentAt = (at - 1) >> 1;
      const parent = items[parentAt];
      if (!before(entry, parent)) break;
      items[at] = parent;
      parent.slot = at;
      at = parentAt;
    }
    items[at] = entry;
    entry.slot = at;
  }

  #down(at: number): void {
    const items = this.#items;
    const n = items.length;
    const entry = items[at];
    for (;;) {
      const left = 2 * at + 1;
      if (left >= n) break;
      const right = left + 1;
      const child = right < n && before(items[right], items[left]) ? right : left;
      if (!before(items[child], entry)) break;
      items[at] = items[child];
      items[at].slot = at;
      at = child;
    }
    items[at] = entry;
    entry.slot = at;
  }
}

/** Whether `a` comes out before `b`. */
function before(a: HeapEntry, b: HeapEntry): boolean {
  return a.due < b.due || (a.due === b.due && a.seq < b.seq);
}
