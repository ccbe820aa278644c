/**
 * The client's timers: every one of them is an entry of one {@linkcode DeadlineHeap}, behind
 * a single runtime timer armed for the earliest (two, in fact: one that keeps the process
 * alive and one that does not). A runtime timer costs microseconds to make and cancel (a
 * Node-compatible `Timeout` object each, in Deno), and a client would otherwise make three
 * per lock cycle (the acquire's wait, the lease's expiry warning, the release's bound).
 * Arming and cancelling an entry here costs a heap push or removal. The runtime timer is
 * armed at most {@linkcode HORIZON_MS} ahead, so an entry due later than that never re-arms
 * it (it fires early, finds nothing due and re-arms); and when the last entry is cancelled
 * it is cleared only once no request is outstanding ({@linkcode TimerQueue.hold}) and no
 * entry came back within a few microtasks, so a client that takes one lock at a time keeps
 * the same one from cycle to cycle.
 *
 * Any delay works: `setTimeout` cannot wait longer than 2^31-1 ms (about 24.8 days) and
 * fires at once when asked to, so a long wait or lease would end immediately; the queue
 * waits in steps and re-arms until the time is due.
 *
 * @module
 */

import { DeadlineHeap, type HeapEntry } from "./deadline_heap.ts";

/** How to let a numeric timer id not keep the process alive (installed by `tcp.ts`). */
let unrefTimer: ((id: number) => void) | undefined;

/**
 * Installs the runtime's way to let a numeric timer not keep the process alive. The TCP
 * transport, which only runs where sockets can keep a process alive, installs Deno's.
 */
export function setTimerUnref(fn: (id: number) => void): void {
  unrefTimer = fn;
}

/**
 * Lets the timer `id` not keep the process alive: the installed function for numeric ids
 * (Deno), the timer object's own `unref()` (Node.js, Bun); nothing in a browser, where it
 * does not matter.
 */
function unref(id: ReturnType<typeof setTimeout>): void {
  if (typeof id === "number") unrefTimer?.(id);
  else (id as { unref?(): void }).unref?.();
}

/**
 * How far ahead the runtime timer is armed at most, in ms: entries due later than that are
 * scheduled and cancelled without touching it, at the cost of one early wake a second while
 * any is scheduled. Below `setTimeout`'s longest delay (2^31-1 ms), so every wait works.
 */
export const HORIZON_MS = 1000;

/**
 * How many microtasks an empty queue waits for a new entry before it clears its runtime
 * timer: enough for a caller's `await lock.release()` to resume and acquire again, few
 * enough that the timer is gone long before the turn ends (no process kept alive, no test
 * sanitizer tripped).
 */
const IDLE_MICROTASKS = 8;

/**
 * How early an entry may fire, in ms: runtimes round timer delays to whole milliseconds, so
 * a runtime timer can fire a fraction of a millisecond before `performance.now()` reaches
 * the time asked for (as a bare `setTimeout` would).
 */
const EARLY_MS = 1;

/** A timer of the queue: reusable (schedule, cancel, schedule again); `fire` runs when due. */
export interface TimerEntry extends HeapEntry {
  /** Called once it is due (at most once per scheduling). */
  fire(): void;
}

/** The deadlines of one kind (keeping the process alive, or not) behind one runtime timer. */
export class TimerQueue {
  #heap = new DeadlineHeap<TimerEntry>();
  #weak: boolean;
  #timer: ReturnType<typeof setTimeout> | undefined;
  /** When the runtime timer is armed to fire (Infinity when it is not armed). */
  #armedFor = Infinity;
  #firing = false;
  #run = () => this.#fire();
  /** Microtasks left before an empty queue clears its runtime timer (0: not waiting). */
  #idleChecks = 0;
  /** Requests outstanding ({@linkcode hold}). */
  #holds = 0;
  #idleCheck = () => this.#idle();

  /** @param weak Whether its runtime timer lets the process exit. */
  constructor(weak: boolean) {
    this.#weak = weak;
  }

  /** Number of entries scheduled. */
  get size(): number {
    return this.#heap.size;
  }

