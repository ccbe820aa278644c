/**
 * The end-to-end benchmark's three charts, from its rows: throughput per client and
 * workload, latency (p50 bar, p99 whisker), and grants per task in the one-key run.
 *
 * @module
 */

import { cellTitle, type Row, variantLabel } from "./_e2e_report.ts";
import { barChart, columnChart, type Columns, latencyChart, type Panel } from "./_e2e_svg.ts";
import { int, num } from "./_stats.ts";

/** A colour per client (hue per system, lighter for the runtimes after the first). */
const COLORS: Record<string, string> = {
  "lockd/deno": "#1f5fbf",
  "lockd/node": "#4f8be0",
  "lockd/bun": "#8fb5ee",
  "lockd-node-net/deno": "#0b3478",
  "lockd-1conn/deno": "#5b2c9f",
  "redlock/deno": "#c0392b",
  "redlock/node": "#e8837a",
  "semaphore/deno": "#b9770e",
  "semaphore/node": "#f0b758",
  "etcd3/deno": "#1e8449",
  "etcd3/node": "#6fcf97",
};

export function color(variant: string): string {
  return COLORS[variant] ?? "#888888";
}

/** `85.3 µs`, `4.21 ms`, `1.20 s`. */
export function duration(us: number): string {
  if (!Number.isFinite(us)) return "–";
  if (us >= 1e6) return `${num(us / 1e6)} s`;
  if (us >= 1e3) return `${num(us / 1e3)} ms`;
  return `${num(us)} µs`;
}

function byCell(rows: Row[]): Map<string, Row[]> {
  const map = new Map<string, Row[]>();
  for (const r of rows) map.set(r.cell, [...(map.get(r.cell) ?? []), r]);
  return map;
}

/** Cycles (grants) per second per client, one panel per workload. */
export function throughputSvg(rows: Row[], subtitle: string): string {
  const panels: Panel[] = [...byCell(rows)].map(([cell, list]) => ({
    title: `${cellTitle(cell, true)}: ${cell.startsWith("c") ? "grants" : "cycles"}/s`,
    bars: list.map((r) => ({
      label: variantLabel(r.variant),
      value: r.runs > 0 ? r.rate : NaN,
      color: color(r.variant),
      text: r.runs > 0 ? int(r.rate) : "failed",
    })),
  }));
  return barChart("Throughput through each client library (higher is better)", subtitle, panels);
}

/** p50 (bar) and p99 (whisker) per client, log scale, one panel per workload. */
export function latencySvg(rows: Row[], subtitle: string): string {
  const panels: Panel[] = [...byCell(rows)].map(([cell, list]) => ({
    title: `${cellTitle(cell, true)}: ${cell.startsWith("c") ? "wait" : "cycle"} p50, p99`,
    bars: list.map((r) => ({
      label: variantLabel(r.variant),
      value: r.runs > 0 ? r.p50 : NaN,
      whisker: r.p99,
      color: color(r.variant),
      text: r.runs > 0 ? `${duration(r.p50)} / ${duration(r.p99)}` : "failed",
    })),
  }));
  return latencyChart(
    "Latency through each client library: p50 bar, p99 whisker (lower is better, log scale)",
    subtitle,
    panels,
  );
}

/** Grants per task in the one-key run, each client's tasks sorted from most to fewest. */
export function fairnessSvg(rows: Row[], subtitle: string): string {
  const panels: Columns[] = rows.filter((r) => r.cell === "c" && r.fairness).map((r) => {
    const f = r.fairness!;
    const share = Number.isFinite(f.backToBackShare)
      ? `${(f.backToBackShare * 100).toFixed(1)} %`
      : "–";
    return {
      title: `${variantLabel(r.variant)}: ${int(r.rate)} grants/s`,
      values: [...f.perTask].sort((a, b) => b - a),
      color: color(r.variant),
      reference: f.perTask.length > 0 ? f.grants / f.perTask.length : undefined,
      note: `per task ${int(f.min)}–${int(f.max)}, ${share} back to back, ${
        int(f.starved)
      } with none`,
    };
  });
  return columnChart(
    "One key, 64 tasks: grants per task, most to fewest (dashed: the even share)",
    subtitle,
    panels,
  );
}
