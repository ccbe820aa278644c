/**
 * The fenced resource's rule, pure: per key, a write is accepted only with a token above the
 * last one accepted for that key, or equal to it from the same holder (its next write);
 * anything else is stale (docs/cluster.md, "Consistency, stated plainly").
 *
 * @module
 */

/** What the fence decided about one write. */
export interface FenceDecision {
  /** Accepted (else rejected as stale). */
  accepted: boolean;
  /** The last token accepted for the key before this write, if any. */
  last: bigint | null;
}

/**
 * One fence per key.
 *
 * @example Refuse an older token
 * ```ts
 * const fence = new Fence();
 * fence.write("k", 7n, "w1/1").accepted; // true
 * fence.write("k", 5n, "w2/1").accepted; // false: 7 was accepted already
 * ```
 */
export class Fence {
  #last = new Map<string, { token: bigint; holder: string }>();

  /**
   * Decides a write of `key` with `token` by `holder` (one grant: e.g. `worker/op`) and
   * remembers it if accepted.
   */
  write(key: string, token: bigint, holder: string): FenceDecision {
    const last = this.#last.get(key);
    const accepted = last === undefined || token > last.token ||
      (token === last.token && holder === last.holder);
    if (accepted) this.#last.set(key, { token, holder });
    return { accepted, last: last?.token ?? null };
  }
}
