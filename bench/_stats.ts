/**
 * Small statistics and number formatting for the benchmark report.
 *
 * @module
 */

/** Median of the finite numbers in `values` (NaN if there are none). */
export function median(values: number[]): number {
  const xs = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
  if (xs.length === 0) return NaN;
  const mid = Math.floor(xs.length / 2);
  return xs.length % 2 === 1 ? xs[mid] : (xs[mid - 1] + xs[mid]) / 2;
}

/** Nearest-rank quantile `q` (0..1) of `values` (NaN if empty). */
export function quantile(values: number[], q: number): number {
  const xs = values.filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
  if (xs.length === 0) return NaN;
  return xs[Math.min(xs.length - 1, Math.max(0, Math.ceil(q * xs.length) - 1))];
}

/** `1234567` → `1,234,567` (no decimals). */
export function int(value: number): string {
  return Number.isFinite(value) ? Math.round(value).toLocaleString("en-US") : "–";
}

/** A number with about three significant digits: `0.0123`, `4.56`, `78.9`, `1,234`. */
export function num(value: number): string {
  if (!Number.isFinite(value)) return "–";
  const abs = Math.abs(value);
  if (abs >= 1000) return int(value);
  if (abs >= 100) return value.toFixed(0);
  if (abs >= 10) return value.toFixed(1);
  if (abs >= 1) return value.toFixed(2);
  if (abs === 0) return "0";
  return value.toPrecision(2);
}

/** A share (0–1) as a percentage, "–" when unknown. */
export function pct(share: number): string {
  return Number.isFinite(share)
    ? `${(share * 100).toFixed(share > 0 && share < 0.01 ? 2 : 1)} %`
    : "–";
}

/** A ratio `a / b` as `1.23×` (or `–` when it is not defined). */
export function ratio(a: number, b: number): string {
  return Number.isFinite(a) && Number.isFinite(b) && b !== 0 ? `${(a / b).toFixed(2)}×` : "–";
}
