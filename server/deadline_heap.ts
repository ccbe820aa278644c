/**
 * An indexed binary min-heap of deadlines: the one timer structure behind every lease and
 * every wait limit, so a million leases cost one `setTimeout`, not a million.
 *
 * Entries are the caller's own objects (a lock, a waiter) carrying `deadline` and
 * `heapIndex`, so an entry can be moved or removed in O(log n) when a lease is extended or
 * a waiter leaves. The ordering keys (deadline, then insertion order) are also kept in
 * typed arrays beside the entries: sifting compares contiguous numbers instead of reading
 * a million scattered objects, which is what makes a million expiries a second possible.
 *
 * @module
 */

/** Something with a deadline that the heap orders. */
export interface Timed {
  /** Monotonic time in milliseconds at which it is due. Set by the heap. */
  deadline: number;
  /** Position in the heap, or -1 when not scheduled. Owned by the heap. */
  heapIndex: number;
}

/** A min-heap of {@linkcode Timed} entries ordered by (deadline, insertion order). */
export class DeadlineHeap<T extends Timed> {
  #items: T[] = [];
  #deadlines = new Float64Array(1024);
  /** Tie-breakers: a counter, so equal deadlines run in the order they were scheduled. */
  #seqs = new Float64Array(1024);
  #seq = 0;

  /** Number of scheduled entries. */
  get size(): number {
    return this.#items.length;
  }

  /** The earliest entry, or `undefined` when empty. */
  peek(): T | undefined {
    return this.#items[0];
  }

  /** The order key of the earliest entry: its tie-breaker among equal deadlines. */
  firstSeq(): number {
    return this.#seqs[0];
  }

  /**
   * Schedules `item` at `deadline` (ms), or moves it there if already scheduled. `seq`
   * orders equal deadlines (default: the order of scheduling); give one from a shared
   * counter to order entries across several heaps.
   */
  schedule(item: T, deadline: number, seq: number = this.#seq++): void {
    item.deadline = deadline;
    let i = item.heapIndex;
    if (i >= 0) {
      const earlier = deadline < this.#deadlines[i];
      this.#deadlines[i] = deadline;
      this.#seqs[i] = seq;
      if (earlier) this.#up(i);
      else this.#down(i);
      return;
    }
    i = this.#items.length;
    if (i === this.#deadlines.length) this.#grow();
    this.#items.push(item);
    this.#deadlines[i] = deadline;
    this.#seqs[i] = seq;
    item.heapIndex = i;
    this.#up(i);
  }

  /** Removes `item` if scheduled; does nothing otherwise. */
  cancel(item: T): void {
    const i = item.heapIndex;
    if (i < 0) return;
    item.heapIndex = -1;
    const items = this.#items;
    const last = items.pop()!;
    const end = items.length;
    if (i === end) return;
    items[i] = last;
    this.#deadlines[i] = this.#deadlines[end];
    this.#seqs[i] = this.#seqs[end];
    last.heapIndex = i;
    if (i > 0 && this.#before(i, (i - 1) >> 1)) this.#up(i);
    else this.#down(i);
  }

  /** Removes and returns the earliest entry if it is due at `now` (deadline <= now). */
  popDue(now: number): T | undefined {
    const top = this.#items[0];
    if (top === undefined || this.#deadlines[0] > now) return undefined;
    this.cancel(top);
    return top;
  }

  #before(i: number, j: number): boolean {
    const a = this.#deadlines[i];
    const b = this.#deadlines[j];
    return a < b || (a === b && this.#seqs[i] < this.#seqs[j]);
  }

  /** Swaps positions `i` and `j` (entries and keys). */
  #swap(i: number, j: number): void {
    const items = this.#items;
    const a = items[i];
    const b = items[j];
    items[i] = b;
    items[j] = a;
    b.heapIndex = i;
    a.heapIndex = j;
    const deadlines = this.#deadlines;
    const d = deadlines[i];
    deadlines[i] = deadlines[j];
    deadlines[j] = d;
    const seqs = this.#seqs;
    const s = seqs[i];
    seqs[i] = seqs[j];
    seqs[j] = s;
  }

  #up(i: number): void {
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.#before(i, parent)) break;
      this.#swap(i, parent);
      i = parent;
    }
  }

  #down(i: number): void {
    const n = this.#items.length;
    for (;;) {
      let child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && this.#before(child + 1, child)) child++;
      if (!this.#before(child, i)) break;
      this.#swap(i, child);
      i = child;
    }
  }

  #grow(): void {
    const deadlines = new Float64Array(this.#deadlines.length * 2);
    deadlines.set(this.#deadlines);
    this.#deadlines = deadlines;
    const seqs = new Float64Array(this.#seqs.length * 2);
    seqs.set(this.#seqs);
    this.#seqs = seqs;
  }
}
