/**
 * Reply order per (op, key) (docs/protocol.md, "Ordering and pipelining"): replies with the
 * same (op, key) on one connection go out in the order of their requests, even when an
 * earlier one (a queued acquire) is decided later. Shared by the server's sessions and the
 * bridge's. Each id (a key, or `op key`) has a FIFO of reserved places; a decided place goes
 * out once every place before it has.
 *
 * @module
 */

/** A reserved place for one reply: decided once `reply` is set. */
export interface OrderedReply {
  /** The reply line, once decided; `undefined` while it is not. */
  reply: string | undefined;
}

/** A FIFO with a moving head: taking from it is O(1), not O(n) as `shift` is. */
class Fifo<E> {
  items: E[] = [];
  head = 0;

  get empty(): boolean {
    return this.head === this.items.length;
  }

  first(): E | undefined {
    return this.items[this.head];
  }

  take(): void {
    this.items[this.head++] = undefined as E;
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
  }

  *[Symbol.iterator](): IterableIterator<E> {
    for (let i = this.head; i < this.items.length; i++) yield this.items[i];
  }
}

/** The reserved reply places of one connection, per id, in request order. */
export class ReplyOrder<E extends OrderedReply> {
  /** Made on first use: most connections never queue, and an idle one should cost little. */
  #queues: Map<string, Fifo<E>> | undefined;

  /** Whether `id` has a place not yet sent (a later reply of `id` must wait behind it). */
  has(id: string): boolean {
    return this.#queues !== undefined && this.#queues.has(id);
  }

  /** Reserves the next place of `id` for `entry` (decided or not). */
  push(id: string, entry: E): void {
    const queues = this.#queues ??= new Map();
    let queue = queues.get(id);
    if (queue === undefined) queues.set(id, queue = new Fifo());
    queue.items.push(entry);
  }

  /** Hands every decided entry at the head of `id`'s queue to `send`, in order. */
  drain(id: string, send: (entry: E) => void): void {
    const queue = this.#queues?.get(id);
    if (queue === undefined) return;
    for (let first = queue.first(); first !== undefined && first.reply !== undefined;) {
      queue.take();
      send(first);
      first = queue.first();
    }
    if (queue.empty) this.#queues!.delete(id);
  }

  /** Every entry still in a queue (decided or not), each id's in order. */
  *entries(): IterableIterator<E> {
    if (this.#queues === undefined) return;
    for (const queue of this.#queues.values()) yield* queue;
  }

  /** Forgets every place. */
  clear(): void {
    this.#queues = undefined;
  }
}
