/**
 * Token lanes (docs/cluster.md, "Token succession"): in a cluster every node issues fencing
 * tokens from its own slabs of the token space only, so two nodes active at once (a
 * partition, a paused active that resumed) never issue the same token, however long the
 * split lasts and whatever floors their promotions chose. The space is cut into slabs of
 * {@linkcode LANE_SLAB} tokens; slab `k` belongs to the node at position
 * `k mod TOKEN_LANES` of `--peers`. Within a slab a node's tokens are consecutive; past its
 * end they continue at the start of the node's next slab. A single node has no lane. Pure.
 *
 * @module
 */

/** Lanes of the token space: a cluster has at most this many nodes. */
export const TOKEN_LANES = 16;

/** Tokens per slab (2^20): a lane's tokens are consecutive within one. */
export const LANE_SLAB: bigint = 1n << 20n;

const LANES = BigInt(TOKEN_LANES);

/** The lane whose slabs hold `token` (0 to 15). */
export function laneOfToken(token: bigint): number {
  return Number((token / LANE_SLAB) % LANES);
}

/**
 * The token a node issues after `last` (its last token, or a floor it was raised to): the
 * next one in lane `lane` (its position in `--peers`, 0 to 15), or `last + 1` for a single
 * node (`undefined`). May pass 2^64-1: the caller refuses that.
 *
 * @example
 * ```ts ignore
 * tokenAfter(41n, undefined); // 42n
 * tokenAfter(41n, 0); // 42n: slab 0 is lane 0's
 * tokenAfter(41n, 1); // 1048576n: the start of slab 1, lane 1's first
 * tokenAfter(1048576n * 2n - 1n, 1); // 1048576n * 17n: past slab 1, lane 1's next is slab 17
 * ```
 */
export function tokenAfter(last: bigint, lane: number | undefined): bigint {
  const token = last + 1n;
  if (lane === undefined) return token;
  const slab = token / LANE_SLAB;
  const skip = (BigInt(lane) - slab % LANES + LANES) % LANES;
  return skip === 0n ? token : (slab + skip) * LANE_SLAB;
}

/**
 * The lane of node `self` in a cluster of `peers` (the `--peers` list, in priority order):
 * its position.
 *
 * @throws {RangeError} If `self` is not in `peers`, or `peers` has more than
 * {@linkcode TOKEN_LANES} nodes.
 */
export function laneOf(self: string, peers: readonly string[]): number {
  if (peers.length > TOKEN_LANES) {
    throw new RangeError(
      `A cluster has at most ${TOKEN_LANES} nodes, --peers lists ${peers.length}`,
    );
  }
  const lane = peers.indexOf(self);
  if (lane < 0) throw new RangeError(`--peers must contain this node's address ${self}`);
  return lane;
}

/**
 * The `count`-th token of lane `lane` after `from` (`count` at least 1; a single node:
 * `from + count`): how far a node must reserve, and announce, to cover its next `count`
 * tokens, a jump to its next slab included (docs/cluster.md, "Token succession").
 *
 * @example
 * ```ts ignore
 * laneAhead(41n, 5n, undefined); // 46n
 * laneAhead(LANE_SLAB - 3n, 5n, 0); // 16n * LANE_SLAB + 2n: two in slab 0, three in slab 16
 * ```
 */
export function laneAhead(from: bigint, count: bigint, lane: number | undefined): bigint {
  if (lane === undefined) return from + count;
  let at = from;
  let left = count;
  for (;;) {
    const next = tokenAfter(at, lane);
    const last = next - next % LANE_SLAB + LANE_SLAB - 1n; // the last token of next's slab
    if (left - 1n <= last - next) return next + left - 1n;
    left -= last - next + 1n;
    at = last;
  }
}

/**
 * How far past a known token `count` tokens of some lane can reach, at most: `laneAhead(x,
 * count, lane) - x <= laneReach(count)` for every `x` and lane. A promotion adds it to the
 * marks it knows (succession.ts): whichever lane the dead active issued from, the tokens it
 * may have issued past the last mark this node heard are below the new floor.
 */
export function laneReach(count: bigint): bigint {
  const slabs = (count + LANE_SLAB - 1n) / LANE_SLAB;
  return slabs * LANES * LANE_SLAB;
}

/**
 * Which marks are a node's own, for an active judging a follower's mark (docs/cluster.md,
 * "Token succession"): at or below its announced mark and in its lane (any, for a single
 * node), or one of the last marks it announced itself (a floor it was raised to, exactly, in
 * whatever lane; a single node's reservation at start). A follower echoing one of those is
 * no sign of a token another node issued.
 */
export class OwnMarks {
  #lane: number | undefined;
  #recent: bigint[] = [];

  /** @param lane The node's lane (`undefined` for a single node). */
  constructor(lane: number | undefined) {
    this.#lane = lane;
  }

  /** The node announced `mark` (a reservation, `W`). The last 8 are kept. */
  announced(mark: bigint): void {
    this.#recent.push(mark);
    if (this.#recent.length > 8) this.#recent.shift();
  }

  /** Whether `mark` is the node's own, `announced` being its highest announced mark. */
  owns(mark: bigint, announced: bigint): boolean {
    if (mark > announced) return false;
    return this.#lane === undefined || laneOfToken(mark) === this.#lane ||
      this.#recent.includes(mark);
  }
}
