/**
 * Sessions of one server (docs/protocol.md, "Sessions"): who holds what ({@linkcode Owners}),
 * the grace period of sessions whose connections are all gone ({@linkcode SessionGrace})
 * with one timer for the earliest deadline, the release of a gone session's bound locks,
 * and the periodic sweep of owners that hold nothing. Only the node that serves (a single
 * node, a cluster's active) releases; a standby only mirrors owners.
 *
 * @module
 */

import type { Credentials } from "./auth.ts";
import { Throttle } from "./auth.ts";
import type { LockTable } from "./engine/lock_table.ts";
import type { HelloContext } from "./hello.ts";
import type { Logger } from "./log.ts";
import { type Owner, Owners, SessionGrace } from "./owners.ts";
import type { Ticket } from "./session.ts";
import { Ticker } from "./ticker.ts";

/** Options of {@linkcode Sessions}. */
export interface SessionsOptions {
  /** The lock table whose bound grants are released. */
  table: LockTable<Ticket>;
  /** How long a session may have no connection before its bound locks go, ms. */
  graceMs: number;
  /** Monotonic clock, ms (the server's per-turn clock). */
  clock(): number;
  /**
   * Makes `clock` read fresh time again (a per-turn clock's `refresh`): the grace timer calls it
   * between steps of a long run of releases, or it would settle against a stale instant.
   */
  refresh?(): void;
  /** The credentials in force; `undefined` (or a function returning it) when auth is off. */
  credentials?(): Credentials | undefined;
  /** Whether this node serves now (releases are the serving node's job). */
  serving(): boolean;
  /**
   * Whether timers may settle now: a cluster node that was frozen, or is handing over,
   * holds still like its lease timers (docs/cluster.md, "Two actives at once"). Default: yes.
   */
  canAdvance?(): boolean;
  /** Owners created and forgotten here, for the replication stream. */
  replicate?: { created(owner: Owner): void; gone(id: number): void };
  /** Called after releases (to flush replies and re-arm the lease timer). */
  released(): void;
  /** Where gone sessions are reported. */
  log: Logger;
  /** How often owners that hold and wait for nothing are forgotten, ms. Default 60,000. */
  sweepMs?: number;
}

/** How often owners that hold nothing are forgotten, ms. */
const SWEEP_MS = 60_000;

/** The sessions, owners and their timers of one server. */
export class Sessions {
  /** Who holds what. */
  readonly owners: Owners;
  /** The grace periods. */
  readonly grace: SessionGrace;
  /** What answering a hello needs. */
  readonly hello: HelloContext;
  #options: SessionsOptions;
  #ticker: Ticker;
  #sweep: ReturnType<typeof setInterval>;
  #later = new Set<ReturnType<typeof setTimeout>>();

  /** @param options The table, the grace, the clock, credentials and hooks. */
  constructor(options: SessionsOptions) {
    this.#options = options;
    this.owners = new Owners(options.replicate);
    this.grace = new SessionGrace(options.graceMs, () => options.serving());
    this.hello = {
      credentials: options.credentials,
      throttle: new Throttle(),
      clock: options.clock,
      log: options.log,
    };
    this.#ticker = new Ticker({
      nextDeadline: () => options.serving() ? this.grace.nextDeadline() : undefined,
      advance: () => this.#expire(),
    }, {
      clock: () => performance.now(),
      refresh: options.refresh,
      afterTick: () => options.released(),
      onError: (error) => options.log.error(`releasing a gone session failed: ${error}`),
      canAdvance: () => options.serving() && (options.canAdvance?.() ?? true),
    });
    this.#sweep = setInterval(() => {
      if (options.serving() && this.owners.size > 0) {
        // In use: the owners of grants, and of queued acquires (their grant will name them).
        const used = options.table.owners();
        for (const ticket of options.table.queued()) used.add(ticket.waiter?.owner ?? 0);
        this.owners.sweep(used, (session) => this.grace.live(session));
      }
    }, options.sweepMs ?? SWEEP_MS);
  }

  /** Runs `fn` after `ms` (a refused hello's delayed answer); cancelled by {@linkcode stop}. */
  later(ms: number, fn: () => void): void {
    const timer = setTimeout(() => {
      this.#later.delete(timer);
      fn();
    }, ms);
    this.#later.add(timer);
  }

  /** Re-arms the grace timer (after a batch: a session may have lost its last connection). */
  arm(): void {
    this.#ticker.arm();
  }

  /**
   * This node became active (or a handover it started was not taken): sessions with bound
   * grants and no connection here get the full grace from now (clients that reconnect in
   * time keep their locks), those already counting keep theirs.
   */
  promoted(): void {
    const bound = new Set<string>();
    const holding = this.#options.table.owners();
    for (const owner of this.owners.all()) {
      if (owner.bound && owner.session !== undefined && holding.has(owner.id)) {
        bound.add(owner.session);
      }
    }
    this.grace.expect(bound, this.#options.clock());
    this.#ticker.arm();
  }

  /**
   * This active serves again after a freeze (SIGSTOP, a stall), or merged another active's
   * state: the grace periods that ran meanwhile are stale (the clients may have reconnected
   * to the node that was active in between), so every session with bound grants and no
   * connection here gets the full grace from now, as after a promotion.
   */
  restart(): void {
    this.grace.clearDeadlines();
    this.promoted();
  }

  /** This node no longer serves: no session deadline runs here. */
  demoted(): void {
    this.grace.clearDeadlines();
  }

  /** Stops every timer. */
  stop(): void {
    this.#ticker.stop();
    clearInterval(this.#sweep);
    for (const timer of this.#later) clearTimeout(timer);
    this.#later.clear();
  }

  #expire(): void {
    const table = this.#options.table;
    for (const session of this.grace.due(this.#options.clock())) {
      let released = 0;
      const bound = this.owners.boundOf(session);
      for (const owner of bound) {
        for (const holder of [...table.holdersOf(owner.id)]) {
          if (table.release(holder.key, holder.token)) released++;
        }
      }
      if (released > 0) {
        this.#options.log.info(
          `session ${session.slice(0, 8)} gone for its grace period: released ${released} lock(s)`,
          // The client's name, to tell whose session it was (the id itself is a secret).
          { event: "session-expired", released, name: bound[0]?.name },
        );
      }
    }
  }
}
