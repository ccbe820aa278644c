/**
 * A cluster node's part of its status (docs/protocol.md, "Inspection"): its role, the
 * active it knows of, replication (mode, degraded, the standbys in sync) and what it knows
 * of each peer (role, liveness, sync, lag, when last heard), read from the role machine
 * without changing it; and whether the node is ready (`/readyz`). Pure.
 *
 * @module
 */

import type { NodeStatus, PeerStatus } from "../../client/codec.ts";
import type { Gate } from "../session_context.ts";
import type { Role } from "./election.ts";
import type { PeerState } from "./peer_views.ts";
import type { ReplicationMode } from "./replication.ts";

/** What the status reads of a role machine (`ClusterNode` has it). */
export interface ClusterView {
  /** The node's role. */
  readonly role: Role;
  /** The active it knows of (itself when active). */
  readonly activeAddress: string | undefined;
  /** Its replica: in sync with the active it follows. */
  readonly replica: { readonly synced: boolean };
  /** The active's replication stream. */
  readonly stream: {
    readonly degraded: boolean;
    inSync(): string[];
    lagMs(address: string, now: number): number | undefined;
  };
  /** What it knows of its peers. */
  readonly peers: {
    addresses(): Iterable<string>;
    get(address: string): PeerState | undefined;
    isLive(address: string, now: number): boolean;
  };
  /** How it treats a client request now. */
  gate(): Gate;
}

/** The cluster part of a node's status. */
export type ClusterStatus = Pick<NodeStatus, "role" | "active" | "replication" | "peers">;

/**
 * The status of the cluster node `node`, whose address is `self`, at `now` (ms, the node's
 * clock).
 */
export function clusterStatus(
  node: ClusterView,
  self: string,
  mode: ReplicationMode,
  now: number,
): ClusterStatus {
  const role = node.role;
  const active = role === "active" || role === "handing-off";
  const gate = node.gate();
  const peers: PeerStatus[] = [];
  for (const address of node.peers.addresses()) {
    const peer = node.peers.get(address)!;
    const lag = active ? node.stream.lagMs(address, now) : undefined;
    peers.push({
      address,
      role: peer.role,
      live: node.peers.isLive(address, now),
      synced: peer.synced,
      lagMs: lag === undefined ? null : Math.round(lag),
      lastHeardMs: Number.isFinite(peer.lastHeard) ? Math.round(now - peer.lastHeard) : null,
    });
  }
  return {
    role,
    active: active
      ? self
      : gate.kind === "refuse" && gate.refusal.status === "M"
      ? gate.refusal.text
      : null,
    replication: {
      mode,
      degraded: active && node.stream.degraded,
      inSync: active ? node.stream.inSync() : node.replica.synced ? [self] : [],
    },
    peers,
  };
}

/**
 * Whether a cluster node is ready (`/readyz`): the active while it serves (not frozen, not
 * handing over), or a standby in sync with an active it can vouch for (it redirects to it).
 */
export function clusterReady(node: ClusterView): boolean {
  const gate = node.gate();
  if (node.role === "active") return gate.kind === "serve";
  return node.role === "standby" && node.replica.synced && gate.kind === "refuse" &&
    gate.refusal.status === "M";
}
