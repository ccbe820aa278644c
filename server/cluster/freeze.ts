/**
 * Noticing that this process was frozen (docs/cluster.md, "Two actives at once"): SIGSTOP,
 * a long GC pause or a stalled VM shows as a heartbeat that ran far too late. After one,
 * the node holds still (parks requests, freezes leases) until it has heard from its peers,
 * because they may have moved on without it.
 *
 * @module
 */

/** Watches the heartbeat's regularity on the monotonic clock. */
export class FreezeDetector {
  #lastTick: number;
  #since: number | undefined;
  #limitMs: number;
  #merged = new Set<string>();
  #gapMs = 0;

  /**
   * @param now The clock at start (ms).
   * @param limitMs A gap between heartbeats longer than this is a freeze.
   */
  constructor(now: number, limitMs: number) {
    this.#lastTick = now;
    this.#limitMs = limitMs;
  }

  /** When the current freeze was noticed, or `undefined` when not suspecting one. */
  get since(): number | undefined {
    return this.#since;
  }

  /**
   * Checks the gap since the last heartbeat; returns `true` when it just noticed a freeze. A
   * second freeze while one is being settled starts it again: what the node heard between
   * the two is as old as what it heard before the first.
   */
  check(now: number): boolean {
    if (now - this.#lastTick <= this.#limitMs) return false;
    // Paused again before the last freeze settled: the longest pause is the one that counts.
    const gap = now - this.#lastTick;
    this.#gapMs = this.#since === undefined ? gap : Math.max(this.#gapMs, gap);
    this.#since = now;
    this.#lastTick = now;
    this.#merged.clear();
    return true;
  }

  /**
   * The state of `address` (an active) was merged into this node's: during a freeze it no
   * longer counts as another active. Returns when the freeze was noticed, if one is on.
   */
  merged(address: string): number | undefined {
    if (this.#since !== undefined) this.#merged.add(address);
    return this.#since;
  }

  /**
   * How long the last freeze lasted (the heartbeat's gap), ms: the longest pause since it was
   * noticed, if the node was paused again before it settled; 0 before any.
   */
  get gapMs(): number {
    return this.#gapMs;
  }

  /** The nodes whose state was merged into this one's during the current freeze. */
  get mergedPeers(): ReadonlySet<string> {
    return this.#merged;
  }

  /** A heartbeat ran at `now`. */
  ticked(now: number): void {
    this.#lastTick = now;
  }

  /** The freeze is over: the node may act again. Returns whether it was suspecting one. */
  clear(): boolean {
    const was = this.#since !== undefined;
    this.#since = undefined;
    this.#merged.clear();
    return was;
  }
}

/** What a node that was frozen knows when it decides whether to act again. */
export interface FreezeView {
  /** Whether it is active (its state may be stale: it must not serve from it). */
  active: boolean;
  /** The live peers heard since the freeze was noticed. */
  fresh: readonly {
    address: string;
    role: string;
    activeAddress: string | undefined;
    floor: bigint;
    mark: bigint;
  }[];
  /**
   * Peers whose state it merged since (their `HANDOFF`): they follow it now, whatever their
   * last heartbeat said.
   */
  merged?: ReadonlySet<string>;
  /** How many peers it has in all. */
  peers: number;
  /** Whether a failover timeout has passed since the freeze was noticed. */
  waited: boolean;
  /** Its own address. */
  self: string;
  /** The floor of the activation its state belongs to. */
  floor: bigint;
  /** The token mark it reserved. */
  reserved: bigint;
}

/**
 * What a node that was frozen does next (docs/cluster.md, "Two actives at once"): `wait`
 * for word from its peers (decide nothing), stay `parked`, `resume`, or `step-down`. A
 * standby resumes on the first fresh word. An active:
 *
 * - stays `parked` while a peer shows that another node is active (one that is active or
 *   handing off, or names another active): that node's state is to be merged into its own
 *   (its `HANDOFF`); a node whose state it merged no longer counts, and it asks again at
 *   once, since another peer may still know a later activation;
 * - stays `parked` too while a peer knows a later activation (a higher floor) or tokens
 *   above any this node reserved, until it has heard every peer (or a failover timeout
 *   passed);
 * - then steps down (`step-down`) if a peer still knows a later activation: that activation's
 *   active is gone (nobody active is left to hand its state over), and its replica is fresher
 *   than this node's state, so the election must pick it;
 * - and otherwise resumes (a higher mark alone is raised above, not waited out).
 */
export function freezeVerdict(view: FreezeView): "wait" | "parked" | "resume" | "step-down" {
  if (view.fresh.length === 0 && !view.waited) return "wait";
  if (!view.active) return "resume";
  const activeElsewhere = view.fresh.some((p) =>
    !view.merged?.has(p.address) && (p.role === "active" || p.role === "handing-off" ||
      (p.activeAddress !== undefined && p.activeAddress !== view.self))
  );
  if (activeElsewhere) return "parked";
  const later = view.fresh.some((p) => p.floor > view.floor);
  const heardAll = view.fresh.length >= view.peers || view.waited;
  if (later) return heardAll ? "step-down" : "parked";
  if (view.fresh.some((p) => p.mark > view.reserved)) return "parked";
  return heardAll ? "resume" : "wait";
}
