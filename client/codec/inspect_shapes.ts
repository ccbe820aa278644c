/**
 * The JSON shapes of the inspection replies (docs/protocol.md, "Inspection"): a node's
 * status (`S`), a page of held keys (`L`) and a key as a client sees it (`I`), shared by the
 * server that builds them and the client that reads them. Part of the codec
 * (`@lockd/client/codec`).
 *
 * @module
 */

/** A node's role (docs/cluster.md, "Roles"); a single node is `active` (`leaving` while stopping). */
export type NodeRole = "starting" | "standby" | "active" | "handing-off" | "leaving";

/** Reasons a node counts its `E` replies under (the `counts.rejections` keys). */
export type RejectionReason =
  | "bad_request"
  | "auth"
  | "prefix"
  | "no_active"
  | "shutting_down"
  | "limits"
  | "other";

/** Every {@linkcode RejectionReason}, in the order they are reported. */
export const REJECTION_REASONS: readonly RejectionReason[] = [
  "bad_request",
  "auth",
  "prefix",
  "no_active",
  "shutting_down",
  "limits",
  "other",
];

/** One held key, as an `L` page carries it (JSON). */
export interface KeyInfo {
  /** The key. */
  key: string;
  /** The holder's fencing token, as a decimal string (u64). */
  token: string;
  /** The holder's client name from its hello, or `null` if it sent none. */
  holder: string | null;
  /** Lease left, in seconds (millisecond precision). */
  leaseLeftSeconds: number;
  /** Acquires queued behind the holder. */
  waiters: number;
}

/** One peer of a cluster node, as that node sees it (JSON of `S`). */
export interface PeerStatus {
  /** Its `--peers` address. */
  address: string;
  /** The role it last announced. */
  role: NodeRole;
  /** Whether it was heard within the failover timeout. */
  live: boolean;
  /** Whether its last heartbeat said it is in sync with the active. */
  synced: boolean;
  /**
   * On the active: how long (ms) the oldest change this standby has not acknowledged has
   * waited (0: caught up); `null` elsewhere, or before it acknowledged its stream.
   */
  lagMs: number | null;
  /** Milliseconds since anything was heard from it; `null` if never. */
  lastHeardMs: number | null;
}

/** What a node counted since it started (JSON of `S`). */
export interface NodeCounts {
  /** Locks granted (at once or to a waiter). */
  grants: number;
  /** Releases that released (`R`). */
  releases: number;
  /** Extends that extended (`X`). */
  extends: number;
  /** Leases that ran out. */
  expirations: number;
  /** Waits that ran out (`T`). */
  timeouts: number;
  /** `E` replies, by reason. */
  rejections: Record<RejectionReason, number>;
  /** Promotions of this node after the active was lost. */
  failovers: number;
  /** Graceful takeovers by this node (handoffs and failbacks). */
  handoffs: number;
}

/** A node's status: the JSON of `S - S <json>` (docs/protocol.md, "Inspection"). */
export interface NodeStatus {
  /** This node's address (its `--peers` entry, or its listen address). */
  address: string;
  /** The server's version. */
  version: string;
  /** Its role. */
  role: NodeRole;
  /** The active node it knows of (itself when active), or `null`. */
  active: string | null;
  /** Seconds since it started. */
  uptimeSeconds: number;
  /** Replication: `none` on a single node; `inSync` lists in-sync standbys (a standby: itself). */
  replication: { mode: "async" | "sync" | "none"; degraded: boolean; inSync: string[] };
  /** Its peers, in `--peers` order (empty for a single node). */
  peers: PeerStatus[];
  /** Client connections open. */
  connections: number;
  /** Client sessions with a connection open or within their grace period. */
  sessions: number;
  /** Keys held. */
  holders: number;
  /** Acquires queued. */
  waiters: number;
  /** The last token issued or known, and the reserved mark, as decimal strings (u64). */
  tokens: { last: string; mark: string };
  /** What it counted since it started. */
  counts: NodeCounts;
  /** Grants in each of the last (up to) 300 complete seconds, oldest first. */
  grantsPerSecond: number[];
}

/** One page of `L`: the JSON of `L <prefix> L <json>`. */
export interface LocksPage {
  /** Held keys, in key order. */
  locks: KeyInfo[];
  /** Whether more keys follow (ask again with `after` = the last key). */
  more: boolean;
}

/** A key as a client sees it after `I` (or in an `L` page). */
export interface KeyState {
  /** The key. */
  key: string;
  /** Whether someone holds it. */
  held: boolean;
  /** The holder's fencing token, when held. */
  token?: bigint;
  /** The holder's client name, when held by a client that said hello. */
  holder?: string;
  /** Lease left in seconds, when held. */
  leaseLeft?: number;
  /** Acquires queued behind the holder (0 when free). */
  waiters: number;
}
