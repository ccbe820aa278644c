/**
 * What one node knows of its peers, from their heartbeats (docs/cluster.md, "Peer
 * protocol"): who is live (heard within the failover timeout), what each announced, and
 * the views the election decides on.
 *
 * @module
 */

import type { PeerView, Role } from "./election.ts";
import type { Heartbeat } from "./peer_codec.ts";

/** The roles of a peer that may apply this node's stream. */
const STANDBY_ROLES: ReadonlySet<Role> = new Set<Role>(["starting", "standby"]);

/** The last word of one peer. */
export interface PeerState {
  /** Its `--peers` address. */
  readonly address: string;
  /** Position in `--peers`: 0 is the highest priority. */
  readonly priority: number;
  /** When anything was last heard from it (ms, this node's clock). */
  lastHeard: number;
  /** Its announced role. */
  role: Role;
  /** The active it follows, if live from where it stands. */
  activeAddress: string | undefined;
  /** Whether it is in sync. */
  synced: boolean;
  /** When its heartbeats last turned to "in sync" (ms, this node's clock). */
  syncedSince: number;
  /** Whether it holds a replica of some activation's state. */
  replica: boolean;
  /** That activation's first-token floor. */
  floor: bigint;
  /** Its token mark. */
  mark: bigint;
  /** Its own mark (the `HB` field `own`). */
  own: bigint;
  /** The activation it is in sync with, or its own. */
  activation: string | undefined;
  /** How far it applied that activation's stream (the last batch it acknowledged). */
  position: number;
}

/** The peers of one node (itself excluded). */
export class PeerViews {
  #peers = new Map<string, PeerState>();
  #timeoutMs: number;

  /**
   * @param peers Every node's address in priority order.
   * @param self This node's address (not a peer).
   * @param failoverTimeoutMs Silence after which a peer counts as dead.
   */
  constructor(peers: readonly string[], self: string, failoverTimeoutMs: number) {
    this.#timeoutMs = failoverTimeoutMs;
    peers.forEach((address, priority) => {
      if (address === self) return;
      this.#peers.set(address, {
        address,
        priority,
        lastHeard: -Infinity,
        role: "starting",
        activeAddress: undefined,
        synced: false,
        syncedSince: Infinity,
        replica: false,
        floor: 0n,
        mark: 0n,
        own: 0n,
        activation: undefined,
        position: 0,
      });
    });
  }

  /** Number of peers. */
  get size(): number {
    return this.#peers.size;
  }

  /** Every peer's address. */
  addresses(): IterableIterator<string> {
    return this.#peers.keys();
  }

  /** Whether `address` is a peer. */
  has(address: string): boolean {
    return this.#peers.has(address);
  }

  /** The state of `address`, if it is a peer. */
  get(address: string): PeerState | undefined {
    return this.#peers.get(address);
  }

  /**
   * Whether `address` counts as a standby for the replication stream at `now`: heard within
   * the failover timeout, and not leaving (a standby stopping gracefully says so before it
   * goes), active or handing over (it promoted itself: it applies no stream of ours).
   */
  serving(address: string, now: number): boolean {
    const role = this.#peers.get(address)?.role;
    return role !== undefined && STANDBY_ROLES.has(role) && this.isLive(address, now);
  }

  /** Anything from `address` arrived at `now`. */
  heard(address: string, now: number): void {
    const peer = this.#peers.get(address);
    if (peer !== undefined) peer.lastHeard = now;
  }

  /** Records a heartbeat of `address`; returns its state (undefined if not a peer). */
  record(address: string, hb: Heartbeat, now: number): PeerState | undefined {
    const peer = this.#peers.get(address);
    if (peer === undefined) return undefined;
    peer.role = hb.role;
    peer.activeAddress = hb.active;
    if (hb.synced && !peer.synced) peer.syncedSince = now;
    peer.synced = hb.synced;
    peer.replica = hb.replica;
    peer.mark = hb.mark;
    peer.own = hb.own;
    peer.floor = hb.floor;
    peer.activation = hb.activation;
    peer.position = hb.position;
    return peer;
  }

  /** The highest token mark any peer announced. */
  highestMark(): bigint {
    let mark = 0n;
    for (const peer of this.#peers.values()) if (peer.mark > mark) mark = peer.mark;
    return mark;
  }

  /** Whether `address` is a peer heard within the timeout that announces itself active. */
  liveActive(address: string, now: number): boolean {
    const peer = this.#peers.get(address);
    return peer !== undefined && peer.role === "active" && now - peer.lastHeard < this.#timeoutMs;
  }

  /** Whether `address` is a peer heard within the failover timeout at `now`. */
  isLive(address: string, now: number): boolean {
    const peer = this.#peers.get(address);
    return peer !== undefined && now - peer.lastHeard < this.#timeoutMs;
  }

  /** Whether a live peer reports `address` as its live active (one this node cannot hear). */
  relayedLive(address: string, now: number): boolean {
    for (const peer of this.#peers.values()) {
      if (peer.activeAddress === address && now - peer.lastHeard < this.#timeoutMs) return true;
    }
    return false;
  }

  /** Whether any peer (or `address` only) was heard after `since` and is live at `now`. */
  heardSince(since: number, now: number, address?: string): boolean {
    for (const peer of this.#peers.values()) {
      if (address !== undefined && peer.address !== address) continue;
      if (peer.lastHeard > since && now - peer.lastHeard < this.#timeoutMs) return true;
    }
    return false;
  }

  /** The live peers heard after `since` (a freeze), with their marks (freeze.ts). */
  heardAfter(since: number, now: number): (PeerView & { mark: bigint })[] {
    return this.live(now).filter((p) => this.heardSince(since, now, p.address))
      .map((p) => ({ ...p, mark: this.#peers.get(p.address)!.mark }));
  }

  /** The live peers' views, for the election. */
  live(now: number): PeerView[] {
    const live: PeerView[] = [];
    for (const p of this.#peers.values()) {
      if (now - p.lastHeard >= this.#timeoutMs) continue;
      live.push({
        address: p.address,
        priority: p.priority,
        role: p.role,
        synced: p.synced,
        replica: p.replica,
        floor: p.floor,
        activeAddress: p.activeAddress,
        activation: p.activation,
        position: p.position,
      });
    }
    return live;
  }
}
