/**
 * The pure parts of a handover (docs/cluster.md, "Graceful stop of the active", "Two actives
 * at once"): how long a sender waits for `TAKEN`, and how the receiver merges carried
 * holders into its own table. The exchange itself is in `handover.ts`.
 *
 * @module
 */

import { NO_ACTIVE_NODE, type Refusal } from "../../client/codec.ts";
import type { Holder } from "../engine/lock_table.ts";
import type { Owner, Owners } from "../owners.ts";
import type { HandoffBegin } from "./peer_codec.ts";
import type { ReplicatedTable, TokenMark } from "./ports.ts";

/** A holder carried by a `full` handover (`H key token remainingMs` lines). */
export interface Carried {
  /** The key. */
  key: string;
  /** Its grant's token. */
  token: bigint;
  /** Lease left, in ms. */
  remainingMs: number;
  /** Its owner's id on the sender (0: unknown). */
  owner: number;
}

/**
 * How long a sender waits for `TAKEN` (ms): a live successor confirms within a round trip;
 * a paused one must not cost a whole failover timeout before the next is tried.
 */
export function handoffLimitMs(heartbeatMs: number, failoverTimeoutMs: number): number {
  return Math.min(failoverTimeoutMs, Math.max(300, 5 * heartbeatMs));
}

/** What the receiver of a handover knows of itself, to merge. */
export interface MergeContext {
  /** Its table. */
  table: ReplicatedTable;
  /** Its token mark. */
  tokens: TokenMark;
  /** Now, ms. */
  now: number;
  /** Its own activation when it is active itself (two actives merging), else `undefined`. */
  ownActivation: string | undefined;
  /** Its owners: the carried owners are interned here (ids differ between nodes). */
  owners: Owners;
}

/**
 * Merges a handover into the receiver's table and tokens (docs/cluster.md, "Two actives at
 * once"). Tokens go above the sender's last token first, so nothing is granted below it.
 * In `full` mode (`carried`) the carried holders go in before anything is settled: the
 * receiver's own leases that ran out while it was frozen must not pass to its waiters ahead
 * of the fresher state. Every key keeps the grant with the higher token. When the sender
 * had been this node's replica before it became active (its predecessor is this node's
 * activation), this node's own grants that the sender had seen (tokens up to
 * `predecessorToken`) but no longer holds were released or expired over there since: they
 * are dropped (their waiters, if any, then get the key with a new token), not resurrected.
 */
export function mergeHandoff(
  ctx: MergeContext,
  header: HandoffBegin,
  carried: readonly Carried[] | undefined,
  carriedOwners: readonly Owner[] = [],
): void {
  const { table, tokens, now } = ctx;
  // Above every token the old active issued: it froze before sending its last token. And
  // above its reservation, which its followers may still report as their highest known
  // (after a merge they would otherwise make this node rise once more, with a warning).
  tokens.raiseTo(header.lastToken);
  tokens.raiseTo(header.mark);
  if (carried === undefined) return;
  for (const c of carried) tokens.raiseTo(c.token);
  let stale: Holder[] = [];
  if (ctx.ownActivation !== undefined && header.predecessor === ctx.ownActivation) {
    const theirs = new Map(carried.map((c) => [c.key, c.token]));
    stale = [...table.holders(false)].filter((h) =>
      h.token <= header.predecessorToken && (theirs.get(h.key) ?? 0n) !== h.token
    );
  }
  // The sender's owner ids mean nothing here: the same owners by identity, with local ids.
  const ids = new Map<number, number>();
  for (const o of carriedOwners) ids.set(o.id, ctx.owners.intern(o.name, o.session, o.bound).id);
  for (const c of carried) {
    table.restore(c.key, c.token, now + c.remainingMs, false, ids.get(c.owner) ?? 0);
  }
  for (const h of stale) table.release(h.key, h.token);
}

/** What a node that stepped down answers its queued and parked requests (clients retry). */
export const NO_ACTIVE: Refusal = { status: "E", text: NO_ACTIVE_NODE };

/** The redirect a node that handed over gives its queued and parked requests. */
export function redirectTo(address: string): Refusal {
  return { status: "M", text: address };
}
