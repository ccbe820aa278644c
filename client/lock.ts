/**
 * A held lock: its key, fencing token and lease, an `AbortSignal` that fires when the lock is
 * known or suspected lost, renewal (`extend`, or automatic), and `release` (also through
 * `await using`).
 *
 * @module
 */

import { LockLostError, LockUnavailableError } from "./errors.ts";
import { toMs } from "./options.ts";
import { type TimerEntry, timers } from "./timer.ts";

/** What a {@linkcode Lock} needs from its client. Internal. */
export interface LockOwner {
  /** Sends `X`; resolves `true` on `X`, `false` on `N`. */
  extend(key: string, token: bigint, leaseMs: number): Promise<boolean>;
  /** Sends `R` with the retry policy of docs/client.md. */
  release(key: string, token: bigint): Promise<void>;
  /** Forgets a lock that is released or lost. */
  forget(lock: LockHandle): void;
  /** Passes a public result through the client's close (its rejection waits for the end). */
  settle<T>(promise: Promise<T>): Promise<T>;
}

/** Options of a lock's life, from the acquire. Internal. */
export interface LockState {
  /** Lease in ms. */
  leaseMs: number;
  /**
   * Earliest time (ms, `performance.now()`) at which the server can have granted it: its
   * lease began no earlier, so expiry estimates from here are on the safe side.
   */
  grantedAt: number;
  /** Renew at a third of the lease while held. */
  autoExtend: boolean;
}

/** How early before the estimated end of a lease `signal` fires: 5 % of it, at most 1 s. */
function safetyMargin(leaseMs: number): number {
  return Math.min(1000, leaseMs * 0.05);
}

/** Why `signal` fires when a lease nears its end unrenewed. */
const EXPIRING = "its lease ran out before a renewal was confirmed";

/** One of a lock's two timers (the expiry warning, the renewal), as a timer entry. */
class LockTimer implements TimerEntry {
  due = 0;
  slot = -1;
  seq = 0;
  #lock: LockHandle;
  #renewal: boolean;

  constructor(lock: LockHandle, renewal: boolean) {
    this.#lock = lock;
    this.#renewal = renewal;
  }

