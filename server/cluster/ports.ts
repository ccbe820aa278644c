/**
 * What the cluster's role machine needs from the world, as interfaces: the lock server it
 * drives, the token mark, the peer network and timers. The server wires real ones
 * (`server.ts`, `network.ts`); unit tests wire fakes with a fake clock.
 *
 * @module
 */

import type { Refusal } from "../../client/codec.ts";
import type { Holder } from "../engine/lock_table.ts";
import type { Logger } from "../log.ts";
import type { Owners } from "../owners.ts";
import type { Role } from "./election.ts";
import type { PeerMessage } from "./peer_codec.ts";
import type { ReplicationMode } from "./replication.ts";

/** The part of the lock table a cluster node replicates and merges. */
export interface ReplicatedTable {
  /** Queued acquires (a failback with waiters waits for clients to reconnect). */
  readonly waiting: number;
  /** Every current grant (without settling what is due when `settle` is false). */
  holders(settle?: boolean): Iterable<Holder>;
  /**
   * Installs a grant from elsewhere, held by `owner`, unless the key has a higher token
   * (without settling what is due first when `settle` is false).
   */
  restore(key: string, token: bigint, deadline: number, settle?: boolean, owner?: number): boolean;
  /** Drops the grant of `key` if it carries `token` (a replicated release). */
  forget(key: string, token: bigint): boolean;
  /** Releases a grant, passing it to the next waiter. */
  release(key: string, token: bigint): boolean;
  /** Drops every grant and waiter (a standby before a snapshot). */
  clear(): void;
}

/** The fencing-token mark of this node (`TokenStore`). */
export interface TokenMark {
  /** The last token issued or known. */
  readonly last: bigint;
  /** The mark reserved on disk. */
  readonly reserved: bigint;
  /**
   * The highest mark announced to the standbys (`W`): the reserved one, or one whose write is
   * still in flight. No token above it has been issued. What peers are told, and what they
   * are compared with.
   */
  readonly announced: bigint;
  /**
   * Whether `mark` is this node's own: at or below its announced mark and in its token lane
   * (server/token_lanes.ts), or one of the marks it announced lately. A follower echoing it
   * back is no sign of a token another node issued.
   */
  owns(mark: bigint): boolean;
  /** Tokens per reserved block. */
  readonly block: bigint;
  /** Makes every later token greater than `floor`, persisting it. */
  raiseTo(floor: bigint): void;
  /**
   * The last token this node issued itself, or the mark it started from: what it may have
   * issued that no other node knows of (`last` may hide it behind a larger mark it learned).
   */
  readonly own: bigint;
}

/** What the cluster node needs from the lock server it runs in. */
export interface ServerPort {
  /** The lock table (replicated to standbys, fed by the active). */
  table: ReplicatedTable;
  /** The token high-water mark. */
  tokens: TokenMark;
  /** Who holds what (replicated with the grants). */
  owners: Owners;
  /** Monotonic clock, ms. */
  clock(): number;
  /** Answers every queued acquire with `refusal` (e.g. `M host:port`), removing it. */
  answerQueued(refusal: Refusal): void;
  /** Re-handles requests parked while the role was unsettled. */
  unpark(): void;
  /**
   * Closes every client connection whose replies wait for an acknowledgement that will
   * never come (this node stepped down): its client retries elsewhere.
   */
  dropUnconfirmed(): void;
  /**
   * Before a handover (sync replication): moves the leases of grants whose replies are held
   * later by the time held so far (docs/cluster.md, "Replication modes"), so the handover
   * carries them as their clients will date them.
   */
  prolongHeld?(): void;
  /**
   * Lease timers may run again: settle what is due and re-arm. `afterFreeze`: this active
   * serves again after a freeze (SIGSTOP, a stall) long enough for another node to have
   * taken over (the failover timeout), so the grace of sessions starts over.
   */
  resumeTimers(afterFreeze?: boolean): void;
  /** Another active's state was merged into this node's: the grace of sessions starts over. */
  merged?(): void;
  /** Called on every role change, with a readable description. */
  roleChanged(role: Role, description: string): void;
  /** This node becomes active after the active was lost (`failover`) or by a handover (metrics). */
  promoted?(how: "failover" | "handoff"): void;
  /** Where events are reported. */
  log: Logger;
}

/** The links to the other nodes: one outbound connection per peer, redialled while down. */
export interface PeerNetwork {
  /** Sends `message` to `to` (dropped if its link is down: heartbeats repeat, streams resync). */
  send(to: string, message: PeerMessage): void;
  /** Sends `message` to each of `to`, encoding it once. */
  broadcast(to: Iterable<string>, message: PeerMessage): void;
  /** Whether the link to `address` is up. */
  up(address: string): boolean;
}

/** Cluster settings. */
export interface ClusterOptions {
  /** This node's address, as it appears in `peers`. */
  self: string;
  /** Every node's address, in priority order (this one included). */
  peers: readonly string[];
  /** Heartbeat interval, in ms. */
  heartbeatMs: number;
  /** Silence after which a peer counts as dead, in ms. */
  failoverTimeoutMs: number;
  /** `sync`: answer changes once an in-sync standby acknowledged them. Default `async`. */
  replication?: ReplicationMode;
}

/** What the node is given to act on the world. */
export interface ClusterIo {
  /** The links to the peers. */
  network: PeerNetwork;
  /** Timers. */
  scheduler: Scheduler;
  /** A new activation id. Default: 8 random hex digits. */
  newActivation?: () => string;
  /** The wall clock, ms since the epoch (token succession). Default `Date.now`. */
  wallClock?: () => number;
}

/** What the parts of a node share: its table, tokens, clock, links and timers. */
export interface ClusterContext {
  /** The lock table. */
  table: ReplicatedTable;
  /** The token mark. */
  tokens: TokenMark;
  /** Who holds what. */
  owners: Owners;
  /** Monotonic clock, ms. */
  clock(): number;
  /** The links to the peers. */
  network: PeerNetwork;
  /** Timers. */
  scheduler: Scheduler;
}

/** A function that cancels a scheduled callback. */
export type Cancel = () => void;

/** Timers, injected so tests run the role machine on a fake clock. */
export interface Scheduler {
  /** Calls `fn` every `ms` milliseconds until cancelled. */
  every(ms: number, fn: () => void): Cancel;
  /** Calls `fn` once after `ms` milliseconds unless cancelled. */
  after(ms: number, fn: () => void): Cancel;
}
