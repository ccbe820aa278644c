/**
 * The handover protocol, both sides (docs/cluster.md, "Graceful stop of the active"): the
 * sender freezes, sends `HANDOFF` (with every holder in `full` mode) and waits for `TAKEN`;
 * the successor merges what it got, answers `TAKEN` and waits for `COMMIT` before it serves,
 * because the sender may have given up on it meanwhile (it answered late) and handed over to
 * the next standby, which would make two actives issuing the same tokens. The sender answers
 * a late `TAKEN` with `ABORT`. The node decides when to hand over and what a role change
 * means; this module runs the exchange.
 *
 * @module
 */

import type { Logger } from "../log.ts";
import type { Owner } from "../owners.ts";
import type { Role } from "./election.ts";
import { type Carried, mergeHandoff } from "./handoff.ts";
import type { HandoffBegin } from "./peer_codec.ts";
import type { Cancel, ClusterContext } from "./ports.ts";
import { remainingMs } from "./replication.ts";

/** What the handover protocol asks of its node. */
export interface HandoverHost {
  /** The node's role now. */
  readonly role: Role;
  /** Its activation while active. */
  readonly activation: string | undefined;
  /** What it replicated before it became active, and the highest token it saw from it. */
  readonly predecessor: { activation: string | undefined; token: bigint };
  /** Whether `address` is a standby in sync with this activation (`sync` mode suffices). */
  inSync(address: string): boolean;
  /** Changes the role (logged). */
  setRole(role: Role, why: string): void;
  /** Sends a heartbeat now. */
  announce(): void;
  /** Moves held grants' leases for their hold so far (sync replication; see `ServerPort`). */
  prolongHeld(): void;
  /** The successor `address` confirmed: redirect everything to it, as a standby or leaving. */
  handedOver(address: string, leaving: boolean): void;
  /** The handover failed and this node is not leaving: serve again. */
  stillActive(): void;
  /**
   * The state of `from`, another active, was merged into this active one: stop waiting for
   * it. `lastToken` is the last token `from` issued (at or above its activation's floor, and
   * equal to it if it issued none).
   */
  merged(from: string, lastToken: bigint): void;
  /** The takeover from `from` is committed: become active with `activation`. */
  becomeActive(from: string, activation: string): void;
  /** The takeover this node agreed to did not happen: serve parked requests as a standby. */
  notTaken(): void;
}

/** Options of {@linkcode Handover}. */
export interface HandoverOptions {
  /** How long a sender waits for `TAKEN`, ms. */
  takenWithinMs: number;
  /** How long a successor waits for `COMMIT`, ms. */
  commitWithinMs: number;
  /** A new activation id. */
  newActivation(): string;
  /** Where a successor that did not answer in time is reported. */
  log: Logger;
}

interface Sending {
  to: string;
  /** This attempt's number, echoed by the successor's `TAKEN`. */
  attempt: number;
  leaving: boolean;
  outcome: Promise<boolean>;
  done(ok: boolean): void;
  cancel: Cancel;
}

interface Taking {
  from: string;
  activation: string;
  cancel: Cancel;
}

/** One node's handovers: at most one sent and one agreed to at a time. */
export class Handover {
  #ctx: ClusterContext;
  #host: HandoverHost;
  #options: HandoverOptions;
  #sending: Sending | undefined;
  #taking: Taking | undefined;
  /** The last handover attempt's number (each `HANDOFF` gets the next). */
  #attempts = 0;

  /** @param ctx The node's table, tokens, clock, links, timers. @param host The node. */
  constructor(ctx: ClusterContext, host: HandoverHost, options: HandoverOptions) {
    this.#ctx = ctx;
    this.#host = host;
    this.#options = options;
  }

  /** Whether this node sends a handover now. */
  get sending(): boolean {
    return this.#sending !== undefined;
  }

  /** Whether this node agreed to take over and waits for `COMMIT` (it parks requests). */
  get taking(): boolean {
    return this.#taking !== undefined;
  }

