/**
 * The lock rules of SPEC §1, with no I/O: holders, FIFO waiters, leases, wait limits and
 * fencing tokens. Time comes from an injected monotonic clock and every lease and wait
 * limit sits in one {@linkcode DeadlineHeap}, so the rules can be tested with a fake clock
 * and a million leases cost no timers.
 *
 * Timing rule: a lease or wait limit with deadline `d` has run out at any time `now >= d`.
 * Every operation first settles everything due at `now` (in deadline order), so a late
 * timer never changes an outcome: an extend after the deadline gets `N`, a release at the
 * instant a waiter's limit runs out answers that waiter `T` first.
 *
 * @module
 */

import { DeadlineHeap, type Timed } from "./deadline_heap.ts";

/** A monotonic clock in milliseconds (e.g. `performance.now`). Wall-clock jumps must not show. */
export type Clock = () => number;

/** Where a queued acquire's outcome goes. `T` is the server's per-request context. */
export interface LockTableHooks<T> {
  /** The queued acquire `ticket` now holds `key` with fencing token `token`. */
  granted(ticket: T, key: string, token: bigint): void;
  /** The wait limit of `ticket` ran out: it gets `T` and can never be granted. */
  timedOut(ticket: T, key: string): void;
  /** `key` has a new holder or a new lease deadline (for replication). */
  held?(key: string, token: bigint, deadline: number): void;
  /** `key` has no holder any more (released or expired with nobody waiting). */
  freed?(key: string, token: bigint): void;
}

/** Options of {@linkcode LockTable}. */
export interface LockTableOptions<T> {
  /** Monotonic milliseconds. */
  clock: Clock;
  /** Issues the next fencing token; must be strictly increasing. May throw when exhausted. */
  nextToken: () => bigint;
  /** Outcomes of queued acquires and the change feed. */
  hooks: LockTableHooks<T>;
}

/** A key with a holder, and perhaps a queue of waiters. A key with waiters always has a holder. */
class Lock implements Timed {
  deadline = 0;
  seq = 0;
  heapIndex = -1;
  head: Waiter<unknown> | null = null;
  tail: Waiter<unknown> | null = null;
  constructor(readonly key: string, public token: bigint) {}
}

/** A queued acquire. Returned by {@linkcode LockTable.acquire} so its owner can cancel it. */
export class Waiter<T> implements Timed {
  /** Wait-limit deadline (ms); meaningful only while scheduled. */
  deadline = 0;
  /** Heap tie-breaker. */
  seq = 0;
  /** Heap position, -1 if the waiter has no wait limit or is gone. */
  heapIndex = -1;
  /** Previous waiter in the key's FIFO queue. */
  prev: Waiter<unknown> | null = null;
  /** Next waiter in the key's FIFO queue. */
  next: Waiter<unknown> | null = null;
  /** The lock it waits for; `null` once granted, timed out or cancelled. */
  lock: Lock | null;
  /**
   * @param lock The lock it waits for.
   * @param ticket The caller's context for this request.
   * @param leaseMs Lease to start when granted, in milliseconds.
   */
  constructor(lock: Lock, readonly ticket: T, readonly leaseMs: number) {
    this.lock = lock;
  }
}

type Entry = Lock | Waiter<unknown>;

/** One holder entry of a snapshot: what a standby needs to keep a grant alive. */
export interface HeldLock {
  /** The key. */
  key: string;
  /** Fencing token of the current grant. */
  token: bigint;
  /** Lease deadline on the table's monotonic clock, in milliseconds. */
  deadline: number;
}

/**
 * Holders, queues, leases and wait limits for every key (SPEC §1).
 *
 * @example Acquire, queue, release
 * ```ts
 * import { LockTable } from "./lock_table.ts";
 * let now = 0, token = 0n;
 * const table = new LockTable<string>({
 *   clock: () => now,
 *   nextToken: () => ++token,
 *   hooks: { granted: (who, key, t) => console.log(who, key, t), timedOut: () => {} },
 * });
 * table.acquire("k", 30_000, 0, "first"); // 1n: granted at once
 * table.acquire("k", 30_000, 0, "second"); // a Waiter: queued
 * table.release("k", 1n); // true; logs: second k 2n
 * ```
 */
