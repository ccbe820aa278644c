/**
 * The chaos run's verdict: pure analysis of a {@linkcode History} (no I/O, no clock), so it
 * can be tested with small synthetic histories. It counts faults and acquire outcomes, and
 * checks what must hold whatever the faults: no token granted twice, no stale write accepted
 * by the fence, no two holds of one key at once outside fault windows, no later grant with a
 * lower token than a concurrent hold (a resumed old active), no acknowledged grant lost at
 * failover with synchronous replication, acquires ending close to their wait, and a cluster
 * that converges quickly once the faults stop. docs/chaos.md explains every row.
 *
 * @module
 */

import type { AcquireOutcome, Fault, FaultKind, History, WorkerEvent } from "./history.ts";

/** A fault's window runs from its start to its end plus the failover timeout plus this. */
export const FAULT_TAIL_MS = 1000;

/**
 * A hold that ends by its lease (not by a release) is taken to end this much earlier, since
 * each side's grant time is when its worker received the grant: the next holder's grant
 * at the server's expiry can reach its worker sooner than the first grant reached its own.
 * Causality needs no allowance for a release: the server hands the key on only after the
 * release was sent.
 */
export const LEASE_JITTER_MS = 100;

/** The thresholds of the must-hold checks. */
export const MUST = {
  /** Tokens granted more than once (any key). */
  duplicateTokens: 0,
  /** Writes accepted with a token below one already accepted for the key. */
  staleWritesAccepted: 0,
  /** Overlapping holds of one key that begin outside every fault window. */
  overlapsOutsideFaults: 0,
  /** Overlaps whose later grant has the lower token, outside partitions. */
  staleGrants: 0,
  /** Overlaps at a kill -9 or SIGSTOP failover with synchronous replication. */
  lostGrantsSync: 0,
  /** Node exits nobody asked for, graceful stops not ending in exit 0. */
  badExits: 0,
  /** Workers that did not stop cleanly. */
  badWorkers: 0,
  /** Longest acquire past its wait is below the failover timeout plus this, in ms. */
  pastWaitExtraMs: 1000,
  /** Convergence after the last fault is below this, in ms. */
  convergenceMs: 2000,
} as const;

/** Whether a row is a must-hold check and how it came out; `""` for reported numbers. */
export type CheckStatus = "ok" | "FAILED" | "n/a" | "";

/** One row of the table. */
export interface CheckRow {
  /** Stable name (for `--json` and tests). */
  id: string;
  /** What the row counts, as printed. */
  label: string;
  /** The count, or milliseconds for `unit: "ms"`; `null` for "never" or "none". */
  value: number | null;
  /** `ms` for durations. */
  unit?: "ms";
  /** The threshold as printed (`= 0`, `< 2000 ms`), for must-hold rows. */
  must?: string;
  /** The verdict. */
  status: CheckStatus;
  /** Printed indented under the row above. */
  sub?: boolean;
}

/** The analysis of one run. */
export interface Report {
  /** The rows, in print order. */
  rows: CheckRow[];
  /** Every must-hold row is ok (or not applicable). */
  ok: boolean;
  /** A few examples of each violation, for people. */
  details: string[];
}

/** One hold of a key: from its grant to its release being sent or its lease running out. */
interface Hold {
  worker: number;
  op: number;
  key: string;
  token: bigint;
  grant: number;
  end: number;
  /** It ended by its lease (no release sent before). */
  byLease: boolean;
}

/** Two holds of one key at once; `later` was granted while `earlier` still held. */
interface Overlap {
  earlier: Hold;
  later: Hold;
  /** The faults whose window contains the later grant. */
  faults: Fault[];
}

const KIND_LABELS: Record<FaultKind, string> = {
  kill: "kill -9 and restart",
  pause: "SIGSTOP and SIGCONT",
  restart: "graceful restart (SIGTERM)",
  partition: "partition of one node's peer links",
};

/** At most this many examples of each violation in {@linkcode Report.details}. */
const EXAMPLES = 5;

/**
 * Judges a run.
 *
 * @example A run with nothing in it
 * ```ts
 * const report = analyze({
 *   startedAt: 0, replication: "async", syncApplies: false, failoverTimeoutMs: 1000,
 *   faults: [], events: [], writes: [], convergenceMs: 10, badExits: [], badWorkers: [],
 * });
 * report.ok; // true
 * ```
 */
