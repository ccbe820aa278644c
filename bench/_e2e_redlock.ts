/**
 * `redlock` (5.0.0-beta.2, the current Redlock API) on `ioredis` with one Redis, as a
 * {@linkcode LockSystem} of the end-to-end benchmark: `redlock.acquire([key], lease)` and
 * `lock.release()`. Redis has no queue: on a held key Redlock retries after `retryDelay`
 * ± `retryJitter` ms (its defaults, 200 and 200), `retryCount` times, enough to cover the
 * wait; on keys that are never contended it makes one attempt (`retryCount: 0`).
 *
 * @module
 */

import { Redis } from "npm:ioredis@5.9.3";
import Redlock, { ExecutionError } from "npm:redlock@5.0.0-beta.2";
import type { LockSystem, OpenSystem, SystemConfig } from "./_e2e_workload.ts";

/** Opens one ioredis connection and a Redlock over it. */
export const open: OpenSystem = async (config: SystemConfig): Promise<LockSystem> => {
  const [host, port] = config.address.split(":");
  const redis = new Redis({ host, port: Number(port), lazyConnect: true });
  await redis.connect();
  const delay = config.redlockRetryMs;
  // deno-lint-ignore no-explicit-any
  const redlock = new Redlock([redis as any], {
    retryCount: config.waitMs > 0 ? Math.ceil(config.waitMs / delay) : 0,
    retryDelay: delay,
    retryJitter: delay,
  });
  return {
    async acquire(key, _waitMs) {
      try {
        const lock = await redlock.acquire([key], config.leaseMs);
        return { release: async () => void await lock.release() };
      } catch (error) {
        // Every attempt found the key held: the wait ran out.
        if (error instanceof ExecutionError && config.waitMs > 0) return null;
        throw error;
      }
    },
    async close() {
      await redis.quit();
    },
  };
};