export class LockTable<T> {
  #locks = new Map<string, Lock>();
  #heap = new DeadlineHeap<Entry>();
  #clock: Clock;
  #nextToken: () => bigint;
  #hooks: LockTableHooks<T>;
  #waiters = 0;

  /** @param options Clock, token source and hooks. */
  constructor(options: LockTableOptions<T>) {
    this.#clock = options.clock;
    this.#nextToken = options.nextToken;
    this.#hooks = options.hooks;
  }

  /** Number of keys with a holder. */
  get held(): number {
    return this.#locks.size;
  }

  /** Number of queued acquires. */
  get waiting(): number {
    return this.#waiters;
  }

  /** Earliest pending deadline (ms), or `undefined` if nothing is pending: when to call {@linkcode advance}. */
  nextDeadline(): number | undefined {
    return this.#heap.peek()?.deadline;
  }

  /**
   * Settles every lease and wait limit due at the clock's current time, in deadline order:
   * an expired lease passes to the next waiter with a new token (its lease counted from
   * now), a run-out wait limit is answered `T`. Every operation calls this first.
   */
  advance(): void {
    const now = this.#clock();
    for (let entry = this.#heap.peek(); entry && entry.deadline <= now; entry = this.#heap.peek()) {
      if (entry instanceof Lock) this.#handOver(entry, entry.deadline, now);
      else {
        this.#heap.cancel(entry);
        this.#timeOut(entry as Waiter<T>);
      }
    }
  }

  /**
   * Acquires `key`: granted at once if free (whatever `waitMs`), otherwise queued behind the
   * current waiters, in FIFO order.
   *
   * @param key A valid key (SPEC §2).
   * @param leaseMs Lease in ms, > 0.
   * @param waitMs Longest queueing time in ms; 0 = no limit.
   * @param ticket The caller's context, handed back to the hooks.
   * @returns The fencing token when granted at once, else the {@linkcode Waiter} (cancel it
   * with {@linkcode cancel} if the caller goes away).
   */
  acquire(key: string, leaseMs: number, waitMs: number, ticket: T): bigint | Waiter<T> {
    this.advance();
    const now = this.#clock();
    const lock = this.#locks.get(key);
    if (lock === undefined) {
      const token = this.#nextToken();
      const fresh = new Lock(key, token);
      this.#locks.set(key, fresh);
      this.#heap.schedule(fresh, now + leaseMs);
      this.#hooks.held?.(key, token, fresh.deadline);
      return token;
    }
    const waiter = new Waiter<T>(lock, ticket, leaseMs);
    if (lock.tail === null) lock.head = waiter;
    else {
      lock.tail.next = waiter;
      waiter.prev = lock.tail;
    }
    lock.tail = waiter;
    this.#waiters++;
    if (waitMs > 0 && Number.isFinite(waitMs)) this.#heap.schedule(waiter, now + waitMs);
    return waiter;
  }

  /**
   * Releases the grant of `key` carrying `token`; the lock passes at once to the head of the
   * queue with a new token.
   *
   * @returns `true` if `token` held `key` (reply `R`), `false` otherwise (reply `N`).
   */
  release(key: string, token: bigint): boolean {
    this.advance();
    const lock = this.#locks.get(key);
    if (lock === undefined || lock.token !== token) return false;
    const now = this.#clock();
    this.#handOver(lock, now, now);
    return true;
  }

  /**
   * Resets the lease of the grant of `key` carrying `token` to `leaseMs` from now.
   *
   * @returns `true` if `token` still held `key` (reply `X`), `false` otherwise (reply `N`).
   */
  extend(key: string, token: bigint, leaseMs: number): boolean {
    this.advance();
    const lock = this.#locks.get(key);
    if (lock === undefined || lock.token !== token) return false;
    this.#heap.schedule(lock, this.#clock() + leaseMs);
    this.#hooks.held?.(key, token, lock.deadline);
    return true;
  }

  /**
   * Removes a queued acquire whose requester went away (its connection closed). Does
   * nothing if it was already granted, timed out or cancelled. No hook is called.
   */
  cancel(waiter: Waiter<T>): void {
    const lock = waiter.lock;
    if (lock === null) return;
    this.#unlink(lock, waiter);
    this.#heap.cancel(waiter);
  }

