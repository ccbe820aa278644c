/**
 * The key index of held locks (server/key_index.ts) against a `Map` reference: random
 * inserts, removals and lookups over short, long and non-ASCII keys, through table growth
 * and backward-shift deletions in crowded probe runs.
 */

import assert from "node:assert/strict";
import { KeyIndex } from "../server/engine/key_index.ts";
import { mulberry32 } from "./_prng.ts";

Deno.test("KeyIndex agrees with a Map over random operations", () => {
  for (const seed of [1, 2, 3]) {
    const random = mulberry32(seed);
    const index = new KeyIndex();
    const reference = new Map<string, number>();
    const free: number[] = [];
    let nextSlot = 0;
    const keyPool = Array.from({ length: 5000 }, (_, i) => {
      const kind = i % 4;
      return kind === 0
        ? `k${i}`
        : kind === 1
        ? `long:${"x".repeat(30)}:${i}`
        : kind === 2
        ? `é${i}🔒`
        : `orders:${i}:${"y".repeat(i % 20)}`;
    });
    for (let step = 0; step < 40_000; step++) {
      const key = keyPool[Math.floor(random() * keyPool.length)];
      const present = reference.get(key);
      assert.equal(index.find(key), present ?? -1, `seed ${seed} step ${step}: find ${key}`);
      if (present === undefined) {
        const slot = free.pop() ?? nextSlot++;
        index.insert(key, slot);
        reference.set(key, slot);
      } else if (random() < 0.6) {
        index.remove(present);
        reference.delete(key);
        free.push(present);
      }
      assert.equal(index.size, reference.size);
    }
    for (const [key, slot] of reference) {
      assert.equal(index.find(key), slot);
      assert.equal(index.keyOf(slot), key);
    }
  }
});

Deno.test("KeyIndex keeps every key findable after removals inside probe runs", () => {
  const index = new KeyIndex();
  const keys = Array.from({ length: 3000 }, (_, i) => `run:${i}`);
  keys.forEach((key, slot) => index.insert(key, slot));
  // Remove every third key: later members of each probe run must shift back correctly.
  keys.forEach((_, slot) => {
    if (slot % 3 === 0) index.remove(slot);
  });
  keys.forEach((key, slot) => assert.equal(index.find(key), slot % 3 === 0 ? -1 : slot));
  index.clear();
  assert.equal(index.size, 0);
  assert.equal(index.find("run:1"), -1);
});