export function analyze(history: History): Report {
  const rows: CheckRow[] = [];
  const details: string[] = [];
  const at = (t: number) => `+${((t - history.startedAt) / 1000).toFixed(3)} s`;
  const must = (id: string, label: string, value: number, limit: number, sub = false) => {
    rows.push({
      id,
      label,
      value,
      must: `= ${limit}`,
      status: value <= limit ? "ok" : "FAILED",
      sub,
    });
  };
  const report = (id: string, label: string, value: number | null, sub = false) => {
    rows.push({ id, label, value, status: "", sub });
  };

  for (const kind of Object.keys(KIND_LABELS) as FaultKind[]) {
    const n = history.faults.filter((f) => f.kind === kind).length;
    report(`faults.${kind}`, `faults: ${KIND_LABELS[kind]}`, n);
  }

  const { acquires, outcomes, pastWait, worst, otherErrors } = acquireStats(history.events);
  for (const [error, n] of [...otherErrors].slice(0, EXAMPLES)) {
    details.push(`other acquire error (${n}×): ${error}`);
  }
  report("acquires", "acquires", acquires);
  report("acquires.granted", "granted", outcomes.grant, true);
  report("acquires.timeout", "timed out (LockTimeoutError)", outcomes.timeout, true);
  report("acquires.unavailable", "unavailable (LockUnavailableError)", outcomes.unavailable, true);
  report("acquires.other", "other errors", outcomes.other, true);

  const duplicates = duplicateTokens(history.events);
  must(
    "duplicate-tokens",
    "duplicate tokens (one token granted twice)",
    duplicates.length,
    MUST.duplicateTokens,
  );
  for (const d of duplicates.slice(0, EXAMPLES)) details.push(`duplicate token ${d}`);

  const stale = history.writes.filter((w) => !w.accepted).length;
  report("stale-writes-rejected", "stale writes rejected by the fence", stale);
  const accepted = staleWritesAccepted(history);
  must("stale-writes-accepted", "stale writes accepted", accepted.length, MUST.staleWritesAccepted);
  for (const a of accepted.slice(0, EXAMPLES)) details.push(a);

  const overlaps = findOverlaps(history);
  const outside = overlaps.filter((o) => o.faults.length === 0);
  const inside = overlaps.filter((o) => o.faults.length > 0);
  const lower = overlaps.filter((o) => o.later.token < o.earlier.token);
  const isPartition = (o: Overlap) =>
    o.faults.length > 0 && o.faults.every((f) => f.kind === "partition");
  const staleGrants = lower.filter((o) => !isPartition(o));
  const splitBrain = lower.filter(isPartition);
  const lost = inside.filter((o) =>
    o.later.token > o.earlier.token && o.faults.some((f) => f.kind === "kill" || f.kind === "pause")
  );
  must(
    "overlaps-outside",
    "overlapping holds outside fault windows",
    outside.length,
    MUST.overlapsOutsideFaults,
  );
  report("overlaps-inside", "overlapping holds inside fault windows", inside.length);
  must(
    "stale-grants",
    "stale grants by a resumed node (later grant, lower token)",
    staleGrants.length,
    MUST.staleGrants,
    true,
  );
  report(
    "split-brain-grants",
    "lower-token grants during a partition (split brain)",
    splitBrain.length,
    true,
  );
  if (history.syncApplies) {
    must(
      "lost-grants",
      "acknowledged grants lost at failover",
      lost.length,
      MUST.lostGrantsSync,
      true,
    );
  } else {
    rows.push({
      id: "lost-grants",
      label: "acknowledged grants lost at failover",
      value: lost.length,
      must: "= 0 (sync)",
      status: "n/a",
      sub: true,
    });
  }
  const describe = (what: string, list: Overlap[]) => {
    for (const o of list.slice(0, EXAMPLES)) details.push(`${what}: ${overlapText(o, at)}`);
  };
  describe("overlap outside fault windows", outside);
  describe("stale grant", staleGrants);
  describe(history.syncApplies ? "grant lost at failover" : "grant lost at failover (async)", lost);
  describe("split-brain grant", splitBrain);

  const pastLimit = history.failoverTimeoutMs + MUST.pastWaitExtraMs;
  rows.push({
    id: "past-wait",
    label: "longest acquire past its wait",
    value: pastWait === null ? null : Math.round(pastWait),
    unit: "ms",
    must: `< ${pastLimit} ms`,
    status: pastWait === null || pastWait < pastLimit ? "ok" : "FAILED",
  });
  if (pastWait !== null && pastWait >= pastLimit) {
    const w = worst!;
    details.push(
      `acquire ${Math.round(pastWait)} ms past its wait: worker ${w.worker} op ${w.op} on ` +
        `${w.key} (wait ${w.wait} s) from ${at(w.t)}: ${w.ending}`,
    );
  }

  const c = history.convergenceMs;
  rows.push({
    id: "convergence",
    label: "convergence after the last fault",
    value: c === null ? null : Math.round(c),
    unit: "ms",
    must: `< ${MUST.convergenceMs} ms`,
    status: c !== null && c < MUST.convergenceMs ? "ok" : "FAILED",
  });

  const measured = history.faults.filter((f) => f.convergedMs !== undefined);
  const slowest = measured.some((f) => f.convergedMs === null)
    ? null
    : Math.max(0, ...measured.map((f) => f.convergedMs!));
  rows.push({
    id: "slowest-convergence",
    label: "slowest convergence after any fault",
    value: slowest === null ? null : Math.round(slowest),
    unit: "ms",
    status: "",
    sub: true,
  });

  must(
    "bad-exits",
    "node exits not asked for, or not clean",
    history.badExits.length,
    MUST.badExits,
  );
  for (const e of history.badExits.slice(0, EXAMPLES)) details.push(`node: ${e}`);
  must(
    "bad-workers",
    "workers that did not stop cleanly",
    history.badWorkers.length,
    MUST.badWorkers,
  );
  for (const w of history.badWorkers.slice(0, EXAMPLES)) details.push(`worker: ${w}`);

  return { rows, ok: rows.every((r) => r.status !== "FAILED"), details };
}

