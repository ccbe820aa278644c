/**
 * The one timer structure of the engine: an indexed binary min-heap of integer ids ordered by
 * (deadline, seq), with the ids themselves allocated here. Leases are scheduled by lock slot
 * and wait limits by waiter id, each in a heap of their own, so a million leases cost one
 * `setTimeout` and moving or removing an entry is O(log n).
 *
 * Everything lives in typed arrays indexed by id (deadline, tie-breaker, heap position) and
 * by heap position (the id there): sifting compares contiguous numbers instead of reading a
 * million scattered objects, and there is nothing for the garbage collector to walk.
 *
 * @module
 */

/** Position of an allocated id that is not in the heap. */
const UNSCHEDULED = -1;
/** Free ids are linked through their position, encoded as `FREE - next` (next -1: the last). */
const FREE = -3;

/**
 * A min-heap of ids by (deadline, seq) that also hands out the ids.
 *
 * @example
 * ```ts ignore
 * const heap = new IndexedHeap();
 * const id = heap.allocate();
 * heap.schedule(id, 1500, 0); // due at 1500 ms
 * heap.first(); // id
 * heap.remove(id);
 * heap.free(id);
 * ```
 */
export class IndexedHeap {
  #deadlines: Float64Array;
  /** Tie-breakers of equal deadlines, modulo 2^32. */
  #seqs: Uint32Array;
  /** Per id: its heap position, {@linkcode UNSCHEDULED}, or a free-list link. */
  #position: Int32Array;
  /** Per heap position: the id there. */
  #heap: Int32Array;
  #size = 0;
  /** Ids below this were handed out at some point. */
  #top = 0;
  #freeHead = -1;
  #seq = 0;

  /** @param capacity Ids to make room for before the first growth (doubles as needed). */
  constructor(capacity = 1024) {
    this.#deadlines = new Float64Array(capacity);
    this.#seqs = new Uint32Array(capacity);
    this.#position = new Int32Array(capacity).fill(UNSCHEDULED);
    this.#heap = new Int32Array(capacity);
  }

  /** Number of scheduled ids. */
  get size(): number {
    return this.#size;
  }

  /** Room for ids below this without growing. */
  get capacity(): number {
    return this.#position.length;
  }

  /** Every id handed out so far is below this (free ones included). */
  get top(): number {
    return this.#top;
  }

  /** A free id (reused before new ones), not scheduled. */
  allocate(): number {
    let id = this.#freeHead;
    if (id >= 0) this.#freeHead = FREE - this.#position[id];
    else {
      id = this.#top++;
      if (id === this.#position.length) this.#grow();
    }
    this.#position[id] = UNSCHEDULED;
    return id;
  }

  /** Gives `id` back (taking it out of the heap first if it is scheduled). */
  free(id: number): void {
    this.remove(id);
    this.#position[id] = FREE - this.#freeHead;
    this.#freeHead = id;
  }

  /** The id due first, or -1 when the heap is empty. */
  first(): number {
    return this.#size > 0 ? this.#heap[0] : -1;
  }

  /** The deadline `id` was last scheduled at. */
  deadline(id: number): number {
    return this.#deadlines[id];
  }

  /** The tie-breaker `id` was last scheduled with. */
  seq(id: number): number {
    return this.#seqs[id];
  }

  /** Whether `id` is in the heap. */
  scheduled(id: number): boolean {
    return this.#position[id] >= 0;
  }

  /** The heap position of `id`, or -1 when it is not scheduled (for tests). */
  position(id: number): number {
    const i = this.#position[id];
    return i >= 0 ? i : -1;
  }

  /**
   * Schedules `id` at (`deadline`, `seq`), or moves it there. `seq` orders equal deadlines;
   * by default the order of scheduling. Give values from one counter to order entries of
   * several heaps alike.
   */
  schedule(id: number, deadline: number, seq: number = this.#seq++ >>> 0): void {
    const position = this.#position;
    let i = position[id];
    const earlier = i < 0 || deadline < this.#deadlines[id];
    this.#deadlines[id] = deadline;
    this.#seqs[id] = seq;
    if (i < 0) {
      i = this.#size++;
      this.#heap[i] = id;
      position[id] = i;
    }
    if (earlier) this.#up(i);
    else this.#down(i);
  }

  /** Takes `id` out of the heap; does nothing if it is not scheduled. */
  remove(id: number): void {
    const position = this.#position;
    const i = position[id];
    if (i < 0) return;
    position[id] = UNSCHEDULED;
    const end = --this.#size;
    if (i === end) return;
    const last = this.#heap[end];
    this.#heap[i] = last;
    position[last] = i;
    if (i > 0 && this.#before(last, this.#heap[(i - 1) >> 1])) this.#up(i);
    else this.#down(i);
  }

  /** Empties the heap and forgets every id. */
  clear(): void {
    this.#size = 0;
    this.#top = 0;
    this.#freeHead = -1;
    this.#position.fill(UNSCHEDULED);
  }

  #before(a: number, b: number): boolean {
    const da = this.#deadlines[a];
    const db = this.#deadlines[b];
    return da < db || (da === db && this.#seqs[a] < this.#seqs[b]);
  }

  #up(i: number): void {
    const heap = this.#heap;
    const position = this.#position;
    const id = heap[i];
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const above = heap[parent];
      if (!this.#before(id, above)) break;
      heap[i] = above;
      position[above] = i;
      i = parent;
    }
    heap[i] = id;
    position[id] = i;
  }

  #down(i: number): void {
    const heap = this.#heap;
    const position = this.#position;
    const n = this.#size;
    const id = heap[i];
    for (;;) {
      let child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && this.#before(heap[child + 1], heap[child])) child++;
      const below = heap[child];
      if (!this.#before(below, id)) break;
      heap[i] = below;
      position[below] = i;
      i = child;
    }
    heap[i] = id;
    position[id] = i;
  }

  #grow(): void {
    const size = this.#position.length * 2;
    const deadlines = new Float64Array(size);
    deadlines.set(this.#deadlines);
    this.#deadlines = deadlines;
    const seqs = new Uint32Array(size);
    seqs.set(this.#seqs);
    this.#seqs = seqs;
    const position = new Int32Array(size).fill(UNSCHEDULED);
    position.set(this.#position);
    this.#position = position;
    const heap = new Int32Array(size);
    heap.set(this.#heap);
    this.#heap = heap;
  }
}
