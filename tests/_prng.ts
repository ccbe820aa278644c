/**
 * Test helper: a small seeded pseudo-random number generator, so that random runs are
 * reproducible from their seed.
 *
 * @module
 */

/** mulberry32: returns a generator of numbers in `[0, 1)` seeded by `seed`. */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
