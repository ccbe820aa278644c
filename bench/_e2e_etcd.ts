/**
 * The `etcd3` npm client's lock as a {@linkcode LockSystem} of the end-to-end benchmark:
 * `client.lock(key).ttl(lease).acquire()` and `.release()` (a lease, a create-if-absent
 * transaction, and the lease's revocation). It does not wait: on a held key it fails with
 * `EtcdLockFailedError`, and the adapter tries again every `pollMs` ms until the wait runs
 * out, as an application would.
 *
 * @module
 */

import { Etcd3, EtcdLockFailedError } from "npm:etcd3@1.1.2";
import type { LockSystem, OpenSystem, SystemConfig } from "./_e2e_workload.ts";

/** Opens one etcd3 client (one gRPC channel) to `config.address`. */
export const open: OpenSystem = (config: SystemConfig): Promise<LockSystem> => {
  const client = new Etcd3({ hosts: `http://${config.address}` });
  const ttl = Math.max(1, Math.round(config.leaseMs / 1000));
  return Promise.resolve({
    async acquire(key, waitMs) {
      const until = performance.now() + waitMs;
      for (;;) {
        const lock = client.lock(key).ttl(ttl);
        try {
          await lock.acquire();
          return { release: () => lock.release() };
        } catch (error) {
          if (!(error instanceof EtcdLockFailedError) || waitMs === 0) throw error;
          if (performance.now() + config.pollMs > until) return null;
          await new Promise((resolve) => setTimeout(resolve, config.pollMs));
        }
      }
    },
    close() {
      client.close();
      return Promise.resolve();
    },
  });
};
