/**
 * One timer for all leases and wait limits: arms a single `setTimeout` for the lock table's
 * earliest deadline and settles everything due when it fires. A million leases cost one
 * timer, and an idle server with a million leases does no work until the next one is due.
 *
 * Deno's timers have a coarse grain: `setTimeout(fn, d)` runs 0.2–2.3 ms after `d` (and
 * `d = 0` counts as 1 ms). When deadlines are dense, as when a mass of leases granted at a
 * high rate expires, waiting for a timer between settlements made every expiry 1–2 ms late.
 * So after settling, a next deadline that is very close is polled for with `setImmediate`
 * (a turn of the event loop, requests served in between) instead of a timer: only within
 * {@linkcode POLL_WINDOW_MS}, and for at most {@linkcode POLL_SHARE} times as long as the
 * settling just done took, so polling never costs more than a small multiple of the work
 * that made it worth it (docs/server.md, "Leases and timers").
 *
 * @module
 */

import { clearImmediate, setImmediate } from "node:timers";

const MAX_DELAY_MS = 2 ** 31 - 1;
/** Longest stretch of settling in one callback before requests get a turn (ms). */
const CATCH_UP_MS = 5;
/** A next deadline at most this far away (ms) may be polled for instead of timed. */
export const POLL_WINDOW_MS = 2;
/** Polling for the next deadline lasts at most this many times the settling before it. */
export const POLL_SHARE = 4;

/** What the ticker drives: the lock table's view of time. */
export interface Deadlines {
  /** Earliest pending deadline in ms on the monotonic clock, or `undefined`. */
  nextDeadline(): number | undefined;
  /** Settles everything due now. */
  advance(): void;
}

/** The timers a {@linkcode Ticker} uses (tests pass fakes); handles are opaque. */
export interface Scheduler {
  /** Runs `fn` once after about `ms` milliseconds. */
  timeout(fn: () => void, ms: number): unknown;
  /** Cancels a `timeout`. */
  cancelTimeout(handle: unknown): void;
  /** Runs `fn` in the next turn of the event loop, after pending I/O. */
  immediate(fn: () => void): unknown;
  /** Cancels an `immediate`. */
  cancelImmediate(handle: unknown): void;
}

/** The runtime's timers. */
export const RUNTIME_SCHEDULER: Scheduler = {
  timeout: (fn, ms) => setTimeout(fn, ms),
  cancelTimeout: (handle) => clearTimeout(handle as ReturnType<typeof setTimeout>),
  immediate: (fn) => setImmediate(fn),
  cancelImmediate: (handle) => clearImmediate(handle as ReturnType<typeof setImmediate>),
};

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
  /** The timers to use. Default: the runtime's. */
  scheduler?: Scheduler;
}

/**
 * Keeps exactly one timer (or one poll) armed for the earliest deadline of a
 * {@linkcode Deadlines}.
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
  #scheduler: Scheduler;
  #timer: unknown;
  #poll: unknown;
  /** While polling: when polling gives way to a timer (ms). */
  #pollUntil = 0;
  #armedFor = Infinity;
  #stopped = false;
  #check = () => this.#checkPoll();

  /** @param target The deadlines to follow. @param options Clock and callbacks. */
  constructor(target: Deadlines, options: TickerOptions) {
    this.#target = target;
    this.#options = options;
    this.#scheduler = options.scheduler ?? RUNTIME_SCHEDULER;
  }

  /**
   * Makes sure the timer fires no later than the earliest deadline. Cheap when nothing
   * moved earlier: a timer armed for an earlier time stays, and re-arms itself when it fires;
   * while polling, the poll sees every new deadline.
   */
  arm(): void {
    if (this.#stopped || this.#options.canAdvance?.() === false) return;
    const deadline = this.#target.nextDeadline();
    if (deadline === undefined || deadline >= this.#armedFor) return;
    this.#cancel();
    this.#armedFor = deadline;
    // setTimeout cannot wait longer than 2^31-1 ms (it would fire at once): wake up early
    // and re-arm instead.
    const delay = Math.min(MAX_DELAY_MS, Math.max(0, Math.ceil(deadline - this.#options.clock())));
    this.#timer = this.#scheduler.timeout(() => {
      this.#timer = undefined;
      this.#fire();
    }, delay);
  }

  /** Cancels the timer for good. */
  stop(): void {
    this.#stopped = true;
    this.#cancel();
  }

  /** Settles what is due now and re-arms (also after a freeze ends). */
  fire(): void {
    this.#cancel();
    this.#fire();
  }

  #cancel(): void {
    if (this.#timer !== undefined) this.#scheduler.cancelTimeout(this.#timer);
    if (this.#poll !== undefined) this.#scheduler.cancelImmediate(this.#poll);
    this.#timer = this.#poll = undefined;
  }

  #fire(): void {
    this.#armedFor = Infinity;
    if (this.#stopped || this.#options.canAdvance?.() === false) return;
    // Settle what is due, then whatever fell due meanwhile (a million leases expire at the
    // rate they were granted): waiting for another timer would add its latency. A time
    // budget keeps requests flowing in between: past it, the next turn carries on.
    const clock = this.#options.clock;
    const start = clock();
    let pollFor = 0;
    try {
      for (;;) {
        this.#options.refresh?.();
        this.#target.advance();
        const next = this.#target.nextDeadline();
        if (next === undefined) break;
        const now = clock();
        if (next > now) {
          const window = Math.min(POLL_WINDOW_MS, POLL_SHARE * (now - start));
          if (next - now <= window) pollFor = window;
          break;
        }
        if (now - start > CATCH_UP_MS) {
          pollFor = POLL_WINDOW_MS;
          break;
        }
      }
    } catch (error) {
      this.#options.onError(error);
    }
    this.#options.afterTick();
    if (pollFor > 0 && !this.#stopped) {
      this.#pollUntil = clock() + pollFor;
      this.#schedulePoll();
    } else this.arm();
  }

  #schedulePoll(): void {
    this.#armedFor = -Infinity; // arm() leaves the poll in charge
    this.#poll = this.#scheduler.immediate(this.#check);
  }

  /** One poll: settles if something is due, polls again within its window, else times. */
  #checkPoll(): void {
    this.#poll = undefined;
    this.#armedFor = Infinity;
    if (this.#stopped || this.#options.canAdvance?.() === false) return;
    const next = this.#target.nextDeadline();
    if (next === undefined) return;
    const now = this.#options.clock();
    if (next <= now) this.#fire();
    else if (now < this.#pollUntil && next - now <= POLL_WINDOW_MS) this.#schedulePoll();
    else this.arm();
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
