/**
 * The lock rules of docs/protocol.md ("Semantics"), with no I/O: holders, FIFO waiters,
 * leases, wait limits and fencing tokens. Time comes from an injected monotonic clock;
 * leases sit in the heap of {@linkcode LockSlots} (held locks stored as a struct of arrays)
 * and wait limits in an {@linkcode IndexedHeap} of their own, so the rules can be tested
 * with a fake clock and a million leases cost no timers.
 *
 * Timing rule: a lease or wait limit with deadline `d` has run out at any time `now >= d`.
 * Every operation first settles everything due at `now` (in deadline order), so a late
 * timer never changes an outcome: an extend after the deadline gets `N`, a release at the
 * instant a waiter's limit runs out answers that waiter `T` first.
 *
 * @module
 */

import { IndexedHeap } from "./indexed_heap.ts";
import { KeyPage } from "./key_page.ts";
import { LockSlots } from "./lock_slots.ts";

/** A monotonic clock in milliseconds (e.g. `performance.now`). Wall-clock jumps must not show. */
export type Clock = () => number;

/** Where a queued acquire's outcome goes. `T` is the server's per-request context. */
export interface LockTableHooks<T> {
  /** The queued acquire `ticket` now holds `key` with fencing token `token`. */
  granted(ticket: T, key: string, token: bigint): void;
  /** The wait limit of `ticket` ran out: it gets `T` and can never be granted. */
  timedOut(ticket: T, key: string): void;
  /** `key` has a new holder or a new lease deadline (for replication); `owner` holds it. */
  held?(key: string, token: bigint, deadline: number, owner: number): void;
  /** `key` has no holder any more (released or expired with nobody waiting). */
  freed?(key: string, token: bigint): void;
}

/** What the table counts (for metrics): plain integers, incremented in place. */
export interface LockCounts {
  /** Grants, at once or to a waiter. */
  grants: number;
  /** Releases that released. */
  releases: number;
  /** Extends that extended. */
  extends: number;
  /** Leases that ran out. */
  expirations: number;
  /** Wait limits that ran out. */
  timeouts: number;
}

/** Options of {@linkcode LockTable}. */
export interface LockTableOptions<T> {
  /** Monotonic milliseconds. */
  clock: Clock;
  /** Issues the next fencing token; must be strictly increasing. May throw when exhausted. */
  nextToken: () => bigint;
  /** Outcomes of queued acquires and the change feed. */
  hooks: LockTableHooks<T>;
  /** Where grants, releases, extends, expirations and timeouts are counted. Default: its own. */
  counts?: LockCounts;
}

/** The FIFO queue of waiters of one held key (a key with waiters always has a holder). */
interface Queue {
  head: Waiter<unknown>;
  tail: Waiter<unknown>;
  /** How many waiters it has. */
  size: number;
}

/** A queued acquire. Returned by {@linkcode LockTable.acquire} so its owner can cancel it. */
export class Waiter<T> {
  /** Its id in the wait-limit heap, -1 if it has no wait limit or is gone. */
  limit = -1;
  /** Previous waiter in the key's FIFO queue. */
  prev: Waiter<unknown> | null = null;
  /** Next waiter in the key's FIFO queue. */
  next: Waiter<unknown> | null = null;
  /** The slot of the lock it waits for; -1 once granted, timed out or cancelled. */
  slot: number;
  /**
   * @param slot The slot of the lock it waits for.
   * @param ticket The caller's context for this request.
   * @param leaseMs Lease to start when granted, in milliseconds.
   * @param owner Who will hold it (an owner id, 0 for unknown).
   */
  constructor(slot: number, readonly ticket: T, readonly leaseMs: number, readonly owner = 0) {
    this.slot = slot;
  }
}

/** One holder of a snapshot: what a standby needs to keep a grant alive. */
export interface Holder {
  /** The key. */
  key: string;
  /** Fencing token of the current grant. */
  token: bigint;
  /** Lease deadline on the table's monotonic clock, in milliseconds. */
  deadline: number;
  /** Who holds it: an owner id, 0 for unknown. */
  owner: number;
}

