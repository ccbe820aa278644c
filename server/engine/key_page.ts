/**
 * The smallest `limit` keys of a stream, in key order: what one page of held keys is (the
 * `L` inspection request). Keys come in any order; the page keeps them sorted by binary
 * insertion, so a walk over a million keys costs one comparison per key once it is full.
 *
 * @module
 */

/** A bounded, sorted selection of keys (by UTF-16 code units: byte order for ASCII keys). */
export class KeyPage {
  #keys: string[] = [];
  #limit: number;

  /** @param limit Most keys kept (the smallest ones). */
  constructor(limit: number) {
    this.#limit = Math.max(0, limit);
  }

  /** Offers `key` (distinct from every key offered before). */
  offer(key: string): void {
    const keys = this.#keys;
    const limit = this.#limit;
    if (keys.length === limit) {
      if (limit === 0 || key >= keys[limit - 1]) return;
      keys.pop();
    }
    let lo = 0;
    let hi = keys.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (keys[mid] < key) lo = mid + 1;
      else hi = mid;
    }
    keys.splice(lo, 0, key);
  }

  /** The keys kept, smallest first. */
  keys(): string[] {
    return this.#keys;
  }
}
