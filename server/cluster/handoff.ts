/**
 * Handing the active role over (docs/cluster.md, "Graceful stop of the active", "Two
 * actives at once"): what the sender sends, how long it waits for `TAKEN`, and how the
 * receiver merges carried holders into its own table.
 *
 * @module
 */

import type { Refusal } from "../../client/codec.ts";
import type { HandoffBegin } from "./peer_codec.ts";
import type { Cancel, ClusterContext, ReplicatedTable, TokenMark } from "./ports.ts";
import { remainingMs } from "./replication.ts";

/** A holder carried by a `full` handover (`H key token remainingMs` lines). */
export interface Carried {
  /** The key. */
  key: string;
  /** Its grant's token. */
  token: bigint;
  /** Lease left, in ms. */
  remainingMs: number;
}

/** A handover under way, on the sender's side. */
export interface PendingHandoff {
  /** The successor. */
  readonly to: string;
  /** Whether this node stops once it is done (a graceful stop) or stays as a standby. */
  leaving: boolean;
  /** `true` once the successor confirmed, `false` if it did not in time. */
  readonly outcome: Promise<boolean>;
}

/**
 * How long a sender waits for `TAKEN` (ms): a live successor confirms within a round trip;
 * a paused one must not cost a whole failover timeout before the next is tried.
 */
export function handoffLimitMs(heartbeatMs: number, failoverTimeoutMs: number): number {
  return Math.min(failoverTimeoutMs, Math.max(300, 5 * heartbeatMs));
}

/** The sender's side of handovers: at most one at a time, confirmed by `TAKEN` or timed out. */
export class Handoffs {
  #ctx: ClusterContext;
  #limitMs: number;
  #failed: (handoff: PendingHandoff) => void;
  #pending: (PendingHandoff & { cancel: Cancel; done(ok: boolean): void }) | undefined;

  /**
   * @param ctx The node's table (a `full` handover carries its holders), clock, links and timers.
   * @param limitMs How long to wait for `TAKEN`, ms.
   * @param failed Called when the successor did not confirm in time.
   */
  constructor(ctx: ClusterContext, limitMs: number, failed: (handoff: PendingHandoff) => void) {
    this.#ctx = ctx;
    this.#limitMs = limitMs;
    this.#failed = failed;
  }

  /** The handover under way, if any. */
  get pending(): PendingHandoff | undefined {
    return this.#pending;
  }

  /**
   * Sends a handover to `to` (the header, every holder when `full`, then `HANDOFFEND`) and
   * resolves once it is confirmed (`true`) or timed out (`false`, after `failed`).
   */
  start(to: string, header: Omit<HandoffBegin, "type">, leaving: boolean): Promise<boolean> {
    const { network, table } = this.#ctx;
    const { promise, resolve } = Promise.withResolvers<boolean>();
    const cancel = this.#ctx.scheduler.after(this.#limitMs, () => {
      const pending = this.#pending;
      if (pending === undefined) return;
      this.#pending = undefined;
      this.#failed(pending);
      pending.done(false);
    });
    this.#pending = { to, leaving, outcome: promise, cancel, done: resolve };
    network.send(to, { type: "HANDOFF", ...header });
    if (header.mode === "full") {
      const now = this.#ctx.clock();
      for (const held of table.holders()) {
        network.send(to, {
          type: "H",
          key: held.key,
          token: held.token,
          remainingMs: remainingMs(held.deadline, now),
        });
      }
    }
    network.send(to, { type: "HANDOFFEND" });
    return promise;
  }

  /**
   * `TAKEN` from `from`: returns the handover it confirms (then done) or `undefined` if none
   * to it is under way. Call {@linkcode settle} once the node acted on it.
   */
  confirm(from: string): PendingHandoff | undefined {
    const pending = this.#pending;
    if (pending === undefined || pending.to !== from) return undefined;
    pending.cancel();
    this.#pending = undefined;
    return pending;
  }

  /** Resolves the outcome of a confirmed handover. */
  settle(handoff: PendingHandoff): void {
    (handoff as PendingHandoff & { done(ok: boolean): void }).done(true);
  }

  /** Abandons the handover under way (the node stops). */
  stop(): void {
    this.#pending?.cancel();
    this.#pending = undefined;
  }
}

/** What the receiver of a handover knows of itself, to merge. */
export interface MergeContext {
  /** Its table. */
  table: ReplicatedTable;
  /** Its token mark. */
  tokens: TokenMark;
  /** Now, ms. */
  now: number;
  /** Its own activation when it is active itself (two actives merging), else `undefined`. */
  ownActivation: string | undefined;
}

/**
 * Merges a handover into the receiver's table and tokens. In `full` mode (`carried`):
 * when the sender had been this node's replica before it became active (its predecessor is
 * this node's activation), this node's own grants that the sender had seen (tokens up to
 * `predecessorToken`) but no longer holds were released or expired over there since: they
 * are dropped, not resurrected. Every other key keeps the grant with the higher token.
 * Either way the receiver's tokens go above the sender's last token.
 */
export function mergeHandoff(
  ctx: MergeContext,
  header: HandoffBegin,
  carried: readonly Carried[] | undefined,
): void {
  const { table, tokens, now } = ctx;
  if (carried !== undefined) {
    if (ctx.ownActivation !== undefined && header.predecessor === ctx.ownActivation) {
      const theirs = new Map(carried.map((c) => [c.key, c.token]));
      const stale = [...table.holders()].filter((h) =>
        h.token <= header.predecessorToken && (theirs.get(h.key) ?? 0n) !== h.token
      );
      for (const h of stale) table.release(h.key, h.token);
    }
    for (const c of carried) {
      tokens.raiseTo(c.token);
      table.restore(c.key, c.token, now + c.remainingMs);
    }
  }
  // Above every token the old active issued: it froze before sending its last token.
  tokens.raiseTo(header.lastToken);
}

/** The redirect a node that handed over gives its queued and parked requests. */
export function redirectTo(address: string): Refusal {
  return { status: "M", text: address };
}