  fire(): void {
    if (this.#renewal) this.#lock.renewNow();
    else this.#lock.lose(EXPIRING, false);
  }
}

/**
 * A granted lock. Keep using the protected resource only while `signal` has not fired, and
 * pass `token` to the resource so it can refuse stale writers (docs/cluster.md, "Consistency, stated plainly"). Obtained from
 * `LockClient.acquire`, `tryAcquire` or `withLock`.
 *
 * @example Holding a lock
 * ```ts
 * import { LockClient } from "@lockd/client";
 * const client = new LockClient("127.0.0.1:7321");
 * const lock = await client.acquire("orders:17", { lease: 30 });
 * try {
 *   await fetch("https://example.com/orders/17", {
 *     method: "PUT",
 *     headers: { "fencing-token": String(lock.token) },
 *     signal: lock.signal,
 *   });
 * } finally {
 *   await lock.release();
 *   await client.close();
 * }
 * ```
 */
export interface Lock extends AsyncDisposable {
  /** The key. */
  readonly key: string;
  /** This grant's fencing token: greater than every token issued before it (u64). */
  readonly token: bigint;
  /** The current lease, in seconds (as asked by the acquire or the last extend). */
  readonly lease: number;
  /**
   * Fires when the lock is known lost (an extend answered `N`) or suspected lost (the lease
   * is about to run out and no renewal proved it, or every connection of the client is
   * down). Its reason is a `LockLostError`. It does not fire on `release()`.
   */
  readonly signal: AbortSignal;
  /** Whether `release()` was called. */
  readonly released: boolean;
  /**
   * Resets the lease to `lease` seconds from now (default: the current lease).
   *
   * @param lease Seconds, > 0, fractions allowed.
   * @throws {LockLostError} The server answered `N`, now or before: this grant no longer
   * holds the key (`signal` fires too). After a loss that was only suspected, the server
   * is asked, and may still hold the lock.
   * @throws {LockUnavailableError} No connection could carry the request.
   * @throws {LockRejectedError} The server refused it (e.g. above its `--max-lease`).
   * @throws {TypeError} For a lease that is not a positive number, or after `release()`.
   *
   * @example Keep a lock for another minute
   * ```ts
   * import { LockClient } from "@lockd/client";
   * const client = new LockClient("127.0.0.1:7321");
   * const lock = await client.acquire("batch", { lease: 60 });
   * await lock.extend(60); // 60 s from now
   * await lock.release();
   * await client.close();
   * ```
   */
  extend(lease?: number): Promise<void>;
  /**
   * Releases the lock. Renewal stops at once (synchronously); the release is retried for
   * 5 s every 200 ms if no connection can carry it (docs/client.md). An `N` reply also ends it: the
   * lock is gone either way. Calling it again returns the same promise.
   *
   * @throws {LockUnavailableError} If no node could be reached for 5 s (the lease will
   * free the lock).
   *
   * @example Release in a finally block
   * ```ts
   * import { LockClient } from "@lockd/client";
   * const client = new LockClient("127.0.0.1:7321");
   * const lock = await client.acquire("k");
   * try {
   *   // ... work ...
   * } finally {
   *   await lock.release();
   *   await client.close();
   * }
   * ```
   */
  release(): Promise<void>;
  /**
   * Forgets the lock on this client's side: no more renewal, `signal` no longer fires on the
   * lease's end, and `close()` does not release it. The lease runs on the server: another
   * process given the key and token can `extend` or `release` it with
   * `LockClient.extend(key, token, lease)` / `LockClient.release(key, token)`. This handle's
   * `extend()` and `release()` still send their requests, scheduling nothing; the end of an
   * `await using` block no longer releases it.
   *
   * @example Hand a lock over to another process
   * ```ts
   * import { LockClient } from "@lockd/client";
   * const client = new LockClient("127.0.0.1:7321");
   * const lock = await client.acquire("deploy", { lease: 600 });
   * lock.detach();
   * console.log(`LOCK_KEY=${lock.key} LOCK_TOKEN=${lock.token}`);
   * await client.close(); // the lock stays held for its lease
   * ```
   */
  detach(): void;
}

/** The client's implementation of {@linkcode Lock}. Internal. */
export class LockHandle implements Lock {
  /** The key. */
  readonly key: string;
  /** This grant's fencing token: greater than every token issued before it. */
  readonly token: bigint;
  #owner: LockOwner;
  #leaseMs: number;
  #expiresAt: number;
  #autoExtend: boolean;
  /** Made when `signal` is first asked for: most locks are released before anyone does. */
  #controller: AbortController | undefined;
  /** Why the lock is lost (known or suspected), once it is: `signal`'s reason. */
  #lost: LockLostError | undefined;
  /** The server answered `N`: lost for sure, not only suspected. */
  #knownLost = false;
  #expiryTimer: LockTimer = new LockTimer(this, false);
  #renewTimer: LockTimer | undefined;
  #released: Promise<void> | undefined;
  #detached = false;

  /** Made by the client on a grant; not for direct use. */
  constructor(key: string, token: bigint, owner: LockOwner, state: LockState) {
    this.key = key;
    this.token = token;
    this.#owner = owner;
    this.#leaseMs = state.leaseMs;
    this.#autoExtend = state.autoExtend;
    this.#expiresAt = state.grantedAt + state.leaseMs;
    this.#schedule();
  }

  /** The current lease, in seconds (as asked by the acquire or the last extend). */
  get lease(): number {
    return this.#leaseMs / 1000;
  }