  /**
   * A handover under way turns into a graceful stop: resolves whether it succeeded, or
   * `undefined` when none was under way.
   */
  leaveDuring(): Promise<boolean> | undefined {
    if (this.#sending === undefined) return undefined;
    this.#sending.leaving = true;
    return this.#sending.outcome;
  }

  /**
   * Graceful stop (docs/cluster.md, "Graceful stop of the active"): finishes a handover
   * under way; an active hands over to `heir(tried)` (the best live standby not tried yet),
   * then the next one if it does not take over in time (paused, leaving too). Resolves `true`
   * once one took over, `false` (role `leaving`) when nobody did.
   */
  async leave(heir: (tried: ReadonlySet<string>) => string | undefined): Promise<boolean> {
    if (await this.leaveDuring()) return true;
    const host = this.#host;
    if (host.role !== "active") {
      host.setRole("leaving", "leaving");
      host.announce(); // the active stops counting on it (sync replication) at once
      return false;
    }
    const tried = new Set<string>();
    for (let to = heir(tried); to !== undefined; to = heir(tried)) {
      tried.add(to);
      if (await this.start(to, true, true)) return true;
      const role = host.role as Role; // (changed while awaiting)
      if (role !== "handing-off" && role !== "active") break;
    }
    host.setRole("leaving", "leaving, no standby took over");
    return false;
  }

  /**
   * Hands the active role to `to`: role `handing-off` (requests park, leases freeze), the
   * `HANDOFF` (every holder in `full` mode), and the wait for `TAKEN`. Resolves `true` once
   * the successor confirmed, `false` if it could not start or timed out.
   */
  start(to: string, merge: boolean, leaving: boolean): Promise<boolean> {
    const host = this.#host;
    // A leaving node retries from "handing-off" with the next standby.
    const free = host.role === "active" || (leaving && host.role === "handing-off");
    if (this.#sending !== undefined || !free || !this.#ctx.network.up(to)) {
      return Promise.resolve(false);
    }
    const { promise, resolve } = Promise.withResolvers<boolean>();
    const cancel = this.#ctx.scheduler.after(this.#options.takenWithinMs, () => this.#late());
    const attempt = ++this.#attempts;
    this.#sending = { to, attempt, leaving, outcome: promise, done: resolve, cancel };
    // While still active, so the moved leases are streamed before the HANDOFF.
    if (host.role === "active") host.prolongHeld();
    host.setRole("handing-off", `handing over to ${to}`);
    const { network, tokens, table } = this.#ctx;
    // `sync` relies on the successor's replica: only for a standby in sync with us now.
    const full = merge || !host.inSync(to);
    network.send(to, {
      type: "HANDOFF",
      activation: host.activation!,
      lastToken: tokens.last,
      mark: tokens.announced,
      mode: full ? "full" : "sync",
      predecessor: host.predecessor.activation,
      predecessorToken: host.predecessor.token,
      attempt,
    });
    if (full) {
      const now = this.#ctx.clock();
      // As they stand: leases are frozen while handing over (and a frozen node's are stale);
      // the successor settles what ran out.
      const holders = [...table.holders(false)];
      const owners = new Set(holders.map((h) => h.owner));
      for (const owner of this.#ctx.owners.all()) {
        if (owners.has(owner.id)) network.send(to, { type: "O", ...owner });
      }
      for (const held of holders) {
        const ms = remainingMs(held.deadline, now);
        network.send(to, {
          type: "H",
          key: held.key,
          token: held.token,
          remainingMs: ms,
          owner: held.owner,
        });
      }
    }
    network.send(to, { type: "HANDOFFEND" });
    host.announce();
    return promise;
  }

  /**
   * `TAKEN` from `from` for handover `attempt`: `COMMIT` if this node still hands over to it
   * in that attempt, else `ABORT`.
   */
  taken(from: string, activation: string, attempt: number): void {
    const sending = this.#sending;
    if (sending === undefined || sending.to !== from || sending.attempt !== attempt) {
      // Too late: this node gave up on that attempt (and may have handed over to another
      // node, or be retrying with this one: its answer to the retry is the one that counts).
      this.#ctx.network.send(from, { type: "ABORT", activation });
      return;
    }
    sending.cancel();
    this.#sending = undefined;
    this.#ctx.network.send(from, { type: "COMMIT", activation });
    this.#host.handedOver(from, sending.leaving);
    sending.done(true);
  }

  /**
   * `HANDOFF` ... `HANDOFFEND` from `from`: merges it (see {@linkcode mergeHandoff}) and
   * answers `TAKEN`. An active merges another active's state and is done; any other node
   * waits for `COMMIT` before it becomes active.
   */
  receive(
    from: string,
    header: HandoffBegin,
    carried: Carried[] | undefined,
    owners: Owner[],
  ): void {
    const host = this.#host;
    const active = host.role === "active";
    mergeHandoff(
      {
        table: this.#ctx.table,
        tokens: this.#ctx.tokens,
        now: this.#ctx.clock(),
        ownActivation: active ? host.activation : undefined,
        owners: this.#ctx.owners,
      },
      header,
      carried,
      owners,
    );
    if (active) {
      // Two actives merged (demotion): this one already serves.
      this.#options.log.warn(`two actives: merged the state of ${from} into this node`, {
        event: "handover-merged",
        peer: from,
      });
      host.merged(from, header.lastToken);
      this.#ctx.network.send(from, {
        type: "TAKEN",
        activation: host.activation!,
        attempt: header.attempt,
      });
      host.announce();
      return;
    }
    this.#taking?.cancel();
    const activation = this.#options.newActivation();
    const cancel = this.#ctx.scheduler.after(
      this.#options.commitWithinMs,
      () => this.outcome(from, activation, false),
    );
    this.#taking = { from, activation, cancel };
    this.#ctx.network.send(from, { type: "TAKEN", activation, attempt: header.attempt });
  }

  /** `COMMIT` or `ABORT` from `from` (or no answer in time) of the takeover it agreed to. */
  outcome(from: string, activation: string, committed: boolean): void {
    const taking = this.#taking;
    if (taking === undefined || taking.from !== from || taking.activation !== activation) return;
    taking.cancel();
    this.#taking = undefined;
    if (committed && this.#host.role !== "active") this.#host.becomeActive(from, activation);
    else {
      this.#options.log.warn(`${from} did not confirm the handover: staying a standby`, {
        event: "handover-failed",
        peer: from,
      });
      this.#host.notTaken();
    }
  }

  /** Forgets any takeover agreed to (this node became active by itself). */
  forgetTaking(): void {
    this.#taking?.cancel();
    this.#taking = undefined;
  }

  /** Abandons everything under way (the node stops). */
  stop(): void {
    this.#sending?.cancel();
    this.#sending = undefined;
    this.forgetTaking();
  }

  #late(): void {
    const sending = this.#sending;
    if (sending === undefined) return;
    this.#sending = undefined;
    this.#options.log.warn(`${sending.to} did not take over in time`, {
      event: "handover-failed",
      peer: sending.to,
    });
    // A leaving node stays handing off: leave() tries the next standby.
    if (!sending.leaving) this.#host.stillActive();
    sending.done(false);
  }
}
