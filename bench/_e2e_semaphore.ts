/**
 * `redis-semaphore`'s `Mutex` on `ioredis` as a {@linkcode LockSystem} of the end-to-end
 * benchmark: a `new Mutex(redis, key, { lockTimeout, acquireTimeout, retryInterval })` per
 * acquisition, `mutex.acquire()` and `mutex.release()`, with its defaults otherwise (it
 * refreshes a held lock every 0.8 × lockTimeout). Redis has no queue: on a held key it
 * retries `SET NX` every `retryInterval` ms (its default, 10) until `acquireTimeout`.
 *
 * @module
 */

import { Redis } from "npm:ioredis@5.9.3";
import { Mutex, TimeoutError } from "npm:redis-semaphore@5.8.0";
import type { LockSystem, OpenSystem, SystemConfig } from "./_e2e_workload.ts";

/** Opens one ioredis connection; each acquire makes a Mutex on it. */
export const open: OpenSystem = async (config: SystemConfig): Promise<LockSystem> => {
  const [host, port] = config.address.split(":");
  const redis = new Redis({ host, port: Number(port), lazyConnect: true });
  await redis.connect();
  return {
    async acquire(key, waitMs) {
      // deno-lint-ignore no-explicit-any
      const mutex = new Mutex(redis as any, key, {
        lockTimeout: config.leaseMs,
        // Own keys are never contended; the library's default wait (10 s) is then unused.
        acquireTimeout: waitMs > 0 ? waitMs : 10_000,
        retryInterval: config.pollMs,
      });
      try {
        await mutex.acquire();
      } catch (error) {
        if (error instanceof TimeoutError) return null;
        throw error;
      }
      return { release: () => mutex.release() };
    },
    async close() {
      await redis.quit();
    },
  };
};
