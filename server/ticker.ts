/**
 * One timer for all leases and wait limits: arms a single `setTimeout` for the lock table's
 * earliest deadline and settles everything due when it fires. A million leases cost one
 * timer, and an idle server with a million leases does no work until the next one is due.
 *
 * @module
 */

const MAX_DELAY_MS = 2 ** 31 - 1;
/** Longest stretch of settling in one timer callback before requests get a turn. */
const CATCH_UP_MS = 5;

/** What the ticker drives: the lock table's view of time. */
export interface Deadlines {
  /** Earliest pending deadline in ms on the monotonic clock, or `undefined`. */
  nextDeadline(): number | undefined;
  /** Settles everything due now. */
  advance(): void;
}

/** Options of {@linkcode Ticker}. */
export interface TickerOptions {
  /** The table's monotonic clock (ms), read fresh: not a cached per-turn value. */
  clock: () => number;
  /** Makes the table's clock read fresh time again (a {@linkcode TurnClock}'s `refresh`). */
  refresh?: () => void;
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
    // Settle what is due, then whatever fell due meanwhile (a million leases expire at the
    // rate they were granted): waiting for another timer would add its latency, and nested
    // timers are clamped to 4 ms. A time budget keeps requests flowing in between.
    const clock = this.#options.clock;
    const until = clock() + CATCH_UP_MS;
    try {
      for (;;) {
        this.#options.refresh?.();
        this.#target.advance();
        const next = this.#target.nextDeadline();
        if (next === undefined || next > clock() || clock() > until) break;
      }
    } catch (error) {
      this.#options.onError(error);
    }
    this.#options.afterTick();
    this.arm();
  }
}

/** A clock read once per synchronous run, and a way to make it read fresh time. */
export interface TurnClock {
  /** Monotonic milliseconds, the same value throughout one synchronous run. */
  now: () => number;
  /** Forgets the cached value: the next `now()` reads the time again. */
  refresh: () => void;
}

/**
 * A monotonic clock (ms) read at most once per synchronous run of the event loop: every
 * request of one read batch sees the same instant, and the hot path pays one
 * `performance.now()` per batch instead of several per request. Whoever runs long (the
 * lease timer catching up) calls `refresh()` between steps.
 *
 * @example
 * ```ts ignore
 * const clock = turnClock();
 * clock.now() === clock.now(); // true within one synchronous run
 * ```
 */
export function turnClock(): TurnClock {
  let cached: number | undefined;
  const refresh = () => cached = undefined;
  return {
    now: () => {
      if (cached === undefined) {
        cached = performance.now();
        queueMicrotask(refresh);
      }
      return cached;
    },
    refresh,
  };
}
