/**
 * Repeated log lines, limited (docs/server.md, "Logs"): a condition that recurs many times a
 * second (a flood of refused connections, a peer that keeps refusing this node's handshake)
 * is logged once per interval and key, and the line that goes out says how many like it
 * were held back since the last one. Pure, with an injectable clock.
 *
 * @module
 */

/** Keys kept at most (then all are forgotten at once). */
const MAX_KEYS = 1024;

/**
 * Decides, per key, which of a run of repeated lines are logged. Key by the kind of event
 * (a fixed set), never by text a remote chose.
 */
export class LogLimit {
  #intervalMs: number;
  #now: () => number;
  /** Per key: when its last line went out, and how many were held back since. */
  #keys = new Map<string, { loggedAt: number; held: number }>();

  /**
   * @param intervalMs At most one line per key this often, in ms.
   * @param now The clock, in ms (default `performance.now()`).
   */
  constructor(intervalMs: number, now: () => number = () => performance.now()) {
    this.#intervalMs = intervalMs;
    this.#now = now;
  }

  /**
   * Whether a line for `key` goes out now: `undefined` if it is held back (counted), else
   * how many lines of `key` were held back before it (0 for the first).
   */
  pass(key: string): number | undefined {
    const now = this.#now();
    const entry = this.#keys.get(key);
    if (entry === undefined) {
      // Keys are meant to be few (kinds of events, not their details). Should there be many,
      // they are forgotten all at once: memory stays bounded, each call O(1) amortised.
      if (this.#keys.size >= MAX_KEYS) this.#keys.clear();
      this.#keys.set(key, { loggedAt: now, held: 0 });
      return 0;
    }
    if (now - entry.loggedAt < this.#intervalMs) {
      entry.held++;
      return undefined;
    }
    const held = entry.held;
    entry.loggedAt = now;
    entry.held = 0;
    return held;
  }

  /** `"; N more since the last such line"`, or `""` when none was held back. */
  static more(held: number): string {
    return held > 0 ? `; ${held} more since the last such line` : "";
  }
}
