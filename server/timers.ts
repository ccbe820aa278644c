/**
 * One timer for all leases and wait limits: arms a single `setTimeout` for the lock table's
 * earliest deadline and settles everything due when it fires. A million leases cost one
 * timer, and an idle server with a million leases does no work until the next one is due.
 *
 * @module
 */

const MAX_DELAY_MS = 2 ** 31 - 1;

/** What the ticker drives: the lock table's view of time. */
export interface Deadlines {
  /** Earliest pending deadline in ms on the monotonic clock, or `undefined`. */
  nextDeadline(): number | undefined;
  /** Settles everything due now. */
  advance(): void;
}

/** Options of {@linkcode Ticker}. */
export interface TickerOptions {
  /** The same monotonic clock as the table's (ms). */
  clock: () => number;
  /** Called after each tick that settled something (to flush replies, re-arm). */
  afterTick: () => void;
  /** Called if settling throws (e.g. fencing tokens exhausted). */
  onError: (error: unknown) => void;
  /** Whether settling may happen now (a cluster node handing over freezes its leases). */
  canAdvance?: () => boolean;
}

/**
 * Keeps exactly one timer armed for the earliest deadline of a {@linkcode Deadlines}.
 *
 * @example Driving a lock table
 * ```ts ignore
 * const ticker = new Ticker(table, { clock: () => performance.now(), afterTick, onError });
 * ticker.arm(); // after every batch of requests
 * ```
 */
export class Ticker {
  #target: Deadlines;
  #options: TickerOptions;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #armedFor = Infinity;
  #stopped = false;

  /** @param target The deadlines to follow. @param options Clock and callbacks. */
  constructor(target: Deadlines, options: TickerOptions) {
    this.#target = target;
    this.#options = options;
  }

  /**
   * Makes sure the timer fires no later than the earliest deadline. Cheap when nothing
   * moved earlier: a timer armed for an earlier time stays, and re-arms itself when it fires.
   */
  arm(): void {
    if (this.#stopped || this.#options.canAdvance?.() === false) return;
    const deadline = this.#target.nextDeadline();
    if (deadline === undefined || deadline >= this.#armedFor) return;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#armedFor = deadline;
    // setTimeout cannot wait longer than 2^31-1 ms (it would fire at once): wake up early
    // and re-arm instead.
    const delay = Math.min(MAX_DELAY_MS, Math.max(0, Math.ceil(deadline - this.#options.clock())));
    this.#timer = setTimeout(() => this.#fire(), delay);
  }

  /** Cancels the timer for good. */
  stop(): void {
    this.#stopped = true;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  /** Settles what is due now and re-arms (also after a freeze ends). */
  fire(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#fire();
  }

  #fire(): void {
    this.#timer = undefined;
    this.#armedFor = Infinity;
    if (this.#stopped || this.#options.canAdvance?.() === false) return;
    try {
      this.#target.advance();
    } catch (error) {
      this.#options.onError(error);
    }
    this.#options.afterTick();
    this.arm();
  }
}

/**
 * A monotonic clock (ms) read at most once per synchronous run of the event loop: every
 * request of one read batch sees the same instant, and the hot path pays one
 * `performance.now()` per batch instead of several per request.
 *
 * @example
 * ```ts ignore
 * const now = turnClock();
 * now() === now(); // true within one synchronous run
 * ```
 */
export function turnClock(): () => number {
  let cached: number | undefined;
  const forget = () => cached = undefined;
  return () => {
    if (cached === undefined) {
      cached = performance.now();
      queueMicrotask(forget);
    }
    return cached;
  };
}
