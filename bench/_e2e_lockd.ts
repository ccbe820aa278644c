/**
 * lockd's `LockClient` as a {@linkcode LockSystem} of the end-to-end benchmark: one client
 * (its default two connections to a single node), `acquire(key, { lease, wait })` and
 * `lock.release()`. The server queues waiters, so an acquire on a held key simply waits.
 *
 * @module
 */

import { LockClient, LockTimeoutError } from "../mod.ts";
import type { LockClientOptions } from "../mod.ts";
import type { LockSystem, OpenSystem, SystemConfig } from "./_e2e_workload.ts";

/** Opens one `LockClient` to `config.address`. */
export const open: OpenSystem = async (config: SystemConfig): Promise<LockSystem> => {
  const options: LockClientOptions = { connectionsPerAddress: config.connectionsPerAddress };
  if (config.transport) {
    const { connectNodeTcp } = await import(config.transport);
    options.connect = connectNodeTcp;
  }
  const client = new LockClient(config.address, options);
  const lease = config.leaseMs / 1000;
  return {
    async acquire(key, waitMs) {
      try {
        return await client.acquire(key, { lease, wait: waitMs / 1000 });
      } catch (error) {
        if (error instanceof LockTimeoutError) return null;
        throw error;
      }
    },
    close: () => client.close(),
  };
};
