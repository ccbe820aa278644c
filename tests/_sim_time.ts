/**
 * Fake time for the cluster simulator (`_sim_cluster.ts`): a monotonic clock in ms and
 * timers that run only when a test advances time, in time order (ties in the order they
 * were scheduled). No real timer is ever used, so the sanitizers see nothing.
 *
 * Every callback belongs to a {@linkcode SimProcess}. A paused process (SIGSTOP) keeps its
 * due callbacks, timers and deliveries to it alike, and runs them all at once, late, when it
 * resumes (SIGCONT): a periodic timer then fires once, as `setInterval` does after a stall.
 * A killed process drops them. Between two callbacks the microtask queue is drained, as the
 * event loop does, so `async` code of the role machine (a graceful leave) moves on too.
 *
 * @module
 */

import type { Cancel, Scheduler } from "../server/cluster/ports.ts";

/** Microtask turns run after each callback (enough for the role machine's `await` chains). */
const DRAIN_TURNS = 32;

/** One queued callback. */
export interface SimTimer {
  at: number;
  seq: number;
  owner: SimProcess;
  fn: () => void;
  periodMs: number | undefined;
  cancelled: boolean;
}

/** Something with deadlines of its own (a node's lease timer), settled as time passes. */
export interface SimWatcher {
  /** The next time it must be settled at (strictly in the future), if any. */
  next(now: number): number | undefined;
  /** Settles whatever is due now. */
  settle(now: number): void;
}

/** Lets pending promise callbacks run (no timer involved). */
export async function drainMicrotasks(): Promise<void> {
  for (let i = 0; i < DRAIN_TURNS; i++) await Promise.resolve();
}

/** The fake clock and the queue of every process's callbacks. */
export class SimTime {
  #now = 0;
  #seq = 0;
  #queue: SimTimer[] = [];
  #watchers: SimWatcher[] = [];

  /** The fake monotonic clock, ms. */
  get now(): number {
    return this.#now;
  }

  /** A new process whose callbacks this clock runs. */
  process(name: string): SimProcess {
    return new SimProcess(this, name);
  }

  /** Settles `watcher` whenever time moves, and wakes up at its deadlines. */
  watch(watcher: SimWatcher): void {
    this.#watchers.push(watcher);
  }

  /** Runs `ms` of fake time. */
  async advance(ms: number): Promise<void> {
    await this.runUntil(() => false, ms);
  }

  /**
   * Runs callbacks in time order until `done()` holds (checked after each callback) or
   * `maxMs` of fake time passed; returns whether `done()` holds.
   */
  async runUntil(done: () => boolean, maxMs: number): Promise<boolean> {
    const end = this.#now + maxMs;
    await this.#settle();
    if (done()) return true;
    for (;;) {
      const next = this.#nextTime();
      if (next === undefined || next > end) break;
      this.#now = Math.max(this.#now, next);
      const timer = this.#queue[0];
      if (timer !== undefined && timer.at <= this.#now) {
        this.#queue.shift();
        this.#run(timer);
      }
      await this.#settle();
      if (done()) return true;
    }
    this.#now = end;
    await this.#settle();
    return done();
  }

  /** @internal Queues `entry` (due at `entry.at`) behind everything due at or before then. */
  insert(entry: SimTimer): void {
    entry.seq = this.#seq++;
    const queue = this.#queue;
    let lo = 0;
    let hi = queue.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const other = queue[mid];
      if (other.at < entry.at || (other.at === entry.at && other.seq < entry.seq)) lo = mid + 1;
      else hi = mid;
    }
    queue.splice(lo, 0, entry);
  }

  /** @internal Puts back a held timer, due now. */
  requeue(timer: SimTimer): void {
    timer.at = this.#now;
    this.insert(timer);
  }

  #nextTime(): number | undefined {
    let next = this.#queue[0]?.at;
    for (const watcher of this.#watchers) {
      const at = watcher.next(this.#now);
      if (at !== undefined && at > this.#now && (next === undefined || at < next)) next = at;
    }
    return next;
  }

  #run(timer: SimTimer): void {
    if (timer.cancelled || !timer.owner.alive) return;
    if (timer.owner.paused) {
      timer.owner.hold(timer);
      return;
    }
    if (timer.periodMs !== undefined) {
      timer.at = this.#now + timer.periodMs;
      this.insert(timer);
    }
    timer.fn();
  }

  async #settle(): Promise<void> {
    await drainMicrotasks();
    for (const watcher of this.#watchers) watcher.settle(this.#now);
    await drainMicrotasks();
  }
}

/** One simulated process: its timers, and whether it runs, is paused or was killed. */
export class SimProcess {
  /** For messages. */
  readonly name: string;
  #time: SimTime;
  #alive = true;
  #paused = false;
  #held: SimTimer[] = [];
  /** This process's timers, as the role machine sees them. */
  readonly scheduler: Scheduler;

  /** @param time The clock. @param name For messages. */
  constructor(time: SimTime, name: string) {
    this.#time = time;
    this.name = name;
    this.scheduler = {
      every: (ms, fn) => this.#schedule(ms, fn, ms),
      after: (ms, fn) => this.#schedule(ms, fn, undefined),
    };
  }

  /** Whether it was not killed. */
  get alive(): boolean {
    return this.#alive;
  }

  /** Whether it is paused (SIGSTOP). */
  get paused(): boolean {
    return this.#paused;
  }

  /** Runs `fn` in this process after `ms` (held while paused, dropped once killed). */
  after(ms: number, fn: () => void): Cancel {
    return this.#schedule(ms, fn, undefined);
  }

  /** SIGSTOP: nothing of it runs until {@linkcode resume}. */
  pause(): void {
    this.#paused = true;
  }

  /** SIGCONT: everything that fell due meanwhile runs now, in its order. */
  resume(): void {
    this.#paused = false;
    const held = this.#held;
    this.#held = [];
    for (const timer of held) this.#time.requeue(timer);
  }

  /** kill -9: nothing of it ever runs again. */
  kill(): void {
    this.#alive = false;
    this.#held = [];
  }

  /** @internal A due timer, kept while paused. */
  hold(timer: SimTimer): void {
    this.#held.push(timer);
  }

  #schedule(ms: number, fn: () => void, periodMs: number | undefined): Cancel {
    const timer: SimTimer = {
      at: this.#time.now + Math.max(0, ms),
      seq: 0,
      owner: this,
      fn,
      periodMs,
      cancelled: false,
    };
    this.#time.insert(timer);
    return () => {
      timer.cancelled = true;
    };
  }
}