  /**
   * Installs a grant received from elsewhere (replication, a merge after split-brain):
   * `key` is held by `token` until `deadline` (ms, this table's clock) unless it already
   * has a grant with a higher token. Waiters, if any, stay queued behind the new holder.
   *
   * @returns `true` if the grant was installed.
   */
  restore(key: string, token: bigint, deadline: number): boolean {
    this.advance();
    if (deadline <= this.#clock()) return false;
    let lock = this.#locks.get(key);
    if (lock !== undefined && lock.token > token) return false;
    if (lock === undefined) {
      lock = new Lock(key, token);
      this.#locks.set(key, lock);
    }
    lock.token = token;
    this.#heap.schedule(lock, deadline);
    this.#hooks.held?.(key, token, deadline);
    return true;
  }

  /**
   * Drops the grant of `key` if it carries `token`, without handing it over (a replicated
   * release on a standby, which has no waiters). Returns whether it did.
   */
  forget(key: string, token: bigint): boolean {
    const lock = this.#locks.get(key);
    if (lock === undefined || lock.token !== token || lock.head !== null) return false;
    this.#heap.cancel(lock);
    this.#locks.delete(key);
    this.#hooks.freed?.(key, token);
    return true;
  }

  /** Every queued acquire's ticket, each key's queue in order. Walks all keys: never on a hot path. */
  *queued(): IterableIterator<T> {
    for (const lock of this.#locks.values()) {
      for (let w = lock.head; w !== null; w = w.next) yield w.ticket as T;
    }
  }

  /** Every current grant, for a snapshot. Walks all keys: never on a hot path. */
  *holders(): IterableIterator<HeldLock> {
    this.advance();
    for (const lock of this.#locks.values()) {
      yield { key: lock.key, token: lock.token, deadline: lock.deadline };
    }
  }

  /** Drops every grant and waiter without any hook (a standby resetting before a snapshot). */
  clear(): void {
    for (const lock of this.#locks.values()) {
      this.#heap.cancel(lock);
      for (let w = lock.head; w !== null; w = w.next) {
        this.#heap.cancel(w);
        w.lock = null;
      }
    }
    this.#locks.clear();
    this.#waiters = 0;
  }

  /** The current grant of `key`, if any. */
  holder(key: string): HeldLock | undefined {
    this.advance();
    const lock = this.#locks.get(key);
    return lock && { key, token: lock.token, deadline: lock.deadline };
  }

  /**
   * The holder of `lock` is gone (released, or its lease ran out at `at`): grant the next
   * waiter, whose lease starts `now`, or free the key. A waiter whose wait limit ran out at
   * that same instant gets `T` rather than the lock. If the token source throws, nothing
   * has changed but those timeouts: the old grant and its lease stay as they were.
   */
  #handOver(lock: Lock, at: number, now: number): void {
    let next = lock.head as Waiter<T> | null;
    while (next !== null && next.heapIndex >= 0 && next.deadline <= at) {
      this.#heap.cancel(next);
      this.#timeOut(next);
      next = lock.head as Waiter<T> | null;
    }
    if (next === null) {
      this.#heap.cancel(lock);
      this.#locks.delete(lock.key);
      this.#hooks.freed?.(lock.key, lock.token);
      return;
    }
    const token = this.#nextToken();
    this.#unlink(lock, next);
    this.#heap.cancel(next);
    lock.token = token;
    this.#heap.schedule(lock, now + next.leaseMs);
    this.#hooks.held?.(lock.key, token, lock.deadline);
    this.#hooks.granted(next.ticket, lock.key, token);
  }

  #timeOut(waiter: Waiter<T>): void {
    const lock = waiter.lock!;
    this.#unlink(lock, waiter);
    this.#hooks.timedOut(waiter.ticket, lock.key);
  }

  #unlink(lock: Lock, waiter: Waiter<unknown>): void {
    if (waiter.prev === null) lock.head = waiter.next;
    else waiter.prev.next = waiter.next;
    if (waiter.next === null) lock.tail = waiter.prev;
    else waiter.next.prev = waiter.prev;
    waiter.prev = waiter.next = null;
    waiter.lock = null;
    this.#waiters--;
  }
}
