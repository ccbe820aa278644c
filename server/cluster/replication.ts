/**
 * The active node's replication stream (docs/cluster.md, "Peer protocol" and "Replication
 * modes"): a snapshot for each standby that asks (`SYNC`), then every change as it happens:
 * `H` for a new holder or lease, `F` for a freed key, `W` for a reserved token block,
 * announced before any token of it is issued.
 *
 * In sync replication the stream is cut into numbered batches (`SEQ n` after each batch's
 * changes, one per read or timer run) and standbys answer `ACK n`; the stream is then the
 * {@linkcode ReplyGate} of client sockets: a reply goes out once an in-sync standby
 * acknowledged every change made before it. With no standby in sync the active keeps
 * serving without waiting (degraded) until one catches up.
 *
 * @module
 */

import type { Flushable } from "../batch.ts";
import type { ReplyGate } from "../line_socket.ts";
import type { Logger } from "../log.ts";
import type { Owner } from "../owners.ts";
import type { ClusterContext } from "./ports.ts";

/** How the active answers changes: at once (`async`) or once a standby has them (`sync`). */
export type ReplicationMode = "async" | "sync";

/** Lease left, as it crosses the wire: whole milliseconds, at least 1. */
export function remainingMs(deadline: number, now: number): number {
  return Math.max(1, Math.ceil(deadline - now));
}

/** Options of {@linkcode ReplicationStream}. */
export interface ReplicationOptions {
  /** Whether changes are streamed now (only while this node is active). */
  streaming(): boolean;
  /** The replication mode. Default `async`. */
  mode?: ReplicationMode;
  /** Whether a standby is live (heard within the failover timeout). */
  live?(address: string): boolean;
  /**
   * Whether this node was frozen and has not settled it yet: it cannot tell who is live, so
   * it neither degrades nor counts liveness (a reply no standby acknowledged waits).
   */
  frozen?(): boolean;
  /** Where the sync mode's state changes are reported. */
  log?: Logger;
  /**
   * The failover timeout (ms). In sync mode a standby in sync whose link dropped still counts
   * for half of it (several heartbeats): replies wait for it to sync again rather than go out
   * unacknowledged. A `SYNC` that came while the link was down is answered when it is back
   * unless that standby had a snapshot less than this long ago (it would be the snapshot
   * that costs the link each time: the standby's own retries, this far apart, pace it).
   * Default 0.
   */
  failoverTimeoutMs?: number;
}

/** Seal times kept for the lag (a standby further behind shows at least that old a lag). */
const SEALS = 1024;

/** What the stream knows of one standby it streams to. */
interface Follower {
  /** The first batch after its snapshot: once it acknowledged that one, it is in sync. */
  since: number;
  /** The highest batch it acknowledged. */
  acked: number;
}

/** A standby in sync whose link dropped (sync mode), until it syncs again or the grace ends. */
interface Dropped {
  /** The highest batch it acknowledged. */
  acked: number;
  /** When its link dropped (ms). */
  at: number;
}

/** The standbys this active node streams to, and the stream itself. */
export class ReplicationStream implements ReplyGate {
  #ctx: ClusterContext;
  #options: ReplicationOptions;
  #sync: boolean;
  #followers = new Map<string, Follower>();
  /** Standbys in sync whose link dropped: they still hold replies back for a while. */
  #dropped = new Map<string, Dropped>();
  /** Standbys whose `SYNC` came while the link to them was down: answered once it is up. */
  #asked = new Set<string>();
  /** When each standby was last sent a snapshot (ms). */
  #snapshotAt = new Map<string, number>();
  /** The last batch sealed (sync mode). */
  #seq = 0;
  /** Whether changes were streamed since the last seal. */
  #dirty = false;
  #waiting = new Set<Flushable>();
  #degraded = false;
  /** When each of the last {@linkcode SEALS} batches was sealed (ms), by `seq % SEALS`. */
  #sealedAt = new Float64Array(SEALS);

  /** @param ctx The node's table, tokens, clock and links. @param options Mode and hooks. */
  constructor(ctx: ClusterContext, options: ReplicationOptions) {
    this.#ctx = ctx;
    this.#options = options;
    this.#sync = options.mode === "sync";
  }

  /** How long a dropped standby still counts (sync mode), ms. */
  get #grace(): number {
    return (this.#options.failoverTimeoutMs ?? 0) / 2;
  }

  /** Whether `address` receives the stream. */
  has(address: string): boolean {
    return this.#followers.has(address);
  }

  /** Whether anyone receives the stream. */
  get empty(): boolean {
    return this.#followers.size === 0;
  }

  /** Whether a sync-mode active has no standby in sync (it answers without waiting). */
  get degraded(): boolean {
    return this.#degraded;
  }

