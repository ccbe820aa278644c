/**
 * What the client sessions of one server share ({@linkcode SessionContext}), where a
 * session's replies go ({@linkcode ReplySink}), and the limits on queued acquires
 * (docs/protocol.md, "Limits and overload").
 *
 * @module
 */

import type { Refusal } from "../client/codec.ts";
import type { LockTable } from "./engine/lock_table.ts";
import type { HelloContext } from "./hello.ts";
import type { Inspection } from "./inspect.ts";
import type { Metrics } from "./metrics.ts";
import type { Owners, SessionGrace } from "./owners.ts";
import type { ClientSession, Ticket } from "./session.ts";

/** Where a session's replies go: a connection, or a test double. */
export interface ReplySink {
  /**
   * Queues one reply line (without `\n`); a grant's with its key and token (sync replication
   * moves its lease when the reply goes out late: `LineSocketOptions.lateGrant`).
   */
  send(line: string, key?: string, token?: bigint): void;
  /** Writes what is queued, then closes (a refused hello). Default: nothing. */
  closeAfterFlush?(): void;
  /** The peer's `host:port` (failed hellos are slowed down per host). */
  remote?: string;
  /**
   * Accounts for `units` (UTF-16 units, negative to give back) of replies held in memory
   * before they can be sent, so the connection's output limits cover them too.
   */
  hold?(units: number): void;
}

/** Most acquires one connection may have queued at once; more are answered `E`. */
export const MAX_QUEUED_PER_CONNECTION = 100_000;

/** Most acquires queued at once across all connections unless set (`--max-waiters`). */
export const DEFAULT_MAX_WAITERS = 1_000_000;

/** How a request is treated right now: served, parked until the role settles, or refused. */
export type Gate =
  | { kind: "serve" }
  | { kind: "park" }
  | { kind: "refuse"; refusal: Refusal };

/** What the sessions of one server share. */
export interface SessionContext {
  /** The lock table (its tickets are this module's {@linkcode Ticket}s). */
  table: LockTable<Ticket>;
  /** Longest lease a client may ask for, in ms. */
  maxLeaseMs: number;
  /** Most acquires queued at once across all connections. Default {@linkcode DEFAULT_MAX_WAITERS}. */
  maxWaiters?: number;
  /**
   * Whether this node serves requests now; a cluster standby refuses them (`M host:port`,
   * `E no active node`) and a node handing over parks them. Default: serve.
   */
  gate?: () => Gate;
  /** Keeps a request line to handle again later (see {@linkcode Gate}). */
  park?: (session: ClientSession, line: string) => void;
  /** A fatal condition (tokens exhausted): the server must stop. */
  fatal(error: Error): void;
  /** Hellos: credentials, throttle, clock, log. Without it a hello is accepted as is. */
  hello?: HelloContext;
  /** Who holds what: interned at each grant (0 without a hello). */
  owners?: Owners;
  /** The sessions' grace period: connections of a session attach and detach. */
  grace?: SessionGrace;
  /** Runs `fn` after `ms` (a failed hello's answer is delayed). */
  later?(ms: number, fn: () => void): void;
  /** Answers `I`, `L` and `S` (docs/protocol.md, "Inspection"); without it they are unknown ops. */
  inspect?: Inspection;
  /** Where requests, their latency and rejections are counted. */
  metrics?: Metrics;
  /** Settles the leases and wait limits due now (unless the node froze its timers). */
  settleDue?(): void;
}
