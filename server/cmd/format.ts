/**
 * The output of `lockd status` and `lockd locks` (docs/cli.md): aligned tables for people,
 * JSON for scripts. Pure: results in, text out.
 *
 * @module
 */

import type { KeyInfo, KeyState, NodeStatus } from "../../client/codec.ts";
import type { NodeStatusResult } from "../../client/inspect.ts";
import { isRefusal } from "./exit.ts";

/** How a column is aligned: text left, numbers right. */
type Align = "left" | "right";

/**
 * Lays out `rows` under `headers`, two spaces between columns, without trailing spaces.
 *
 * @example
 * ```ts
 * renderTable(["KEY", "N"], [["a", "1"]], ["left", "right"]); // "KEY  N\na    1"
 * ```
 */
export function renderTable(headers: string[], rows: string[][], align: Align[]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: string[]) =>
    cells.map((cell, i) => align[i] === "right" ? cell.padStart(widths[i]) : cell.padEnd(widths[i]))
      .join("  ").trimEnd();
  return [line(headers), ...rows.map(line)].join("\n");
}

/** Milliseconds as a short duration: `0ms`, `250ms`, `1.5s`. */
export function formatLag(ms: number): string {
  return ms < 1000 ? `${Math.round(ms)}ms` : `${(ms / 1000).toFixed(1)}s`;
}

/** Seconds left as `29.5s`. */
export function formatLeaseLeft(seconds: number): string {
  return `${seconds.toFixed(1)}s`;
}

/** The replication state of a node, as the SYNC column shows it. */
function syncOf(status: NodeStatus): string {
  const { mode, degraded, inSync } = status.replication;
  if (mode === "none") return "-";
  if (status.role === "active" || status.role === "handing-off") {
    return `${mode}: ${inSync.length}/${status.peers.length} in sync` +
      (degraded ? ", degraded" : "");
  }
  if (status.role === "standby") {
    return inSync.includes(status.address) ? "in sync" : "catching up";
  }
  return "-";
}

/** The replication lag of a standby as its active reports it, if that active answered. */
function lagOf(status: NodeStatus, answered: NodeStatus[]): string {
  if (status.role !== "standby" || status.active === null) return "-";
  const active = answered.find((s) => s.address === status.active && s.role === "active");
  const lag = active?.peers.find((p) => p.address === status.address)?.lagMs;
  return lag === undefined || lag === null ? "-" : formatLag(lag);
}

/**
 * `lockd status`'s table: one row per address, in the order given (NODE, ROLE, ACTIVE,
 * SYNC, LAG, CONNS, HOLDERS, WAITERS, MARK); a node that did not answer shows as
 * `unreachable` (or `refused`, for a refused credential).
 */
export function statusTable(results: NodeStatusResult[]): string {
  const answered = results.flatMap((r) => r.status === undefined ? [] : [r.status]);
  const rows = results.map((result) => {
    const s = result.status;
    if (s === undefined) {
      const role = isRefusal(result.error ?? "") ? "refused" : "unreachable";
      return [result.address, role, "-", "-", "-", "-", "-", "-", "-"];
    }
    return [
      result.address,
      s.role,
      s.active ?? "none",
      syncOf(s),
      lagOf(s, answered),
      String(s.connections),
      String(s.holders),
      String(s.waiters),
      s.tokens.mark,
    ];
  });
  return renderTable(
    ["NODE", "ROLE", "ACTIVE", "SYNC", "LAG", "CONNS", "HOLDERS", "WAITERS", "MARK"],
    rows,
    ["left", "left", "left", "left", "right", "right", "right", "right", "right"],
  );
}

/** `lockd status --json`: the array of `{ address, status?, error? }`, indented. */
export function statusJson(results: NodeStatusResult[]): string {
  return JSON.stringify(results, null, 2);
}

/** A key state as the JSON of `L` and `/locks` carry it (token as a decimal string). */
export function keyInfoOf(state: KeyState): KeyInfo {
  return {
    key: state.key,
    token: String(state.token ?? ""),
    holder: state.holder ?? null,
    leaseLeftSeconds: state.leaseLeft ?? 0,
    waiters: state.waiters,
  };
}

/** `lockd locks`'s table: KEY, TOKEN, HOLDER, LEASE LEFT, WAITERS, in key order. */
export function locksTable(states: KeyState[]): string {
  const rows = states.map((s) => [
    s.key,
    String(s.token ?? "-"),
    s.holder ?? "-",
    s.leaseLeft === undefined ? "-" : formatLeaseLeft(s.leaseLeft),
    String(s.waiters),
  ]);
  return renderTable(
    ["KEY", "TOKEN", "HOLDER", "LEASE LEFT", "WAITERS"],
    rows,
    ["left", "right", "left", "right", "right"],
  );
}

/** `lockd locks --json`: an array of `KeyInfo` objects, indented. */
export function locksJson(states: KeyState[]): string {
  return JSON.stringify(states.map(keyInfoOf), null, 2);
}