/** What the acquires of a run came to. */
interface AcquireStats {
  /** Acquires started. */
  acquires: number;
  /** How the ended ones ended. */
  outcomes: Record<AcquireOutcome, number>;
  /** The most any acquire ended past its wait, in ms (`null`: none ended). */
  pastWait: number | null;
  /** That acquire's start, and how it ended. */
  worst?: Extract<WorkerEvent, { type: "acquire" }> & { ending: string };
  /** The messages of the acquires that ended with another error, and how often. */
  otherErrors: Map<string, number>;
}

function acquireStats(events: WorkerEvent[]): AcquireStats {
  const stats: AcquireStats = {
    acquires: 0,
    outcomes: { grant: 0, timeout: 0, unavailable: 0, other: 0 },
    pastWait: null,
    otherErrors: new Map(),
  };
  const starts = new Map<string, Extract<WorkerEvent, { type: "acquire" }>>();
  for (const event of events) {
    const id = `${event.worker}/${event.op}`;
    if (event.type === "acquire") {
      stats.acquires++;
      starts.set(id, event);
    }
    if (event.type !== "acquired") continue;
    stats.outcomes[event.outcome]++;
    if (event.outcome === "other") {
      const error = event.error ?? "?";
      stats.otherErrors.set(error, (stats.otherErrors.get(error) ?? 0) + 1);
    }
    const start = starts.get(id);
    if (start === undefined) continue;
    const past = event.t - start.t - start.wait * 1000;
    if (stats.pastWait === null || past > stats.pastWait) {
      stats.pastWait = past;
      stats.worst = { ...start, ending: event.error ?? event.outcome };
    }
  }
  return stats;
}

/** The tokens granted more than once, each with who got it. */
function duplicateTokens(events: WorkerEvent[]): string[] {
  const byToken = new Map<string, string[]>();
  for (const e of events) {
    if (e.type !== "grant") continue;
    const list = byToken.get(e.token) ?? [];
    list.push(`worker ${e.worker} op ${e.op} key ${e.key}`);
    byToken.set(e.token, list);
  }
  return [...byToken].filter(([, who]) => who.length > 1).map(([token, who]) =>
    `${token}: ${who.join(", ")}`
  );
}

