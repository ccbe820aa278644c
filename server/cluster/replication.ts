/**
 * The active node's replication stream (docs/cluster.md, "Peer protocol"): a snapshot for
 * each standby that asks (`SYNC`), then every change as it happens: `H` for a new holder
 * or lease, `F` for a freed key, `W` for a reserved token block, announced before any
 * token of it is issued.
 *
 * @module
 */

import type { ClusterContext } from "./ports.ts";

/** Lease left, as it crosses the wire: whole milliseconds, at least 1. */
export function remainingMs(deadline: number, now: number): number {
  return Math.max(1, Math.ceil(deadline - now));
}

/** The standbys this active node streams to, and the stream itself. */
export class ReplicationStream {
  #ctx: ClusterContext;
  #streaming: () => boolean;
  #replicas = new Set<string>();

  /**
   * @param ctx The node's table, tokens, clock and links.
   * @param streaming Whether changes are streamed now (only while this node is active).
   */
  constructor(ctx: ClusterContext, streaming: () => boolean) {
    this.#ctx = ctx;
    this.#streaming = streaming;
  }

  /** Whether `address` receives the stream. */
  has(address: string): boolean {
    return this.#replicas.has(address);
  }

  /** Whether anyone receives the stream. */
  get empty(): boolean {
    return this.#replicas.size === 0;
  }

  /**
   * Sends `address` a snapshot (`SNAP`, an `H` per holder, the reserved mark, `SNAPEND`)
   * and adds it to the stream.
   */
  snapshot(address: string, activation: string, floor: bigint): void {
    const { table, tokens, network } = this.#ctx;
    const now = this.#ctx.clock();
    network.send(address, { type: "SNAP", activation, lastToken: tokens.last, floor });
    for (const held of table.holders()) {
      network.send(address, {
        type: "H",
        key: held.key,
        token: held.token,
        remainingMs: remainingMs(held.deadline, now),
      });
    }
    network.send(address, { type: "W", mark: tokens.reserved });
    network.send(address, { type: "SNAPEND" });
    this.#replicas.add(address);
  }

  /** `key` is held by `token` until `deadline` (a grant, a handover to a waiter, an extend). */
  held(key: string, token: bigint, deadline: number): void {
    if (this.#replicas.size === 0 || !this.#streaming()) return;
    const ms = remainingMs(deadline, this.#ctx.clock());
    this.#ctx.network.broadcast(this.#replicas, { type: "H", key, token, remainingMs: ms });
  }

  /** `key` is free. */
  freed(key: string, token: bigint): void {
    if (this.#replicas.size === 0 || !this.#streaming()) return;
    this.#ctx.network.broadcast(this.#replicas, { type: "F", key, token });
  }

  /** A token block up to `mark` is being reserved: announced before any token of it is used. */
  reserved(mark: bigint): void {
    if (this.#replicas.size === 0 || !this.#streaming()) return;
    this.#ctx.network.broadcast(this.#replicas, { type: "W", mark });
  }

  /** `address` no longer receives the stream (its link dropped). */
  remove(address: string): void {
    this.#replicas.delete(address);
  }

  /** Nobody receives the stream (this node is no longer active). */
  clear(): void {
    this.#replicas.clear();
  }
}
