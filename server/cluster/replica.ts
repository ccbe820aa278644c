/**
 * A standby's copy of the active's state (docs/cluster.md, "Peer protocol"): it applies
 * the snapshot and the stream of the active it follows to the lock table and the token
 * mark, and knows whether it is in sync and whose state it holds, which the election weighs.
 *
 * @module
 */

import type { Owner } from "../owners.ts";
import type { ClusterContext } from "./ports.ts";

/** Options of {@linkcode Replica}. */
export interface ReplicaOptions {
  /** The snapshot of `activation` is complete: this node is in sync with it. */
  synced(activation: string): void;
  /** Least time between two requests for a snapshot, ms (the failover timeout). */
  retryMs: number;
}

/** The replica state of one node, and the stream it applies. */
export class Replica {
  /** Whether it is in sync: its snapshot arrived and the stream is intact. */
  synced = false;
  /**
   * Whether it holds a complete replica of some activation's state, even if the stream has
   * since stopped (the active died): such a node beats one with empty state.
   */
  complete = false;
  /**
   * The first-token floor of the activation its state belongs to (its own when active): a
   * later activation has a higher floor, so a fresher replica wins an election.
   */
  floor = 0n;
  /** The activation it replicated and the highest token it saw from it. */
  seen: { activation: string | undefined; token: bigint } = { activation: undefined, token: 0n };
  #ctx: ClusterContext;
  #options: ReplicaOptions;
  #requestedAt = -Infinity;
  /**
   * To whom it acknowledged {@linkcode position} since its snapshot, if it did (that ACK is
   * sent again when the link comes back).
   */
  #ackedTo: string | undefined;
  /** How far it applied the stream (see {@linkcode position}). */
  #position = 0;

  /**
   * How far it applied the stream of the activation it replicates: the last batch it
   * acknowledged, or the one its snapshot was taken after. Kept when the stream breaks: the
   * election prefers the replica that got furthest.
   */
  get position(): number {
    return this.#position;
  }

  /** @param ctx The node's table, tokens, clock and links. @param options Settings. */
  constructor(ctx: ClusterContext, options: ReplicaOptions) {
    this.#ctx = ctx;
    this.#options = options;
  }

  /** `SNAP`: a snapshot begins (taken after batch `position`); the table is cleared. */
  begin(activation: string, lastToken: bigint, floor: bigint, position = 0): void {
    this.synced = false;
    this.#ackedTo = undefined;
    this.#position = position;
    this.complete = false;
    this.floor = floor;
    this.seen = { activation, token: lastToken };
    this.#ctx.table.clear();
    this.#ctx.owners.clear();
    this.#ctx.tokens.raiseTo(lastToken);
  }

  /** `H`: `key` is held by `token` for `remainingMs`, for `owner`. */
  held(key: string, token: bigint, remainingMs: number, owner = 0): void {
    this.#ctx.tokens.raiseTo(token);
    if (token > this.seen.token) this.seen.token = token;
    this.#ctx.table.restore(key, token, this.#ctx.clock() + remainingMs, true, owner);
  }

  /** `O`: an owner of the active's grants. */
  owner(owner: Owner): void {
    this.#ctx.owners.install(owner);
  }

  /** `OGONE`: the active forgot an owner. */
  ownerGone(id: number): void {
    this.#ctx.owners.forget(id);
  }

  /** `F`: `key` is free. */
  freed(key: string, token: bigint): void {
    this.#ctx.table.forget(key, token);
  }

  /** `W`: the active reserved tokens up to `mark`; never issue at or below it. */
  mark(mark: bigint): void {
    this.#ctx.tokens.raiseTo(mark);
  }

  /** `SEQ n` from `active`: everything before it is applied, so acknowledge batch `n`. */
  batch(active: string, n: number): void {
    if (!this.synced) return;
    this.#ackedTo = active;
    this.#position = n;
    this.#ctx.network.send(active, { type: "ACK", seq: n });
  }

  /**
   * The link to `active` came back: acknowledge the last batch again. An `ACK` sent while
   * this node's link was down is dropped, and in sync replication the active holds every
   * reply until it hears one (no later batch comes while every client waits).
   */
  reacknowledge(active: string): void {
    if (!this.synced || this.#ackedTo !== active) return;
    this.#ctx.network.send(active, { type: "ACK", seq: this.#position });
  }

  /** `SNAPEND`: the snapshot is complete; the stream continues. */
  end(activation: string): void {
    this.synced = true;
    this.complete = true;
    this.#options.synced(activation);
  }

  /** The stream broke: no longer in sync, but the replica is kept (the best state there is). */
  interrupted(): void {
    this.synced = false;
  }

  /**
   * Asks `active` for a snapshot and the stream (`SYNC`) unless in sync, its link is down,
   * or a request went out less than `retryMs` ago.
   */
  request(active: string, now: number): void {
    if (this.synced || !this.#ctx.network.up(active)) return;
    if (now - this.#requestedAt < this.#options.retryMs) return;
    this.#requestedAt = now;
    this.#ctx.network.send(active, { type: "SYNC" });
  }

  /** The next {@linkcode request} goes out at once (a new active, a new link, a broken stream). */
  askAgain(): void {
    this.#requestedAt = -Infinity;
  }

  /** This node became active: its state is the reference, from `floor` on. */
  own(floor: bigint): void {
    this.synced = true;
    this.complete = true;
    this.floor = floor;
    this.#ackedTo = undefined;
    this.#position = 0;
  }

  /**
   * Its state now also covers an activation whose floor is at most `floor` (a merge, or the
   * active it is in sync with merged one): it ranks no lower than that.
   */
  raiseFloor(floor: bigint): void {
    if (floor > this.floor) this.floor = floor;
  }

  /** This node handed its state over or starts following another: it holds nothing current. */
  drop(): void {
    this.synced = false;
    this.complete = false;
    this.#ackedTo = undefined;
    this.#position = 0;
  }
}
