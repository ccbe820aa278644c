/**
 * Storage for held locks as a struct of arrays: a lock is a slot number, and its key (see
 * {@linkcode KeyIndex}), token, lease deadline and place in the lease heap live in typed
 * arrays. A million held locks are then not four million small objects: under half the
 * memory, and nothing for the garbage collector to walk (its pauses are what made mass
 * expiry late).
 *
 * The lease heap is a binary min-heap of slots ordered by (deadline, seq), kept here because
 * it reads the deadlines straight from these arrays.
 *
 * @module
 */

import { KeyIndex } from "./key_index.ts";

/**
 * Heap-position value of a slot whose lease is not in the heap. A free slot's position
 * holds the free list's next link instead, encoded as `-2 - next` (`-1` when it is last),
 * so any negative position means "not scheduled".
 */
const NOT_SCHEDULED = -1;

/** Held locks by slot, with their lease heap. `Q` is the per-lock waiter queue type. */
export class LockSlots<Q> {
  #index = new KeyIndex();
  /** Waiter queues of the slots that have waiters (most held locks have none). */
  #queues = new Map<number, Q>();
  #tokens = new BigUint64Array(1024);
  #deadlines = new Float64Array(1024);
  /** Tie-breakers of equal deadlines (the scheduling order, modulo 2^32). */
  #seqs = new Uint32Array(1024);
  #position = new Int32Array(1024).fill(NOT_SCHEDULED);
  #heap = new Int32Array(1024);
  #heapSize = 0;
  /** First free slot below #next (linked through #position), or -1. */
  #freeHead = -1;
  #next = 0;

  /** Number of held locks. */
  get size(): number {
    return this.#index.size;
  }

  /** The slot of `key`, or -1. */
  find(key: string): number {
    return this.#index.find(key);
  }

  /** Adds a held lock; its lease is scheduled at (`deadline`, `seq`). */
  add(key: string, token: bigint, deadline: number, seq: number): number {
    let slot = this.#freeHead;
    if (slot >= 0) {
      this.#freeHead = -2 - this.#position[slot];
      this.#position[slot] = NOT_SCHEDULED;
    } else {
      slot = this.#next++;
      if (slot === this.#tokens.length) this.#grow();
    }
    this.#index.insert(key, slot);
    this.#tokens[slot] = token;
    this.schedule(slot, deadline, seq);
    return slot;
  }

  /**
   * Removes a held lock (its lease leaves the heap); its slot is reused later. Only a lock
   * without waiters is removed (a key with waiters is never free), so it has no queue.
   */
  remove(slot: number): void {
    this.#unschedule(slot);
    this.#index.remove(slot);
    this.#position[slot] = -2 - this.#freeHead;
    this.#freeHead = slot;
  }

  /** The key of `slot`. */
  key(slot: number): string {
    return this.#index.keyOf(slot);
  }

  /** The fencing token of `slot`. */
  token(slot: number): bigint {
    return this.#tokens[slot];
  }

  /** Sets the fencing token of `slot`. */
  setToken(slot: number, token: bigint): void {
    this.#tokens[slot] = token;
  }

  /** The lease deadline of `slot`. */
  deadline(slot: number): number {
    return this.#deadlines[slot];
  }

  /** The waiter queue of `slot`, or `null`. */
  queue(slot: number): Q | null {
    return this.#queues.get(slot) ?? null;
  }

  /** Sets the waiter queue of `slot`. */
  setQueue(slot: number, queue: Q | null): void {
    if (queue === null) this.#queues.delete(slot);
    else this.#queues.set(slot, queue);
  }

  /** Every held slot (order unspecified). */
  *slots(): IterableIterator<number> {
    // Every held lock has its lease in the heap: a scheduled slot is a held one.
    for (let slot = 0; slot < this.#next; slot++) {
      if (this.#position[slot] >= 0) yield slot;
    }
  }

  /** The slot whose lease ends first, or -1. */
  first(): number {
    return this.#heapSize > 0 ? this.#heap[0] : -1;
  }

  /** The heap order key of `slot` (its tie-breaker among equal deadlines). */
  seq(slot: number): number {
    return this.#seqs[slot];
  }

  /** (Re)schedules the lease of `slot` at (`deadline`, `seq`). */
  schedule(slot: number, deadline: number, seq: number): void {
    const position = this.#position;
    let i = position[slot];
    const earlier = i < 0 || deadline < this.#deadlines[slot];
    this.#deadlines[slot] = deadline;
    this.#seqs[slot] = seq;
    if (i < 0) {
      i = this.#heapSize++;
      this.#heap[i] = slot;
      position[slot] = i;
    }
    if (earlier) this.#up(i);
    else this.#down(i);
  }

  /** Drops every lock. */
  clear(): void {
    this.#index.clear();
    this.#queues.clear();
    this.#freeHead = -1;
    this.#next = 0;
    this.#heapSize = 0;
    this.#position.fill(NOT_SCHEDULED);
  }

  #unschedule(slot: number): void {
    const position = this.#position;
    const i = position[slot];
    if (i < 0) return;
    position[slot] = NOT_SCHEDULED;
    const end = --this.#heapSize;
    if (i === end) return;
    const last = this.#heap[end];
    this.#heap[i] = last;
    position[last] = i;
    if (i > 0 && this.#before(last, this.#heap[(i - 1) >> 1])) this.#up(i);
    else this.#down(i);
  }

  #before(a: number, b: number): boolean {
    const da = this.#deadlines[a];
    const db = this.#deadlines[b];
    return da < db || (da === db && this.#seqs[a] < this.#seqs[b]);
  }

  #up(i: number): void {
    const heap = this.#heap;
    const position = this.#position;
    const slot = heap[i];
    while (i > 0) {
      const parent = (i - 1) >> 1;
      const above = heap[parent];
      if (!this.#before(slot, above)) break;
      heap[i] = above;
      position[above] = i;
      i = parent;
    }
    heap[i] = slot;
    position[slot] = i;
  }

  #down(i: number): void {
    const heap = this.#heap;
    const position = this.#position;
    const n = this.#heapSize;
    const slot = heap[i];
    for (;;) {
      let child = 2 * i + 1;
      if (child >= n) break;
      if (child + 1 < n && this.#before(heap[child + 1], heap[child])) child++;
      const below = heap[child];
      if (!this.#before(below, slot)) break;
      heap[i] = below;
      position[below] = i;
      i = child;
    }
    heap[i] = slot;
    position[slot] = i;
  }

  #grow(): void {
    const size = this.#tokens.length * 2;
    const tokens = new BigUint64Array(size);
    tokens.set(this.#tokens);
    this.#tokens = tokens;
    const deadlines = new Float64Array(size);
    deadlines.set(this.#deadlines);
    this.#deadlines = deadlines;
    const seqs = new Uint32Array(size);
    seqs.set(this.#seqs);
    this.#seqs = seqs;
    const position = new Int32Array(size).fill(NOT_SCHEDULED);
    position.set(this.#position);
    this.#position = position;
    const heap = new Int32Array(size);
    heap.set(this.#heap);
    this.#heap = heap;
  }
}