  /**
   * Fires when the lock is known lost (an extend answered `N`) or suspected lost (the lease
   * is about to run out and no renewal proved it, or every connection of the client is
   * down). Its reason is a {@linkcode LockLostError}. It does not fire on `release()`.
   */
  get signal(): AbortSignal {
    if (this.#controller === undefined) {
      this.#controller = new AbortController();
      if (this.#lost !== undefined) this.#controller.abort(this.#lost);
    }
    return this.#controller.signal;
  }

  /** Whether `release()` was called. */
  get released(): boolean {
    return this.#released !== undefined;
  }

  /**
   * Resets the lease to `lease` seconds from now (default: the current lease).
   *
   * @param lease Seconds, > 0, fractions allowed.
   * @throws {LockLostError} The server answered `N`, now or before: this grant no longer
   * holds the key (`signal` fires too). After a loss that was only suspected, the server
   * is asked, and may still hold the lock.
   * @throws {LockUnavailableError} No connection could carry the request.
   * @throws {LockRejectedError} The server refused it (e.g. above its `--max-lease`).
   * @throws {TypeError} For a lease that is not a positive number, or after `release()`.
   */
  extend(lease: number = this.lease): Promise<void> {
    return this.#owner.settle(this.#extendBy(lease));
  }

  async #extendBy(lease: number): Promise<void> {
    if (!(lease > 0) || !Number.isFinite(lease)) {
      throw new TypeError(`lease must be a positive number of seconds, got ${lease}`);
    }
    if (this.#released !== undefined) throw new TypeError(`Lock "${this.key}" was released`);
    // Known lost (the server answered N): no token ever holds its key again. Only suspected
    // lost (the lease was about to run out unproven): the server knows, so ask it.
    if (this.#knownLost) throw this.#lost;
    await this.#extend(toMs(lease, "lease"));
  }

  /**
   * Releases the lock. Renewal stops at once (synchronously); the release is retried for
   * 5 s every 200 ms if no connection can carry it (docs/client.md). An `N` reply also ends it: the
   * lock is gone either way. Calling it again returns the same promise.
   *
   * @throws {LockUnavailableError} If no node could be reached for 5 s (the lease will
   * free the lock).
   */
  release(): Promise<void> {
    if (this.#released === undefined) {
      this.#stopTimers();
      this.#owner.forget(this);
      this.#released = this.#owner.release(this.key, this.token);
    }
    return this.#released;
  }

  /** Forgets the lock on this client's side (see {@linkcode Lock.detach}). */
  detach(): void {
    this.#detached = true;
    this.#stopTimers();
    this.#owner.forget(this);
  }

  /** Releases the lock at the end of an `await using` block (not once detached). */
  [Symbol.asyncDispose](): Promise<void> {
    if (this.#detached) return Promise.resolve();
    return this.release();
  }

  /**
   * Marks the lock lost: `signal` fires with a {@linkcode LockLostError}. A lock only
   * suspected lost (`known` false: its lease may have run out) stays with the client, so
   * `close()` still releases it if the server holds it after all. Internal.
   */
  lose(why: string, known = true): void {
    this.#stopTimers();
    if (known && !this.#knownLost) {
      this.#knownLost = true;
      this.#owner.forget(this);
    }
    if (this.#lost === undefined) {
      this.#lost = new LockLostError(this.key, this.token, why);
      this.#controller?.abort(this.#lost);
    }
  }

  /** Stops timers without releasing (the client is closing). Internal. */
  stop(): void {
    this.#stopTimers();
  }

  async #extend(leaseMs: number): Promise<void> {
    const sentAt = performance.now();
    const held = await this.#owner.extend(this.key, this.token, leaseMs);
    if (this.#released !== undefined) return;
    if (!held) {
      const why = "the server no longer holds it for this token (extend answered N)";
      const suspected = this.#lost !== undefined;
      this.lose(why);
      throw suspected ? new LockLostError(this.key, this.token, why) : this.#lost;
    }
    this.#leaseMs = leaseMs;
    this.#expiresAt = sentAt + leaseMs;
    // Once the signal fired it stays fired: the caller was told to stop, so no renewal.
    if (this.#lost === undefined && !this.#detached) this.#schedule();
  }

  #schedule(): void {
    // Times are absolute: a timer entry is moved, not remade, and the clock is not read.
    timers.schedule(this.#expiryTimer, this.#expiresAt - safetyMargin(this.#leaseMs));
    // Renew once a third of the lease has gone, counted from its estimated start.
    if (this.#autoExtend) this.#renewAt(this.#expiresAt - (this.#leaseMs * 2) / 3);
  }

  /** A renewal at `at` (`performance.now()` ms); one already due goes out now. */
  #renewAt(at: number): void {
    this.#renewTimer ??= new LockTimer(this, true);
    timers.schedule(this.#renewTimer, at);
  }

  /** The renewal timer fired. Internal. */
  renewNow(): void {
    this.#extend(this.#leaseMs).catch((error) => {
      // Detached meanwhile: no more renewal (nothing else would stop it, close() included).
      if (this.#released !== undefined || this.#lost !== undefined || this.#detached) return;
      // Not proven yet (no connection, a node failing over): try again soon, until the
      // expiry timer gives up and fires the signal.
      if (error instanceof LockUnavailableError || !(error instanceof LockLostError)) {
        this.#renewAt(performance.now() + Math.min(1000, this.#leaseMs / 10));
      }
    });
  }

  #stopTimers(): void {
    timers.cancel(this.#expiryTimer);
    if (this.#renewTimer !== undefined) timers.cancel(this.#renewTimer);
  }
}
