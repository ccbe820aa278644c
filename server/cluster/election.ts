/**
 * Who should be active (docs/cluster.md), as a pure function of what one node knows: its own state
 * and the last heartbeat of each live peer. Priority promotion without quorum:
 *
 * - Among live nodes, the highest-priority one holding a replica of the last active's state
 *   becomes active (or the highest-priority live node at all when none holds one, e.g. a
 *   cold start): a node that restarted empty never wins over a replica.
 * - A standby follows the highest-priority live node that claims to be active (or that a
 *   live peer reports as its live active: a partial partition must not make a second one).
 * - Among replicas, the freshest activation's win: a replica that missed an activation
 *   never overrides one that saw it; and among those, the ones that applied its stream
 *   furthest: a grant another standby acknowledged is never lost to a laggard.
 * - An active that sees a higher-priority active steps down and hands its state over
 *   (demotion); an active that sees a higher-priority standby in sync with it hands over
 *   (failback). Handovers always go from lower to higher priority, so they cannot loop.
 *
 * @module
 */

/** A node's role, as heartbeats announce it. */
export type Role = "starting" | "standby" | "active" | "handing-off" | "leaving";

/** What a node knows of one live peer (from its last heartbeat). */
export interface PeerView {
  /** The peer's address (its `--peers` entry). */
  address: string;
  /** Position in `--peers`: 0 is the highest priority. */
  priority: number;
  /** Its announced role. */
  role: Role;
  /** Whether it is a standby in sync with the active node it follows. */
  synced: boolean;
  /** Whether it holds a complete replica of some active's state (even if no longer streaming). */
  replica: boolean;
  /** First-token floor of the activation its state belongs to: higher is more recent. */
  floor: bigint;
  /** The active it follows, if that one is live from where it stands. */
  activeAddress: string | undefined;
  /** The activation it is in sync with (a standby) or its own (an active), if any. */
  activation: string | undefined;
  /** How far it applied that activation's stream (the last batch it acknowledged). */
  position: number;
}

/** What a node knows of itself. */
export interface SelfView {
  /** Its address. */
  address: string;
  /** Its priority. */
  priority: number;
  /** Its role. */
  role: Role;
  /** Whether it is in sync with the active it follows (standby) or would be a safe choice. */
  synced: boolean;
  /** Whether it holds a complete replica of some active's state (even if no longer streaming). */
  replica: boolean;
  /** First-token floor of the activation its state belongs to: higher is more recent. */
  floor: bigint;
  /** Its own activation id while active. */
  activation: string | undefined;
  /** Milliseconds since it last heard a live active (or since it started). */
  sinceActiveMs: number;
  /** How far it applied its activation's stream (the last batch it acknowledged). */
  position: number;
}

/** What to do now. */
export type Decision =
  | { kind: "none" }
  | { kind: "follow"; address: string }
  | { kind: "promote" }
  | { kind: "hand-over"; address: string; merge: boolean };

/**
 * Decides the next step of one node from its own view and its live peers' heartbeats.
 *
 * @param self This node.
 * @param peers Peers heard from within the failover timeout.
 * @param failoverTimeoutMs Silence after which an active counts as gone.
 * @returns The step to take; `none` keeps the current role.
 *
 * @example A standby whose active went silent promotes if it ranks first
 * ```ts
 * import { decide } from "./election.ts";
 * decide(
 *   { address: "b", priority: 1, role: "standby", synced: true, replica: true, floor: 5n, activation: undefined, sinceActiveMs: 1200 },
 *   [{ address: "c", priority: 2, role: "standby", synced: true, replica: true, floor: 5n, activeAddress: undefined, activation: "x" }],
 *   1000,
 * ); // { kind: "promote" }
 * ```
 */
export function decide(
  self: SelfView,
  peers: readonly PeerView[],
  failoverTimeoutMs: number,
): Decision {
  const actives = peers.filter((p) => p.role === "active").sort((a, b) => a.priority - b.priority);
  if (self.role === "active") {
    const higherActive = actives.find((p) => p.priority < self.priority);
    if (higherActive) return { kind: "hand-over", address: higherActive.address, merge: true };
    const heir = peers
      .filter((p) =>
        p.priority < self.priority && p.role === "standby" && p.synced &&
        p.activation === self.activation
      )
      .sort((a, b) => a.priority - b.priority)[0];
    if (heir) return { kind: "hand-over", address: heir.address, merge: false };
    return { kind: "none" };
  }
  if (self.role !== "standby" && self.role !== "starting") return { kind: "none" };
  if (actives.length > 0) return { kind: "follow", address: actives[0].address };
  // An active this node cannot hear but a live peer can (a partial partition): it is alive,
  // so follow it (clients get `M` to it) rather than promote a second one.
  const relayed = peers
    .filter((p) => p.activeAddress !== undefined && p.activeAddress !== self.address)
    .sort((a, b) => a.priority - b.priority)[0];
  if (relayed !== undefined) return { kind: "follow", address: relayed.activeAddress! };
  if (self.sinceActiveMs < failoverTimeoutMs) return { kind: "none" };
  // Nobody is active: the highest-priority live node holding a replica of the last state
  // takes over (its stream stopped when the active died); if nobody holds one (a cold
  // start), the highest-priority live node. A node that restarted empty never wins over a
  // replica.
  const candidates = [
    { ...self, busy: false },
    ...peers.map((p) => ({ ...p, busy: p.role === "handing-off" || p.role === "leaving" })),
  ].filter((c) => !c.busy);
  const anyReplica = candidates.some((c) => c.replica);
  let eligible = candidates.filter((c) => c.replica || !anyReplica);
  // Among replicas, those of the most recent activation: a replica that missed an
  // activation (a paused standby) must not wipe the grants a fresher one holds.
  const freshest = eligible.reduce((max, c) => c.floor > max ? c.floor : max, 0n);
  eligible = eligible.filter((c) => !c.replica || c.floor === freshest);
  // And among those, the ones that applied its stream furthest: in sync replication a grant
  // was answered once one standby acknowledged it, maybe not the highest-priority one (it
  // lagged, or was paused), and the one that did must not lose it to a laggard.
  const furthest = eligible.reduce((max, c) => c.replica && c.position > max ? c.position : max, 0);
  eligible = eligible.filter((c) => !c.replica || c.position === furthest);
  const best = Math.min(...eligible.map((c) => c.priority));
  return eligible.some((c) => c.priority === self.priority) && best === self.priority
    ? { kind: "promote" }
    : { kind: "none" };
}

/** Choose the node to hand over to on a graceful stop: the best live standby, in sync first. */
export function successor(self: SelfView, peers: readonly PeerView[]): PeerView | undefined {
  return peers
    .filter((p) => p.role === "standby" || p.role === "starting")
    .sort((a, b) => {
      const aSynced = a.synced && a.activation === self.activation;
      const bSynced = b.synced && b.activation === self.activation;
      return aSynced === bSynced ? a.priority - b.priority : aSynced ? -1 : 1;
    })[0];
}
