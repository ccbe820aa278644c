/**
 * The client's timers cost no runtime timer per lock cycle (client/timer.ts): a client that
 * takes one lock at a time, with a wait or without, keeps one runtime timer armed across its
 * cycles instead of making and clearing up to three per cycle.
 */

import assert from "node:assert/strict";
import { LockClient } from "../mod.ts";
import { withServer } from "./_helpers.ts";

Deno.test("a client taking one lock at a time makes no runtime timer per cycle", async (t) => {
  await withServer({}, async (server) => {
    const client = new LockClient(server.address);
    const real = globalThis.setTimeout;
    try {
      for (
        const [name, options] of [["with a wait", { lease: 30, wait: 10 }], ["without", {
          lease: 30,
        }]] as const
      ) {
        await t.step(name, async () => {
          let made = 0;
          globalThis.setTimeout = ((...args: Parameters<typeof setTimeout>) => {
            made++;
            return real(...args);
          }) as typeof setTimeout;
          const started = performance.now();
          const cycles = 300;
          try {
            for (let i = 0; i < cycles; i++) {
              const lock = await client.acquire("timers:k", options);
              await lock.release();
            }
          } finally {
            globalThis.setTimeout = real;
          }
          // One to start, and at most one a second as the horizon comes (1 s ahead).
          const seconds = Math.ceil((performance.now() - started) / 1000);
          assert.ok(
            made <= 1 + seconds,
            `${made} runtime timers for ${cycles} cycles in ${seconds} s`,
          );
        });
      }
    } finally {
      globalThis.setTimeout = real;
      await client.close();
    }
  });
});