/**
 * Holders, queues, leases and wait limits for every key (docs/protocol.md, "Semantics").
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
  #locks = new LockSlots<Queue>();
  /** Wait limits by waiter id (see {@linkcode Waiter.limit}). */
  #waitLimits = new IndexedHeap();
  /** The waiter of each wait-limit id. */
  #limited: (Waiter<T> | undefined)[] = [];
  /**
   * Orders equal deadlines across both heaps: the order things were scheduled in. It wraps
   * at 2^32 (stored in 32 bits), which can misorder two equal deadlines once in 4 billion
   * schedules: ties have no order in the rules anyway.
   */
  #seqCounter = 0;
  #clock: Clock;
  #nextToken: () => bigint;
  #hooks: LockTableHooks<T>;
  #waiters = 0;
  #counts: LockCounts;

  #nextSeq(): number {
    const seq = this.#seqCounter;
    this.#seqCounter = (seq + 1) >>> 0;
    return seq;
  }

  /** @param options Clock, token source and hooks. */
  constructor(options: LockTableOptions<T>) {
    this.#clock = options.clock;
    this.#nextToken = options.nextToken;
    this.#hooks = options.hooks;
    this.#counts = options.counts ??
      { grants: 0, releases: 0, extends: 0, expirations: 0, timeouts: 0 };
  }

  /** What the table counted so far. */
  get counts(): Readonly<LockCounts> {
    return this.#counts;
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
    const slot = this.#locks.first();
    const lease = slot < 0 ? Infinity : this.#locks.deadline(slot);
    const limit = this.#waitLimits.first();
    const wait = limit < 0 ? Infinity : this.#waitLimits.deadline(limit);
    const next = lease < wait ? lease : wait;
    return next === Infinity ? undefined : next;
  }

  /**
   * Settles every lease and wait limit due at the clock's current time, in deadline order:
   * an expired lease passes to the next waiter with a new token (its lease counted from
   * now), a run-out wait limit is answered `T`. Every operation calls this first.
   */
  advance(): void {
    const now = this.#clock();
    const locks = this.#locks;
    const limits = this.#waitLimits;
    for (;;) {
      const slot = locks.first();
      const limit = limits.first();
      const lease = slot < 0 ? Infinity : locks.deadline(slot);
      const wait = limit < 0 ? Infinity : limits.deadline(limit);
      if (lease > now && wait > now) return;
      const leaseFirst = lease < wait || (lease === wait && locks.seq(slot) < limits.seq(limit));
      if (leaseFirst) {
        this.#counts.expirations++;
        this.#handOver(slot, lease, now);
      } else {
        const waiter = this.#limited[limit]!;
        this.#unlimit(waiter);
        this.#timeOut(waiter);
      }
    }
  }

  /**
   * Acquires `key`: granted at once if free (whatever `waitMs`), otherwise queued behind the
   * current waiters, in FIFO order.
   *
   * @param key A valid key (docs/protocol.md).
   * @param leaseMs Lease in ms, > 0.
   * @param waitMs Longest queueing time in ms; 0 = no limit.
   * @param ticket The caller's context, handed back to the hooks.
   * @param owner Who will hold it (an owner id, 0 for unknown).
   * @returns The fencing token when granted at once, else the {@linkcode Waiter} (cancel it
   * with {@linkcode cancel} if the caller goes away).
   */
  acquire(key: string, leaseMs: number, waitMs: number, ticket: T, owner = 0): bigint | Waiter<T> {
    this.advance();
    const now = this.#clock();
    const slot = this.#locks.find(key);
    if (slot < 0) {
      const token = this.#nextToken();
      const deadline = now + leaseMs;
      this.#locks.add(key, token, deadline, this.#nextSeq(), owner);
      this.#hooks.held?.(key, token, deadline, owner);
      this.#counts.grants++;
      return token;
    }
    const waiter = new Waiter<T>(slot, ticket, leaseMs, owner);
    const queue = this.#locks.queue(slot);
    if (queue === null) this.#locks.setQueue(slot, { head: waiter, tail: waiter, size: 1 });
    else {
      queue.tail.next = waiter;
      waiter.prev = queue.tail;
      queue.tail = waiter;
      queue.size++;
    }
    this.#waiters++;
    if (waitMs > 0 && Number.isFinite(waitMs)) {
      const limit = this.#waitLimits.allocate();
      waiter.limit = limit;
      this.#limited[limit] = waiter;
      this.#waitLimits.schedule(limit, now + waitMs, this.#nextSeq());
    }
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
    const slot = this.#locks.find(key);
    if (slot < 0 || this.#locks.token(slot) !== token) return false;
    const now = this.#clock();
    this.#counts.releases++;
    this.#handOver(slot, now, now);
    return true;
  }

  /**
   * Resets the lease of the grant of `key` carrying `token` to `leaseMs` from now.
   *
   * @returns `true` if `token` still held `key` (reply `X`), `false` otherwise (reply `N`).
   */
  extend(key: string, token: bigint, leaseMs: number): boolean {
    this.advance();
    const slot = this.#locks.find(key);
    if (slot < 0 || this.#locks.token(slot) !== token) return false;
    const deadline = this.#clock() + leaseMs;
    this.#locks.schedule(slot, deadline, this.#nextSeq());
    this.#hooks.held?.(key, token, deadline, this.#locks.owner(slot));
    this.#counts.extends++;
    return true;
  }

  /** Moves grant `token`'s lease of `key` `ms` later; false if it no longer holds it or ran out. */
  prolong(key: string, token: bigint, ms: number): boolean {
    const slot = this.#locks.find(key);
    if (slot < 0 || this.#locks.token(slot) !== token) return false;
    // Ran out but not settled yet (a frozen lease timer, during a handoff): it stays over.
    if (this.#locks.deadline(slot) <= this.#clock()) return false;
    const deadline = this.#locks.deadline(slot) + ms;
    this.#locks.schedule(slot, deadline, this.#nextSeq());
    this.#hooks.held?.(key, token, deadline, this.#locks.owner(slot));
    return true;
  }

  /**
   * Removes a queued acquire whose requester went away (its connection closed). Does
   * nothing if it was already granted, timed out or cancelled. No hook is called.
   */
  cancel(waiter: Waiter<T>): void {
    if (waiter.slot < 0) return;
    this.#unlink(waiter);
    this.#unlimit(waiter);
  }

  /**
   * Installs a grant received from elsewhere (replication, a merge after split-brain):
   * `key` is held by `token` until `deadline` (ms, this table's clock) unless it already
   * has a grant with a higher token. Waiters, if any, stay queued behind the new holder.
   *
   * @param settle Settle what is due first, as every operation does (default). A merge
   * passes `false`: this table's own leases that ran out while its node was frozen must not
   * pass to waiters before the fresher state is in.
   * @param owner Who holds it (an owner id, 0 for unknown).
   * @returns `true` if the grant was installed.
   */
  restore(key: string, token: bigint, deadline: number, settle = true, owner = 0): boolean {
    if (settle) this.advance();
    if (deadline <= this.#clock()) return false;
    const slot = this.#locks.find(key);
    if (slot < 0) this.#locks.add(key, token, deadline, this.#nextSeq(), owner);
    else {
      if (this.#locks.token(slot) > token) return false;
      this.#locks.setToken(slot, token);
      this.#locks.setOwner(slot, owner);
      this.#locks.schedule(slot, deadline, this.#nextSeq());
    }
    this.#hooks.held?.(key, token, deadline, owner);
    return true;
  }

  /**
   * Drops the grant of `key` if it carries `token`, without handing it over (a replicated
   * release on a standby, which has no waiters). Returns whether it did.
   */
  forget(key: string, token: bigint): boolean {
    const slot = this.#locks.find(key);
    if (slot < 0 || this.#locks.token(slot) !== token || this.#locks.queue(slot) !== null) {
      return false;
    }
    this.#locks.remove(slot);
    this.#hooks.freed?.(key, token);
    return true;
  }

  /** Every queued acquire's ticket, each key's queue in order. Walks all keys: never on a hot path. */
  *queued(): IterableIterator<T> {
    for (const slot of this.#locks.slots()) {
      for (let w = this.#locks.queue(slot)?.head ?? null; w !== null; w = w.next) {
        yield w.ticket as T;
      }
    }
  }

  /**
   * Every current grant, for a snapshot. Walks all keys: never on a hot path.
   *
   * @param settle Settle what is due first (default); see {@linkcode restore}.
   */
  *holders(settle = true): IterableIterator<Holder> {
    if (settle) this.advance();
    for (const slot of this.#locks.slots()) yield this.#describe(slot);
  }

  /** The current grants held by `owner`. Walks all keys: never on a hot path. */
  *holdersOf(owner: number): IterableIterator<Holder> {
    for (const slot of this.#locks.slots()) {
      if (this.#locks.owner(slot) === owner) yield this.#describe(slot);
    }
  }

  /** Every owner id that holds a grant now. Walks all keys: never on a hot path. */
  owners(): Set<number> {
    const owners = new Set<number>();
    for (const slot of this.#locks.slots()) owners.add(this.#locks.owner(slot));
    return owners;
  }

  /** Drops every grant and waiter without any hook (a standby resetting before a snapshot). */
  clear(): void {
    for (const slot of this.#locks.slots()) {
      for (let w = this.#locks.queue(slot)?.head ?? null; w !== null; w = w.next) {
        w.slot = -1;
        (w as Waiter<T>).limit = -1;
      }
    }
    this.#locks.clear();
    this.#waitLimits.clear();
    this.#limited = [];
    this.#waiters = 0;
  }

  /** The current grant of `key`, if any. */
  holder(key: string): Holder | undefined {
    this.advance();
    const slot = this.#locks.find(key);
    return slot < 0 ? undefined : this.#describe(slot);
  }

  /**
   * The current grant of `key` as the table stands, without settling what is due (its
   * deadline may have passed by a few milliseconds until the lease timer runs): inspection.
   */
  peek(key: string): Holder | undefined {
    const slot = this.#locks.find(key);
    return slot < 0 ? undefined : this.#describe(slot);
  }

  /** How many acquires are queued behind the holder of `key` (0 if free). Without settling. */
  waitersOf(key: string): number {
    const slot = this.#locks.find(key);
    return slot < 0 ? 0 : this.#locks.queue(slot)?.size ?? 0;
  }

  /**
   * Up to `limit` held keys starting with `prefix`, after `after` (strictly) if given, in key
   * order (by UTF-16 code units: byte order for ASCII keys). Without settling. Walks every
   * held key, keeping only the `limit` smallest: for inspection, never on a hot path.
   */
  heldKeys(prefix: string, limit: number, after?: string): string[] {
    const page = new KeyPage(limit);
    for (const slot of this.#locks.slots()) {
      const key = this.#locks.key(slot);
      if (key.startsWith(prefix) && (after === undefined || key > after)) page.offer(key);
    }
    return page.keys();
  }

  #describe(slot: number): Holder {
    const locks = this.#locks;
    return {
      key: locks.key(slot),
      token: locks.token(slot),
      deadline: locks.deadline(slot),
      owner: locks.owner(slot),
    };
  }

  /**
   * The holder of `slot` is gone (released, or its lease ran out at `at`): grant the next
   * waiter, whose lease starts `now`, or free the key. A waiter whose wait limit ran out at
   * that same instant gets `T` rather than the lock. If the token source throws, nothing
   * has changed but those timeouts: the old grant and its lease stay as they were.
   */
  #handOver(slot: number, at: number, now: number): void {
    const locks = this.#locks;
    let next = locks.queue(slot)?.head as Waiter<T> | undefined;
    while (next !== undefined && next.limit >= 0 && this.#waitLimits.deadline(next.limit) <= at) {
      this.#unlimit(next);
      this.#timeOut(next);
      next = locks.queue(slot)?.head as Waiter<T> | undefined;
    }
    if (next === undefined) {
      const freed = this.#hooks.freed;
      // The key and token are read only for the hook (a standby's replication).
      if (freed !== undefined) freed(locks.key(slot), locks.token(slot));
      locks.remove(slot);
      return;
    }
    const key = locks.key(slot);
    const token = this.#nextToken();
    this.#unlink(next);
    this.#unlimit(next);
    locks.setToken(slot, token);
    locks.setOwner(slot, next.owner);
    const deadline = now + next.leaseMs;
    locks.schedule(slot, deadline, this.#nextSeq());
    this.#hooks.held?.(key, token, deadline, next.owner);
    this.#counts.grants++;
    this.#hooks.granted(next.ticket, key, token);
  }

  /** Takes the wait limit of `waiter`, if it has one, out of the heap. */
  #unlimit(waiter: Waiter<T>): void {
    const limit = waiter.limit;
    if (limit < 0) return;
    waiter.limit = -1;
    this.#limited[limit] = undefined;
    this.#waitLimits.free(limit);
  }

  #timeOut(waiter: Waiter<T>): void {
    const key = this.#locks.key(waiter.slot);
    this.#unlink(waiter);
    this.#counts.timeouts++;
    this.#hooks.timedOut(waiter.ticket, key);
  }

  #unlink(waiter: Waiter<unknown>): void {
    const slot = waiter.slot;
    const queue = this.#locks.queue(slot)!;
    queue.size--;
    if (waiter.prev === null) {
      if (waiter.next === null) this.#locks.setQueue(slot, null);
      else queue.head = waiter.next;
    } else waiter.prev.next = waiter.next;
    if (waiter.next === null) {
      if (waiter.prev !== null) queue.tail = waiter.prev;
    } else waiter.next.prev = waiter.prev;
    waiter.prev = waiter.next = null;
    waiter.slot = -1;
    this.#waiters--;
  }
}
