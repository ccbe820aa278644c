/**
 * Storage for held locks as a struct of arrays: a lock is a slot number, and its key (see
 * {@linkcode KeyIndex}), token and owner live in typed arrays, its lease deadline and heap position
 * in the {@linkcode IndexedHeap} that also hands out the slot numbers. A million held locks
 * are then not four million small objects: under half the memory, and nothing for the
 * garbage collector to walk (its pauses are what made mass expiry late).
 *
 * @module
 */

import { IndexedHeap } from "./indexed_heap.ts";
import { KeyIndex } from "./key_index.ts";

/** Held locks by slot, with their lease heap. `Q` is the per-lock waiter queue type. */
export class LockSlots<Q> {
  #index = new KeyIndex();
  /** Leases by slot; a held lock always has its lease scheduled here. */
  #leases = new IndexedHeap();
  /** Waiter queues of the slots that have waiters (most held locks have none). */
  #queues = new Map<number, Q>();
  #tokens = new BigUint64Array(this.#leases.capacity);
  /** Who holds each lock: an owner id (see the server's owner registry), 0 for unknown. */
  #owners = new Int32Array(this.#leases.capacity);

  /** Number of held locks. */
  get size(): number {
    return this.#index.size;
  }

  /** The slot of `key`, or -1. */
  find(key: string): number {
    return this.#index.find(key);
  }

  /** Adds a held lock; its lease is scheduled at (`deadline`, `seq`). */
  add(key: string, token: bigint, deadline: number, seq: number, owner = 0): number {
    const slot = this.#leases.allocate();
    if (slot >= this.#tokens.length) {
      const tokens = new BigUint64Array(this.#leases.capacity);
      tokens.set(this.#tokens);
      this.#tokens = tokens;
      const owners = new Int32Array(this.#leases.capacity);
      owners.set(this.#owners);
      this.#owners = owners;
    }
    this.#index.insert(key, slot);
    this.#tokens[slot] = token;
    this.#owners[slot] = owner;
    this.#leases.schedule(slot, deadline, seq);
    return slot;
  }

  /**
   * Removes a held lock (its lease leaves the heap); its slot is reused later. Only a lock
   * without waiters is removed (a key with waiters is never free), so it has no queue.
   */
  remove(slot: number): void {
    this.#index.remove(slot);
    this.#leases.free(slot);
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

  /** The owner of `slot`'s grant (0: unknown). */
  owner(slot: number): number {
    return this.#owners[slot];
  }

  /** Sets the owner of `slot`'s grant. */
  setOwner(slot: number, owner: number): void {
    this.#owners[slot] = owner;
  }

  /** The lease deadline of `slot`. */
  deadline(slot: number): number {
    return this.#leases.deadline(slot);
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
    const leases = this.#leases;
    for (let slot = 0; slot < leases.top; slot++) if (leases.scheduled(slot)) yield slot;
  }

  /** The slot whose lease ends first, or -1. */
  first(): number {
    return this.#leases.first();
  }

  /** The heap order key of `slot` (its tie-breaker among equal deadlines). */
  seq(slot: number): number {
    return this.#leases.seq(slot);
  }

  /** (Re)schedules the lease of `slot` at (`deadline`, `seq`). */
  schedule(slot: number, deadline: number, seq: number): void {
    this.#leases.schedule(slot, deadline, seq);
  }

  /** Drops every lock. */
  clear(): void {
    this.#index.clear();
    this.#queues.clear();
    this.#leases.clear();
  }
}