  /**
   * Sends `address` a snapshot (`SNAP`, an `H` per holder, the reserved mark, `SNAPEND`)
   * and adds it to the stream.
   */
  snapshot(address: string, activation: string, floor: bigint): void {
    this.#asked.delete(address);
    const { table, tokens, network } = this.#ctx;
    const now = this.#ctx.clock();
    this.#snapshotAt.set(address, now);
    const position = this.#seq;
    network.send(address, { type: "SNAP", activation, lastToken: tokens.last, floor, position });
    for (const owner of this.#ctx.owners.all()) network.send(address, { type: "O", ...owner });
    for (const held of table.holders()) {
      network.send(address, {
        type: "H",
        key: held.key,
        token: held.token,
        remainingMs: remainingMs(held.deadline, now),
        owner: held.owner,
      });
    }
    network.send(address, { type: "W", mark: tokens.announced });
    network.send(address, { type: "SNAPEND" });
    this.#followers.set(address, { since: this.#seq + 1, acked: 0 });
    // The next seal numbers a batch, so the new standby acknowledges (and is in sync) soon.
    this.#dirty = true;
  }

  /**
   * `key` is held by `token` until `deadline` (a grant, a handover to a waiter, an extend),
   * for `owner`.
   */
  held(key: string, token: bigint, deadline: number, owner: number): void {
    if (this.#followers.size === 0 || !this.#options.streaming()) return;
    const ms = remainingMs(deadline, this.#ctx.clock());
    this.#ctx.network.broadcast(
      this.#followers.keys(),
      { type: "H", key, token, remainingMs: ms, owner },
    );
    this.#dirty = true;
  }

  /** A new owner (before any grant of it is streamed). */
  owner(owner: Owner): void {
    if (this.#followers.size === 0 || !this.#options.streaming()) return;
    this.#ctx.network.broadcast(this.#followers.keys(), { type: "O", ...owner });
    this.#dirty = true;
  }

  /** The owner `id` is forgotten. */
  ownerGone(id: number): void {
    if (this.#followers.size === 0 || !this.#options.streaming()) return;
    this.#ctx.network.broadcast(this.#followers.keys(), { type: "OGONE", id });
    this.#dirty = true;
  }

  /** `key` is free. */
  freed(key: string, token: bigint): void {
    if (this.#followers.size === 0 || !this.#options.streaming()) return;
    this.#ctx.network.broadcast(this.#followers.keys(), { type: "F", key, token });
    this.#dirty = true;
  }

  /** A token block up to `mark` is being reserved: announced before any token of it is used. */
  reserved(mark: bigint): void {
    if (this.#followers.size === 0 || !this.#options.streaming()) return;
    this.#ctx.network.broadcast(this.#followers.keys(), { type: "W", mark });
    this.#dirty = true;
  }

  /** Ends the current batch (before the peer links are written): `SEQ n` in sync mode. */
  seal(): void {
    if (!this.#dirty) return;
    this.#dirty = false;
    if (!this.#sync || this.#followers.size === 0 || !this.#options.streaming()) return;
    this.#numberBatch();
  }

  /** Numbers the changes streamed so far as a batch (`SEQ n`) and notes when. */
  #numberBatch(): void {
    const seq = ++this.#seq;
    this.#sealedAt[seq % SEALS] = this.#ctx.clock();
    this.#ctx.network.broadcast(this.#followers.keys(), { type: "SEQ", seq });
  }

  /**
   * How long (ms) the oldest batch `address` has not acknowledged has waited at `now` (0:
   * caught up), or `undefined` if it is not streamed to or has acknowledged nothing since its
   * snapshot. Async mode numbers a batch once a heartbeat (see {@linkcode check}) for this.
   */
  lagMs(address: string, now: number): number | undefined {
    const follower = this.#followers.get(address);
    if (follower === undefined || follower.acked < follower.since) return undefined;
    if (follower.acked >= this.#seq) return 0;
    const oldest = Math.max(follower.acked + 1, this.#seq - SEALS + 1);
    return Math.max(0, now - this.#sealedAt[oldest % SEALS]);
  }

  /** The standbys in sync: acknowledged a batch since their snapshot, and live. */
  inSync(): string[] {
    const inSync: string[] = [];
    for (const [address, follower] of this.#followers) {
      if (follower.acked >= follower.since && this.#options.live?.(address) !== false) {
        inSync.push(address);
      }
    }
    return inSync;
  }

  /** `ACK n` from `address`: it applied every batch up to `n`. */
  acked(address: string, n: number): void {
    const current = this.#followers.get(address);
    const follower = current ?? this.#dropped.get(address);
    if (follower === undefined || n <= follower.acked || n > this.#seq) return;
    follower.acked = n;
    // In sync again since a new snapshot: its place as a dropped standby ends.
    if (current !== undefined && n >= current.since) this.#dropped.delete(address);
    this.#wake();
  }

  /**
   * `address` no longer receives the stream (its link dropped). In sync mode a standby that
   * was in sync still counts for half the failover timeout while it is live (docs/cluster.md,
   * "Replication modes"): a short pause of its own drops the link, and answering the replies
   * held for it at once would answer what no live standby has, lost if the active dies next.
   */
  remove(address: string): void {
    const follower = this.#followers.get(address);
    if (follower === undefined) return;
    this.#followers.delete(address);
    const grace = this.#grace;
    if (this.#sync && grace > 0 && follower.acked >= follower.since) {
      this.#dropped.set(address, { acked: follower.acked, at: this.#ctx.clock() });
    }
    this.#wake();
  }

  /**
   * `address` asked for a snapshot while the link to it was down (only its own link to this
   * node was up): {@linkcode takeAsked} tells, once the link is back. Waiting for it to ask
   * again would cost a failover timeout, and in sync mode the replies it holds back.
   */
  askedWhileDown(address: string): void {
    const last = this.#snapshotAt.get(address) ?? -Infinity;
    if (this.#ctx.clock() - last >= (this.#options.failoverTimeoutMs ?? 0)) {
      this.#asked.add(address);
    }
  }

  /** Whether `address` asked while its link was down (forgotten once asked). */
  takeAsked(address: string): boolean {
    return this.#asked.delete(address);
  }

  /** Nobody receives the stream (this node is no longer active). */
  clear(): void {
    this.#followers.clear();
    this.#dropped.clear();
    this.#asked.clear();
    this.#snapshotAt.clear();
    this.#seq = 0;
    this.#dirty = false;
    this.#degraded = false;
    this.#wake();
  }

  /**
   * Re-checks which standbys are in sync (every heartbeat: a paused one stops counting). In
   * async mode it also numbers a batch (`SEQ n`), whose acknowledgements measure the lag.
   */
  check(): void {
    if (!this.#sync && this.#followers.size > 0 && this.#options.streaming()) {
      this.#numberBatch();
    }
    if (this.#sync && this.#waiting.size > 0) this.#wake();
    else this.reached();
  }

  /** {@linkcode ReplyGate}: the batch a reply queued now belongs to (0: nothing to wait for). */
  position(): number {
    if (!this.#sync) return 0;
    // Only a dropped standby: nothing is streamed until it syncs again, and its snapshot's
    // batch (the next one) is the first to hold this change.
    if (this.#followers.size === 0) return this.#dropped.size === 0 ? 0 : this.#seq + 1;
    return this.#dirty ? this.#seq + 1 : this.#seq;
  }

  /** {@linkcode ReplyGate}: the highest batch an in-sync standby acknowledged. */
  reached(): number {
    let reached = 0;
    let inSync: string | undefined;
    const frozen = this.#options.frozen?.() === true;
    for (const [address, follower] of this.#followers) {
      if (follower.acked < follower.since) continue;
      if (!frozen && this.#options.live?.(address) === false) continue;
      inSync ??= address;
      if (follower.acked > reached) reached = follower.acked;
    }
    if (this.#dropped.size > 0) {
      const expired = this.#ctx.clock() - this.#grace;
      for (const [address, dropped] of this.#dropped) {
        if (!frozen && (dropped.at <= expired || this.#options.live?.(address) === false)) {
          this.#dropped.delete(address);
          continue;
        }
        inSync ??= address;
        if (dropped.acked > reached) reached = dropped.acked;
      }
    }
    if (frozen && this.#sync) return reached;
    const degraded = this.#sync && this.#options.streaming() && inSync === undefined;
    if (degraded !== this.#degraded) {
      this.#degraded = degraded;
      // Leaving the active role also ends a degraded spell, with no standby to name.
      // Degraded is a warning; back in sync is good news (info).
      if (degraded) {
        this.#options.log?.warn(
          "replication degraded: no standby in sync, answering without acknowledgements",
          { event: "replication-degraded" },
        );
      } else if (inSync !== undefined) {
        this.#options.log?.info(`replication in sync again (${inSync})`, {
          event: "replication-in-sync",
          peer: inSync,
        });
      }
    }
    return inSync === undefined ? Infinity : reached;
  }

  /** {@linkcode ReplyGate}: flush `socket` when acknowledgements arrive. */
  wait(socket: Flushable): void {
    this.#waiting.add(socket);
  }

  #wake(): void {
    this.reached();
    if (this.#waiting.size === 0) return;
    const waiting = [...this.#waiting];
    this.#waiting.clear();
    for (const socket of waiting) socket.flush();
  }
}
