/**
 * Token succession (docs/cluster.md, "Token succession"): the pure rules by which fencing
 * tokens keep growing cluster-wide, whichever node issues them. A node that becomes active
 * starts above every mark it knows ({@linkcode promotionFloor}); a node that hears a higher
 * mark in a heartbeat raises its own ({@linkcode heartbeatFloor}).
 *
 * @module
 */

import type { Logger } from "../log.ts";
import type { Role } from "./election.ts";
import type { TokenMark } from "./ports.ts";
import { laneReach } from "../token_lanes.ts";

/** What a node knows of token marks when it promotes. */
export interface SuccessionInput {
  /** The last token it issued or knows of. */
  last: bigint;
  /** The highest mark a peer announced. */
  peersMark: bigint;
  /** Whether it has peers at all (a single node needs no margin). */
  clustered: boolean;
  /** Tokens per reserved block. */
  block: bigint;
  /** Wall clock, ms since the epoch. */
  wallMs: number;
}

/**
 * The token floor of a new activation (docs/cluster.md, "Token succession"): above every
 * token seen replicated or announced and every peer's mark, with two blocks of margin for
 * grants the old active made but had not replicated (in a cluster, two blocks of its lane,
 * whichever it was: {@linkcode laneReach}, about 34 million tokens with the default block);
 * and in a cluster above the wall clock in nanoseconds, so that even a node that missed the
 * latest activation (it died first, then came back alone) starts above it, as long as
 * clocks agree and the cluster grants fewer than a billion tokens a second (u64 lasts until
 * 2554).
 *
 * @example
 * ```ts ignore
 * promotionFloor({ last: 10n, peersMark: 0n, clustered: false, block: 1000n, wallMs: 0 }); // 2010n
 * ```
 */
export function promotionFloor(input: SuccessionInput): bigint {
  let floor = input.last > input.peersMark ? input.last : input.peersMark;
  if (!input.clustered) return floor + 2n * input.block;
  const wallNanos = BigInt(Math.floor(input.wallMs)) * 1_000_000n;
  if (wallNanos > floor) floor = wallNanos;
  // Two blocks of the dead active's lane, whichever it was (token_lanes.ts).
  return floor + laneReach(2n * input.block);
}

/**
 * The two marks a node announces in its heartbeat. An active (or one handing off): the block
 * it reserved, which it may issue up to, as both. Any other node: `mark`, the highest token
 * or mark it knows of (announcing its own reservations would make nodes raise each other
 * block after block), and `own`, the last token it issued itself or the mark it started
 * from, which `mark` may hide behind a larger one learned from the active in another lane
 * (an active checks both, {@linkcode heartbeatFloor}).
 */
export function heartbeatMarks(
  role: Role,
  tokens: { last: bigint; own: bigint; announced: bigint },
): { mark: bigint; own: bigint } {
  if (role === "active" || role === "handing-off") {
    return { mark: tokens.announced, own: tokens.announced };
  }
  return { mark: tokens.last, own: tokens.own };
}

/** A heartbeat's sender, as {@linkcode heartbeatFloor} needs it. */
export interface MarkSender {
  /** Its role. */
  role: Role;
  /** The active it follows, if it names one. */
  activeAddress: string | undefined;
  /** Its mark: an active's reserved block, anyone else's highest known token or mark. */
  mark: bigint;
  /** Its own mark ({@linkcode heartbeatMarks}). */
  own: bigint;
}

/**
 * The floor this node's tokens must be raised above on hearing `peer`'s heartbeat, or
 * `undefined` to leave them:
 *
 * - a node that is not active (nor handing off) takes an active's mark, which bounds every
 *   token that active may issue, so even a full-cluster restart never reuses one;
 * - an active takes the mark of a node that follows it when that mark is above its own
 *   reserved block: the follower knows a token this active never issued (it was active
 *   itself during a split brain, then restarted and rejoined as a standby, so no merge
 *   raised the winner above it), and the active's next tokens must exceed it.
 *
 * Two actives never raise each other, nor an active a node following another active: they
 * would leapfrog block after block (their merge raises the winner instead). A follower's
 * mark at or below the active's announced mark and in its lane is the active's own,
 * learned from its stream; one in another lane is another node's token, whatever its size.
 *
 * @example
 * ```ts ignore
 * const self = { address: "10.0.0.1:7321", role: "active" as const };
 * const peer = { role: "standby" as const, activeAddress: self.address, mark: 5000n, own: 0n };
 * const tokens = { last: 10n, owns: (mark: bigint) => mark <= 1000n };
 * heartbeatFloor(self, tokens, peer); // 5000n
 * ```
 */
export function heartbeatFloor(
  self: { address: string; role: Role },
  tokens: { last: bigint; owns(mark: bigint): boolean },
  peer: MarkSender,
): bigint | undefined {
  if (self.role === "active") {
    const follower = peer.role !== "active" && peer.role !== "handing-off" &&
      peer.activeAddress === self.address;
    if (!follower) return undefined;
    // Another lane's token is another node's, even below this node's reservation (which
    // runs ahead in its own lane); a mark it announced itself comes back as an echo. The
    // follower's own mark counts too: its highest known may be this node's reservation.
    const foreign = (mark: bigint) => mark > tokens.last && !tokens.owns(mark);
    const mark = foreign(peer.mark) ? peer.mark : undefined;
    return foreign(peer.own) && (mark === undefined || peer.own > mark) ? peer.own : mark;
  }
  if (self.role === "handing-off" || peer.role !== "active") return undefined;
  return peer.mark > tokens.last ? peer.mark : undefined;
}

/**
 * Applies {@linkcode heartbeatFloor} to `tokens` for a heartbeat from `from`; an active that
 * must raise its tokens logs it (`tokens-raised`): a node that issued higher tokens came
 * back as its follower.
 */
export function raiseOnHeartbeat(
  self: { address: string; role: Role },
  tokens: TokenMark,
  from: string,
  peer: MarkSender,
  log: Logger,
): void {
  const floor = heartbeatFloor(self, tokens, peer);
  if (floor === undefined) return;
  if (self.role === "active") {
    log.warn(`fencing tokens raised above ${floor}, the highest known to ${from}`, {
      event: "tokens-raised",
      peer: from,
      floor,
    });
  }
  tokens.raiseTo(floor);
}
