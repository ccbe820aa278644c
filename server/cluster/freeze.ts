/**
 * Noticing that this process was frozen (docs/cluster.md, "Two actives at once"): SIGSTOP,
 * a long GC pause or a stalled VM shows as a heartbeat that ran far too late. After one,
 * the node holds still (parks requests, freezes leases) until it has heard from its peers,
 * because they may have moved on without it.
 *
 * @module
 */

/** Watches the heartbeat's regularity on the monotonic clock. */
export class FreezeDetector {
  #lastTick: number;
  #since: number | undefined;
  #limitMs: number;

  /**
   * @param now The clock at start (ms).
   * @param limitMs A gap between heartbeats longer than this is a freeze.
   */
  constructor(now: number, limitMs: number) {
    this.#lastTick = now;
    this.#limitMs = limitMs;
  }

  /** When the current freeze was noticed, or `undefined` when not suspecting one. */
  get since(): number | undefined {
    return this.#since;
  }

  /** Checks the gap since the last heartbeat; returns `true` when it just noticed a freeze. */
  check(now: number): boolean {
    if (this.#since !== undefined || now - this.#lastTick <= this.#limitMs) return false;
    this.#since = now;
    this.#lastTick = now;
    return true;
  }

  /** A heartbeat ran at `now`. */
  ticked(now: number): void {
    this.#lastTick = now;
  }

  /** The freeze is over: the node may act again. Returns whether it was suspecting one. */
  clear(): boolean {
    const was = this.#since !== undefined;
    this.#since = undefined;
    return was;
  }
}
