/**
 * Late grants in sync replication (docs/cluster.md, "Replication modes"): a grant's reply
 * waits until a standby acknowledged it, and its client dates the lease from the reply (less
 * the round trip it measures). A reply held longer than a usual acknowledgement would leave
 * the client believing in its lease for longer than the server keeps it, so the server moves
 * the lease as much later when the reply goes out; a grant whose lease ran out meanwhile
 * (its key may have passed on already) is answered `T` instead, so its client never holds it.
 *
 * @module
 */

import { timeoutReply } from "../client/codec.ts";
import type { LockCounts, LockTable } from "./engine/lock_table.ts";

/**
 * Replies held for less than this (ms) keep their lease as it is: a usual acknowledgement,
 * which the client's measured round trip covers. Moving every lease would add a replicated
 * change to every grant.
 */
export const LATE_AFTER_MS = 5;

/**
 * The `lateGrant` hook of client sockets (`LineSocketOptions`) for `table`: moves the lease
 * of a grant whose reply was held `heldMs` (≥ {@linkcode LATE_AFTER_MS}) that much later;
 * returns `A <key> T` to send instead if the grant no longer holds the key. Such a `T` is
 * counted in `counts.timeouts` (the table's counters, shared with the metrics), so that
 * `lockd_timeouts_total` counts every `T` its clients got; the grant itself stays counted as a
 * grant and its lease as an expiration, as they happened in the table.
 */
export function lateGrant<T>(
  table: LockTable<T>,
  counts: LockCounts,
): (key: string, token: bigint, heldMs: number) => string | undefined {
  return (key, token, heldMs) => {
    if (heldMs < LATE_AFTER_MS || table.prolong(key, token, heldMs)) return undefined;
    counts.timeouts++;
    return timeoutReply(key);
  };
}
