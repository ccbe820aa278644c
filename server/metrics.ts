/**
 * What a node counts (docs/protocol.md, "Inspection"; docs/deploy.md): grants, releases, extends,
 * expirations and timeouts (counted by the lock table into {@linkcode Metrics.counts}),
 * rejections by reason, failovers and handoffs, a latency histogram of the requests answered
 * at once, and grants per second over the last 300 s. Pure: both clocks are injected. The hot
 * path only increments integers; one request in {@linkcode Metrics.sampleEvery} is timed.
 *
 * {@linkcode renderPrometheus} turns a {@linkcode NodeStatus} and the histogram into the
 * Prometheus text format (`lockd_*`).
 *
 * @module
 */

import type { NodeStatus, RejectionReason } from "../client/codec.ts";
import { NO_ACTIVE_NODE, REJECTION_REASONS, SHUTTING_DOWN } from "../client/codec.ts";
import type { LockCounts } from "./engine/lock_table.ts";

/** Upper bounds of the latency buckets, in seconds (25 µs … 1 s; then `+Inf`). */
export const LATENCY_BUCKETS: readonly number[] = [
  0.000025,
  0.00005,
  0.0001,
  0.00025,
  0.0005,
  0.001,
  0.0025,
  0.005,
  0.01,
  0.025,
  0.05,
  0.1,
  0.25,
  0.5,
  1,
];

/** Seconds of grants kept for {@linkcode Metrics.grantsPerSecond}. */
export const RATE_SECONDS = 300;

/** The latency histogram, as rendered. */
export interface Histogram {
  /** Observations per bucket of {@linkcode LATENCY_BUCKETS}, not cumulative; the last is `+Inf`. */
  buckets: readonly number[];
  /** Sum of the observations, in seconds. */
  sum: number;
  /** Number of observations. */
  count: number;
  /** One request in this many was timed. */
  sampleEvery: number;
}

/** Options of {@linkcode Metrics}. */
export interface MetricsOptions {
  /**
   * Monotonic ms, possibly read once per event-loop turn (the lock table's clock): the time
   * a read's requests start, and the per-second grant rate.
   */
  clock(): number;
  /** Monotonic ms read fresh: when a timed request's reply was queued. Default `clock`. */
  now?(): number;
  /** Time one request in this many. Default 16. */
  sampleEvery?: number;
  /**
   * Whether leases that run out count now. A cluster standby's replica settles the leases
   * it mirrors as they run out, racing the active's own count of the same leases (and it
   * grants nothing): it counts none. Default: always.
   */
  countsExpirations?(): boolean;
}

/** The E reason of a refusal or error message that is the same for every request. */
export function reasonOf(message: string): RejectionReason {
  if (message === NO_ACTIVE_NODE) return "no_active";
  if (message === SHUTTING_DOWN) return "shutting_down";
  return "other";
}

/** A node's counters, histogram and grant rate. */
export class Metrics {
  /** Counted by the lock table (give it to `LockTable` as `counts`). */
  readonly counts: LockCounts;
  /** `E` replies by reason. */
  readonly rejections: Record<RejectionReason, number> = Object.fromEntries(
    REJECTION_REASONS.map((reason) => [reason, 0]),
  ) as Record<RejectionReason, number>;
  /** Promotions after the active was lost. */
  failovers = 0;
  /** Graceful takeovers (handoffs, failbacks) by this node. */
  handoffs = 0;
  /** Request lines handled. */
  requests = 0;
  /** One request in this many is timed. */
  readonly sampleEvery: number;
  #clock: () => number;
  #now: () => number;
  #countdown: number;
  #buckets = new Float64Array(LATENCY_BUCKETS.length + 1);
  #sum = 0;
  #observed = 0;
  /** Grants per complete second, a ring; `#rates` of them are filled. */
  #ring = new Float64Array(RATE_SECONDS);
  #rates = 0;
  #head = 0;
  /** The second being counted (floor of clock / 1000), and the grants at its start. */
  #second: number;
  #grantsAtSecond = 0;