  /**
   * Schedules `entry` to fire at `due` (`performance.now()` ms; never for `Infinity`),
   * replacing any earlier scheduling of it.
   */
  schedule(entry: TimerEntry, due: number): void {
    if (due === Infinity) {
      this.cancel(entry);
      return;
    }
    if (Number.isNaN(due)) due = 0; // At once, as `setTimeout(fn, NaN)` would.
    this.#heap.push(entry, due);
    if (!this.#firing && due < this.#armedFor) this.#arm(due);
  }

  /** Cancels `entry` if it is scheduled here. */
  cancel(entry: TimerEntry): void {
    if (!this.#heap.remove(entry)) return;
    if (this.#heap.size === 0 && !this.#firing) this.#emptied();
  }

  /**
   * A request is outstanding: while one is, an empty queue keeps its runtime timer (the
   * request's connection keeps the process alive anyway), so a lock taken one round trip
   * later finds it armed. Each call needs one {@linkcode unhold}.
   */
  hold(): void {
    this.#holds++;
  }

  /** A request held with {@linkcode hold} ended. */
  unhold(): void {
    if (--this.#holds === 0 && this.#heap.size === 0 && !this.#firing) this.#emptied();
  }

  /** Whether `entry` is scheduled here. */
  scheduled(entry: TimerEntry): boolean {
    return this.#heap.has(entry);
  }

  /**
   * Nothing left: the runtime timer must not keep the process alive (or a test's timer
   * sanitizer busy), but the next entry often comes a few microtasks later: wait for it.
   */
  #emptied(): void {
    if (this.#holds > 0 || this.#idleChecks > 0) return;
    this.#idleChecks = IDLE_MICROTASKS;
    queueMicrotask(this.#idleCheck);
  }

  /** Clears the runtime timer once the queue stayed empty for {@linkcode IDLE_MICROTASKS}. */
  #idle(): void {
    if (this.#heap.size > 0 || this.#holds > 0 || this.#timer === undefined) this.#idleChecks = 0;
    else if (--this.#idleChecks > 0) queueMicrotask(this.#idleCheck);
    else {
      this.#idleChecks = 0;
      clearTimeout(this.#timer);
      this.#timer = undefined;
      this.#armedFor = Infinity;
    }
  }

  /** Arms the runtime timer for `due`, or {@linkcode HORIZON_MS} from now if that is sooner. */
  #arm(due: number): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    const now = performance.now();
    this.#armedFor = due - now <= HORIZON_MS ? due : now + HORIZON_MS;
    this.#timer = setTimeout(this.#run, Math.max(0, this.#armedFor - now));
    if (this.#weak) unref(this.#timer);
  }

  /**
   * Fires what is due. Entries scheduled meanwhile (by what fires) wait for the next turn,
   * as a fresh `setTimeout` would. One that throws does not stop the others: its error is
   * rethrown in a microtask (an uncaught error, as from a bare timer).
   */
  #fire(): void {
    this.#timer = undefined;
    this.#armedFor = Infinity;
    const heap = this.#heap;
    const limit = heap.nextSeq;
    const now = performance.now() + EARLY_MS;
    this.#firing = true;
    try {
      for (let top = heap.peek(); top !== undefined && top.due <= now; top = heap.peek()) {
        if (top.seq >= limit) break;
        heap.remove(top);
        try {
          top.fire();
        } catch (error) {
          queueMicrotask(() => {
            throw error;
          });
        }
      }
    } finally {
      this.#firing = false;
      const top = heap.peek();
      if (top !== undefined) this.#arm(top.due);
    }
  }
}

/** The timers that keep the process alive (a held lock, a request's deadline). */
export const timers: TimerQueue = new TimerQueue(false);
/** The timers that do not (background reconnects). */
export const weakTimers: TimerQueue = new TimerQueue(true);

/** A reusable timer entry that calls a function: for timers made once and armed often. */
export class Alarm implements TimerEntry {
  /** @internal */
  due = 0;
  /** @internal */
  slot = -1;
  /** @internal */
  seq = 0;
  #fn: () => void;

  /** @param fn What to call when it fires. */
  constructor(fn: () => void) {
    this.#fn = fn;
  }

  /** Calls the function. */
  fire(): void {
    this.#fn();
  }
}

/** Cancels a timer made by {@linkcode after}; calling it again does nothing. */
export type CancelTimer = () => void;

/**
 * Calls `fn` once `ms` milliseconds have passed on the monotonic clock (at once for 0 or
 * less; never for `Infinity`), unless cancelled first. A `weak` timer does not keep the
 * process alive by itself.
 *
 * @example
 * ```ts ignore
 * const cancel = after(30 * 86_400_000, () => console.log("30 days later"));
 * cancel();
 * ```
 */
export function after(ms: number, fn: () => void, weak = false): CancelTimer {
  const queue = weak ? weakTimers : timers;
  const alarm = new Alarm(fn);
  queue.schedule(alarm, performance.now() + (ms > 0 ? ms : 0));
  return () => queue.cancel(alarm);
}
