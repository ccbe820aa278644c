/**
 * Answers to the inspection requests (docs/protocol.md, "Inspection"): `I <key>` (one key),
 * `L <prefix> <limit> [<after>]` (a page of held keys) and `S -` (this node's status), read
 * from the lock table and the owners without changing them, and the same pages for the
 * HTTP layer ({@linkcode keyInfos}). The session decides who may ask (gate, prefix); this
 * module only reads.
 *
 * @module
 */

import {
  freeReply,
  heldReply,
  type InspectKeyRequest,
  type KeyInfo,
  type LocksPage,
  locksReply,
  type LocksRequest,
  type NodeStatus,
  statusReply,
} from "../client/codec.ts";
import type { Holder } from "./engine/lock_table.ts";
import type { Owners } from "./owners.ts";

/** The read-only part of the lock table inspection uses. */
export interface InspectedTable {
  /** The grant of `key` as the table stands. */
  peek(key: string): Holder | undefined;
  /** Acquires queued behind the holder of `key`. */
  waitersOf(key: string): number;
  /** Up to `limit` held keys starting with `prefix`, after `after`, in key order. */
  heldKeys(prefix: string, limit: number, after?: string): string[];
}

/** What answering inspection requests needs. */
export interface Inspection {
  /** The lock table's clock (ms): lease deadlines are on it. */
  clock(): number;
  /** Who holds what (holder names). */
  owners?: Owners;
  /** This node's status now. */
  status(): NodeStatus;
}

/**
 * Below this (ms), what is left of a lease is floating-point noise: `(t + 60000) - t` is
 * 60000.00000000001 for some clock readings `t`, which rounded up would show a lease of 60 s
 * granted in this very turn as 60.001 s left.
 */
const NOISE_MS = 1e-6;

/** What is left of a lease ending at `deadline`, at `now`: whole ms rounded up, at least 0. */
function leaseLeftMs(deadline: number, now: number): number {
  return Math.max(0, Math.ceil(deadline - now - NOISE_MS));
}

/** The name of the client holding `holder`, or `null` (no hello, or unknown). */
function holderName(holder: Holder, owners: Owners | undefined): string | null {
  return holder.owner === 0 ? null : owners?.get(holder.owner)?.name ?? null;
}

/**
 * The page of held keys starting with `prefix` (`""`: every key) after `after`, at most
 * `limit` of them, in key order, with whether more follow.
 */
export function keyInfos(
  table: InspectedTable,
  ctx: Pick<Inspection, "clock" | "owners">,
  prefix: string,
  limit: number,
  after?: string,
): LocksPage {
  const now = ctx.clock();
  const keys = table.heldKeys(prefix, limit + 1, after);
  const locks: KeyInfo[] = [];
  for (const key of keys.slice(0, limit)) {
    const holder = table.peek(key)!;
    locks.push({
      key,
      token: String(holder.token),
      holder: holderName(holder, ctx.owners),
      leaseLeftSeconds: leaseLeftMs(holder.deadline, now) / 1000,
      waiters: table.waitersOf(key),
    });
  }
  return { locks, more: keys.length > limit };
}

/** The reply to `I <key>`. */
export function inspectKeyReply(
  table: InspectedTable,
  ctx: Inspection,
  request: InspectKeyRequest,
): string {
  const holder = table.peek(request.key);
  if (holder === undefined) return freeReply(request.key);
  return heldReply(
    request.key,
    holder.token,
    leaseLeftMs(holder.deadline, ctx.clock()),
    table.waitersOf(request.key),
    holderName(holder, ctx.owners) ?? undefined,
  );
}

/**
 * The reply to `L <prefix> <limit> [<after>]`, for a connection whose keys must start with
 * `allowed` (`""`: any): `-` lists the keys under `allowed`. The page stops before the line
 * would pass the client's reply limit (`more` is then true).
 */
export function locksPageReply(
  table: InspectedTable,
  ctx: Inspection,
  request: LocksRequest,
  allowed: string,
): string {
  const page = keyInfos(table, ctx, request.prefix ?? allowed, request.limit, request.after);
  return locksReply(request.key, page.locks, page.more);
}

/** The reply to `S -`. */
export function statusReplyOf(ctx: Inspection): string {
  return statusReply(ctx.status());
}
