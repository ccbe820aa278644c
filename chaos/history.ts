/**
 * The record of one chaos run, shared by the workers (what they send), the resource server
 * (what it stores) and the checker (what it analyses): worker events, fenced writes, faults
 * and the convergence time. Times are milliseconds since the Unix epoch as
 * `performance.timeOrigin + performance.now()`, comparable across the processes of one
 * machine. Tokens are decimal strings (u64 does not fit a JSON number).
 *
 * @module
 */

/** How an acquire ended. */
export type AcquireOutcome = "grant" | "timeout" | "unavailable" | "other";

/** What a worker reports, as it happens. `op` numbers the acquires of one worker. */
export type WorkerEvent =
  /** An acquire is about to be sent (lease and wait in seconds). */
  | {
    type: "acquire";
    worker: number;
    op: number;
    key: string;
    lease: number;
    wait: number;
    t: number;
  }
  /** The acquire was granted with `token`. */
  | { type: "grant"; worker: number; op: number; key: string; token: string; t: number }
  /** The acquire ended (also after a grant, with outcome `grant`). */
  | {
    type: "acquired";
    worker: number;
    op: number;
    outcome: AcquireOutcome;
    error?: string;
    t: number;
  }
  /** A release is sent: the holder stops using the resource. */
  | { type: "release"; worker: number; op: number; key: string; token: string; t: number }
  /** The release ended: confirmed (`R` or `N`), or failed with `error`. */
  | { type: "released"; worker: number; op: number; ok: boolean; error?: string; t: number }
  /** The holder walks away without releasing: the lease frees the key. */
  | { type: "abandon"; worker: number; op: number; key: string; token: string; t: number };

/** One write to the fenced resource, as the resource decided it. */
export interface WriteRecord {
  /** The writing worker. */
  worker: number;
  /** The worker's acquire whose grant the write uses. */
  op: number;
  /** The key (the resource keeps one fence per key). */
  key: string;
  /** The lock's fencing token. */
  token: string;
  /** When the worker sent it. */
  t: number;
  /** When the resource decided. */
  at: number;
  /** Accepted, or rejected as stale. */
  accepted: boolean;
  /** The last token the resource had accepted for the key before this write, if any. */
  last: string | null;
}

/** The kinds of fault the nemesis injects. */
export type FaultKind = "kill" | "pause" | "restart" | "partition";

/** One injected fault. */
export interface Fault {
  /** What was done. */
  kind: FaultKind;
  /** Index of the node (0 = highest priority). */
  node: number;
  /** Whether that node answered as active when the fault began. */
  wasActive: boolean;
  /** When the fault began. */
  start: number;
  /** When it was over: the node restarted and ready, resumed, or the partition healed. */
  end: number;
  /** Anything unusual (a slow stop, a restart that needed retries). */
  note?: string;
  /**
   * From `end` until one node served and every other one redirected to it, probing from
   * `end` on; `null`: not within 10 s.
   */
  convergedMs?: number | null;
  /** How the nodes' answers changed meanwhile (`ms: answer | answer | ...`). */
  convergence?: string[];
}

/** Replication modes of the server's `--replication` flag. */
export type Replication = "async" | "sync";

/** Everything the checker needs to judge a run. */
export interface History {
  /** When the run began (times in reports are relative to it). */
  startedAt: number;
  /** The mode the nodes ran in (`async` when `sync` was asked but is not supported). */
  replication: Replication;
  /** Whether the sync-only checks apply (the nodes really ran `--replication sync`). */
  syncApplies: boolean;
  /** The nodes' `--failover-timeout`, in ms. */
  failoverTimeoutMs: number;
  /** Every fault, in order. */
  faults: Fault[];
  /** Every worker event, in arrival order. */
  events: WorkerEvent[];
  /** Every write, in the order the resource decided them. */
  writes: WriteRecord[];
  /** From the end of the last fault until one node served and all others redirected to it; `null`: never. */
  convergenceMs: number | null;
  /** Node exits nobody asked for, and graceful stops that did not exit 0 in time. */
  badExits: string[];
  /** Workers that exited other than 0 after SIGTERM, or had to be killed. */
  badWorkers: string[];
}

/** Milliseconds since the epoch, comparable across the processes of one machine. */
export function now(): number {
  return performance.timeOrigin + performance.now();
}