  /** @param options The clocks, and how often a request is timed. */
  constructor(options: MetricsOptions) {
    // Plain fields, but for expirations (rare), which counts only when the option says so.
    let expirations = 0;
    const counting = options.countsExpirations;
    this.counts = {
      grants: 0,
      releases: 0,
      extends: 0,
      get expirations() {
        return expirations;
      },
      set expirations(n: number) {
        if (counting?.() ?? true) expirations = n;
      },
      timeouts: 0,
    };
    this.#clock = options.clock;
    this.#now = options.now ?? options.clock;
    this.sampleEvery = Math.max(1, Math.floor(options.sampleEvery ?? 16));
    this.#countdown = this.sampleEvery;
    this.#second = Math.floor(this.#clock() / 1000);
  }

  /**
   * A request line arrives: counts it, and returns the time it started (ms) if it is to be
   * timed, else -1. Pass a start to {@linkcode answered} once it is answered at once.
   */
  request(): number {
    this.requests++;
    if (--this.#countdown > 0) return -1;
    this.#countdown = this.sampleEvery;
    return this.#clock();
  }

  /** The timed request that started at `start` (ms) was answered at once. */
  answered(start: number): void {
    this.observe((this.#now() - start) / 1000);
  }

  /** Adds one latency observation, in seconds. */
  observe(seconds: number): void {
    const s = seconds > 0 ? seconds : 0;
    let i = 0;
    while (i < LATENCY_BUCKETS.length && s > LATENCY_BUCKETS[i]) i++;
    this.#buckets[i]++;
    this.#sum += s;
    this.#observed++;
  }

  /** An `E` reply went out for `reason`. */
  reject(reason: RejectionReason): void {
    this.rejections[reason]++;
  }

  /** This node became active: after losing the active (`failover`) or by a handover. */
  promoted(how: "failover" | "handoff"): void {
    if (how === "failover") this.failovers++;
    else this.handoffs++;
  }

  /** Closes the seconds that passed (call it often: at the end of every batch). Cheap. */
  tick(): void {
    const second = Math.floor(this.#clock() / 1000);
    if (second <= this.#second) return;
    const grants = this.counts.grants;
    this.#push(grants - this.#grantsAtSecond);
    // Seconds without a batch had no grants.
    const idle = Math.min(second - this.#second - 1, RATE_SECONDS);
    for (let i = 0; i < idle; i++) this.#push(0);
    this.#second = second;
    this.#grantsAtSecond = grants;
  }

  /** Grants in each of the last (up to 300) complete seconds, oldest first. */
  grantsPerSecond(): number[] {
    this.tick();
    const out: number[] = [];
    const start = (this.#head - this.#rates + RATE_SECONDS) % RATE_SECONDS;
    for (let i = 0; i < this.#rates; i++) out.push(this.#ring[(start + i) % RATE_SECONDS]);
    return out;
  }

  /** The latency histogram. */
  histogram(): Histogram {
    return {
      buckets: [...this.#buckets],
      sum: this.#sum,
      count: this.#observed,
      sampleEvery: this.sampleEvery,
    };
  }

  #push(grants: number): void {
    this.#ring[this.#head] = grants;
    this.#head = (this.#head + 1) % RATE_SECONDS;
    if (this.#rates < RATE_SECONDS) this.#rates++;
  }
}

/** A label value, escaped for the text format. */
function label(value: string): string {
  return value.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}

const ROLES = ["starting", "standby", "active", "handing-off", "leaving"] as const;

/**
 * The Prometheus text format (version 0.0.4) of `status` and the latency `histogram`:
 * `lockd_*` metrics, each with `HELP` and `TYPE`, `_total` counters, and the histogram
 * `lockd_request_duration_seconds` (`_bucket{le=...}`, `_sum`, `_count`).
 *
 * @example
 * ```ts ignore
 * renderPrometheus(server.status(), metrics.histogram(), metrics.requests);
 * ```
 */
export function renderPrometheus(
  status: NodeStatus,
  histogram: Histogram,
  requests: number,
): string {
  const out: string[] = [];
  const metric = (
    name: string,
    type: string,
    help: string,
    samples: [string, number | string][],
  ) => {
    out.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
    for (const [labels, value] of samples) out.push(`${name}${labels} ${value}`);
  };
  const one = (value: number | string): [string, number | string][] => [["", value]];
  const c = status.counts;
  metric("lockd_grants_total", "counter", "Locks granted, at once or to a waiter.", one(c.grants));
  metric("lockd_releases_total", "counter", "Releases that released a lock.", one(c.releases));
  metric("lockd_extends_total", "counter", "Extends that renewed a lease.", one(c.extends));
  metric("lockd_expirations_total", "counter", "Leases that ran out.", one(c.expirations));
  metric("lockd_timeouts_total", "counter", "Waits that ran out (T).", one(c.timeouts));
  metric(
    "lockd_rejections_total",
    "counter",
    "Requests answered E, by reason.",
    REJECTION_REASONS.map((r) => [`{reason="${r}"}`, c.rejections[r]]),
  );
  metric(
    "lockd_failovers_total",
    "counter",
    "Promotions of this node after the active was lost.",
    one(c.failovers),
  );
  metric("lockd_handoffs_total", "counter", "Graceful takeovers by this node.", one(c.handoffs));
  metric("lockd_requests_total", "counter", "Request lines handled.", one(requests));
  metric("lockd_holders", "gauge", "Keys held.", one(status.holders));
  metric("lockd_waiters", "gauge", "Acquires queued.", one(status.waiters));
  metric("lockd_connections", "gauge", "Client connections open.", one(status.connections));
  metric(
    "lockd_sessions",
    "gauge",
    "Client sessions with a connection open or within their grace period.",
    one(status.sessions),
  );
  metric(
    "lockd_role",
    "gauge",
    "This node's role (1 for the current one).",
    ROLES.map((role) => [`{role="${role}"}`, status.role === role ? 1 : 0]),
  );
  const replication = status.replication;
  metric(
    "lockd_replication_mode",
    "gauge",
    "The replication mode (1 for the current one; none for a single node).",
    (["async", "sync", "none"] as const).map((m) => [
      `{mode="${m}"}`,
      replication.mode === m ? 1 : 0,
    ]),
  );
  metric(
    "lockd_replication_degraded",
    "gauge",
    "1 while a sync-mode active answers without a standby in sync.",
    one(replication.degraded ? 1 : 0),
  );
  metric(
    "lockd_replication_in_sync",
    "gauge",
    "Standbys in sync (on a standby: 1 if it is in sync itself).",
    one(replication.inSync.length),
  );
  metric(
    "lockd_replication_lag_seconds",
    "gauge",
    "On the active: how long the oldest change a standby has not acknowledged has waited.",
    status.peers.filter((p) => p.lagMs !== null).map((p) => [
      `{peer="${label(p.address)}"}`,
      p.lagMs! / 1000,
    ]),
  );
  metric(
    "lockd_peer_up",
    "gauge",
    "1 for a peer heard within the failover timeout.",
    status.peers.map((p) => [`{peer="${label(p.address)}"}`, p.live ? 1 : 0]),
  );
  metric(
    "lockd_token_last",
    "gauge",
    "The last fencing token issued or known (a float here, exact in /status).",
    one(status.tokens.last),
  );
  metric(
    "lockd_token_mark",
    "gauge",
    "The reserved fencing-token mark (a float here, exact in /status).",
    one(status.tokens.mark),
  );
  metric(
    "lockd_uptime_seconds",
    "gauge",
    "Seconds since this node started.",
    one(status.uptimeSeconds),
  );
  const name = "lockd_request_duration_seconds";
  out.push(
    `# HELP ${name} Time from reading a request line to queueing its reply, for requests answered at once (one in ${histogram.sampleEvery} is timed).`,
    `# TYPE ${name} histogram`,
  );
  let cumulative = 0;
  LATENCY_BUCKETS.forEach((le, i) => {
    cumulative += histogram.buckets[i];
    out.push(`${name}_bucket{le="${le}"} ${cumulative}`);
  });
  cumulative += histogram.buckets[LATENCY_BUCKETS.length];
  out.push(`${name}_bucket{le="+Inf"} ${cumulative}`);
  out.push(`${name}_sum ${histogram.sum}`, `${name}_count ${histogram.count}`);
  return out.join("\n") + "\n";
}