/** Writes the fence accepted although a higher token had been accepted for the key. */
function staleWritesAccepted(history: History): string[] {
  const highest = new Map<string, bigint>();
  const out: string[] = [];
  for (const w of history.writes) {
    if (!w.accepted) continue;
    const token = BigInt(w.token);
    const top = highest.get(w.key);
    if (top !== undefined && token < top) {
      out.push(`write of ${w.key} with ${token} accepted after ${top} (worker ${w.worker})`);
    }
    if (top === undefined || token > top) highest.set(w.key, token);
  }
  return out;
}

/** Every hold, from the grants, leases and releases in the events. */
function holdsOf(events: WorkerEvent[]): Hold[] {
  const leases = new Map<string, number>();
  const released = new Map<string, number>();
  for (const e of events) {
    if (e.type === "acquire") leases.set(`${e.worker}/${e.op}`, e.lease * 1000);
    if (e.type === "release") released.set(`${e.worker}/${e.op}`, e.t);
  }
  const holds: Hold[] = [];
  for (const e of events) {
    if (e.type !== "grant") continue;
    const id = `${e.worker}/${e.op}`;
    const leaseEnd = e.t + (leases.get(id) ?? 0);
    const release = released.get(id) ?? Infinity;
    const byLease = release >= leaseEnd;
    const end = byLease ? leaseEnd : release;
    holds.push({
      worker: e.worker,
      op: e.op,
      key: e.key,
      token: BigInt(e.token),
      grant: e.t,
      end,
      byLease,
    });
  }
  return holds;
}

/** Pairs of holds of one key where the later grant came before the earlier hold ended. */
function findOverlaps(history: History): Overlap[] {
  const tail = history.failoverTimeoutMs + FAULT_TAIL_MS;
  const byKey = new Map<string, Hold[]>();
  for (const h of holdsOf(history.events)) {
    const list = byKey.get(h.key) ?? [];
    list.push(h);
    byKey.set(h.key, list);
  }
  const out: Overlap[] = [];
  for (const holds of byKey.values()) {
    holds.sort((a, b) => a.grant - b.grant || (a.token < b.token ? -1 : 1));
    for (const [i, earlier] of holds.entries()) {
      const until = earlier.end - (earlier.byLease ? LEASE_JITTER_MS : 0);
      for (let j = i + 1; j < holds.length && holds[j].grant < until; j++) {
        const later = holds[j];
        const faults = history.faults.filter((f) =>
          f.start <= later.grant && later.grant <= f.end + tail
        );
        out.push({ earlier, later, faults });
      }
    }
  }
  return out;
}

function overlapText(o: Overlap, at: (t: number) => string): string {
  const { earlier: e, later: l } = o;
  const faults = o.faults.map((f) => `${f.kind} of node ${f.node} from ${at(f.start)}`);
  return `key ${e.key}: worker ${l.worker} op ${l.op} granted ${l.token} at ${at(l.grant)} ` +
    `while worker ${e.worker} op ${e.op} held ${e.token} (granted ${at(e.grant)}, until ` +
    `${at(e.end)} by ${e.byLease ? "lease" : "release"})` +
    (faults.length > 0 ? `; during ${faults.join(", ")}` : "; no fault window");
}

/**
 * The report as a table: check, value, threshold, status (`ok` / `FAILED` / `n/a`).
 *
 * @example Print a report
 * ```ts
 * console.log(formatTable(report));
 * ```
 */
export function formatTable(report: Report): string {
  const cells = report.rows.map((r) => [
    (r.sub ? "  " : "") + r.label,
    r.value === null ? "never" : `${r.value}${r.unit === "ms" ? " ms" : ""}`,
    r.must ?? "",
    r.status,
  ]);
  const head = ["check", "value", "must", "status"];
  const widths = head.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i].length)));
  const line = (c: string[]) =>
    c.map((v, i) => (i === 1 ? v.padStart(widths[i]) : v.padEnd(widths[i]))).join("  ").trimEnd();
  return [line(head), line(widths.map((w) => "-".repeat(w))), ...cells.map(line)].join("\n");
}
