/**
 * Small SVG charts for the end-to-end benchmark's report, with no dependency: panels of
 * horizontal bars (throughput, linear scale), of bars with whiskers (latency p50 → p99, log
 * scale), and of a distribution's columns (grants per task in the fairness run).
 *
 * @module
 */

/** One bar of a panel. */
export interface Bar {
  label: string;
  /** The bar's length (NaN: drawn as "not measured"). */
  value: number;
  /** A second value drawn as a whisker from `value` (latency: p99). */
  whisker?: number;
  color: string;
  /** What is written at the end of the bar. */
  text: string;
}

/** A titled group of bars on one scale. */
export interface Panel {
  title: string;
  bars: Bar[];
}

/** A distribution (e.g. grants per task), drawn as columns. */
export interface Columns {
  title: string;
  values: number[];
  color: string;
  /** A line across the panel (e.g. the fair share), if given. */
  reference?: number;
  /** Text under the title. */
  note: string;
}

const FONT = `font-family="system-ui, -apple-system, 'Segoe UI', sans-serif"`;
const LABEL_W = 168;
const BAR_H = 14;
const BAR_GAP = 4;
const PANEL_W = 480;
const PANEL_PAD = 16;
const TITLE_H = 34;

/** Escapes text for SVG. */
export function escapeXml(text: string): string {
  return text.replaceAll("&", "&amp;").replaceAll("<", "&lt;").replaceAll(">", "&gt;")
    .replaceAll('"', "&quot;");
}

/** Rounds to 0.1 px, enough for a chart and keeps the file small. */
function px(n: number): string {
  return (Math.round(n * 10) / 10).toString();
}

function text(x: number, y: number, body: string, attrs = ""): string {
  return `<text x="${px(x)}" y="${px(y)}" ${attrs}>${escapeXml(body)}</text>`;
}

/** A "nice" upper bound for a linear axis: 1, 2 or 5 times a power of ten, at least `max`. */
export function niceMax(max: number): number {
  if (!(max > 0) || !Number.isFinite(max)) return 1;
  const power = 10 ** Math.floor(Math.log10(max));
  for (const m of [1, 2, 5, 10]) if (m * power >= max) return m * power;
  return 10 * power;
}

/** Powers of ten from below `min` to above `max` (the ticks of a log axis). */
export function decades(min: number, max: number): number[] {
  const lo = Math.floor(Math.log10(Math.max(min, 1e-9)));
  const hi = Math.max(lo + 1, Math.ceil(Math.log10(Math.max(max, min, 1e-9))));
  const out: number[] = [];
  for (let e = lo; e <= hi; e++) out.push(10 ** e);
  return out;
}

/** A µs value as an axis label: `10 µs`, `1 ms`, `2 s`. */
export function usLabel(us: number): string {
  if (us >= 1e6) return `${us / 1e6} s`;
  if (us >= 1e3) return `${us / 1e3} ms`;
  return `${us} µs`;
}

function panelHeight(p: Panel): number {
  return TITLE_H + p.bars.length * (BAR_H + BAR_GAP) + 22;
}

function frame(title: string, subtitle: string, width: number, height: number, body: string[]) {
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" ` +
    `viewBox="0 0 ${width} ${height}" ${FONT} font-size="12">`,
    `<rect width="${width}" height="${height}" fill="#ffffff"/>`,
    text(PANEL_PAD, 24, title, `font-size="16" font-weight="600" fill="#111"`),
    text(PANEL_PAD, 42, subtitle, `fill="#555"`),
    ...body,
    "</svg>",
    "",
  ].join("\n");
}

/** Lays panels out in `columns` columns; `draw` renders one at (x, y). */
function grid<T>(
  items: T[],
  columns: number,
  height: (item: T) => number,
  draw: (item: T, x: number, y: number) => string[],
): { body: string[]; width: number; height: number } {
  const body: string[] = [];
  let y = 56;
  for (let i = 0; i < items.length; i += columns) {
    const row = items.slice(i, i + columns);
    const h = Math.max(...row.map(height));
    row.forEach((item, j) => body.push(...draw(item, PANEL_PAD + j * (PANEL_W + PANEL_PAD), y)));
    y += h + PANEL_PAD;
  }
  return { body, width: PANEL_PAD + columns * (PANEL_W + PANEL_PAD), height: y };
}

/** Horizontal bars on a linear scale from 0, one scale per panel. */
export function barChart(
  title: string,
  subtitle: string,
  panels: Panel[],
  columns = 2,
): string {
  const plotW = PANEL_W - LABEL_W - 70;
  const { body, width, height } = grid(
    panels,
    Math.min(columns, panels.length),
    panelHeight,
    (p, x, y) => {
      const max = niceMax(Math.max(0, ...p.bars.map((b) => b.value).filter(Number.isFinite)));
      const out = [text(x, y + 16, p.title, `font-weight="600" fill="#222"`)];
      const x0 = x + LABEL_W;
      const bottom = y + TITLE_H + p.bars.length * (BAR_H + BAR_GAP);
      for (const f of [0, 0.5, 1]) {
        const gx = x0 + f * plotW;
        out.push(
          `<line x1="${px(gx)}" y1="${px(y + TITLE_H - 6)}" x2="${px(gx)}" y2="${
            px(bottom)
          }" stroke="#e3e3e3"/>`,
          text(
            gx,
            bottom + 14,
            (max * f).toLocaleString("en-US"),
            `text-anchor="middle" fill="#777" font-size="10"`,
          ),
        );
      }
      p.bars.forEach((b, i) => {
        const by = y + TITLE_H + i * (BAR_H + BAR_GAP);
        out.push(text(x0 - 6, by + BAR_H - 3, b.label, `text-anchor="end" fill="#333"`));
        if (!Number.isFinite(b.value)) {
          out.push(text(x0 + 4, by + BAR_H - 3, b.text || "not measured", `fill="#999"`));
          return;
        }
        const w = Math.max(1, (b.value / max) * plotW);
        out.push(
          `<rect x="${px(x0)}" y="${px(by)}" width="${
            px(w)
          }" height="${BAR_H}" fill="${b.color}"/>`,
          text(x0 + w + 4, by + BAR_H - 3, b.text, `fill="#333"`),
        );
      });
      return out;
    },
  );
  return frame(title, subtitle, width, height, body);
}

/** Bars to `value` with a whisker to `whisker`, on a log scale (µs) shared by each panel. */
export function latencyChart(
  title: string,
  subtitle: string,
  panels: Panel[],
  columns = 2,
): string {
  const plotW = PANEL_W - LABEL_W - 128;
  const { body, width, height } = grid(
    panels,
    Math.min(columns, panels.length),
    panelHeight,
    (p, x, y) => {
      const values = p.bars.flatMap((b) => [b.value, b.whisker ?? NaN]).filter((v) => v > 0);
      const ticks = decades(Math.min(...values, 10), Math.max(...values, 100));
      const lo = Math.log10(ticks[0]), hi = Math.log10(ticks.at(-1)!);
      const at = (v: number) => x + LABEL_W + ((Math.log10(v) - lo) / (hi - lo)) * plotW;
      const out = [text(x, y + 16, p.title, `font-weight="600" fill="#222"`)];
      const bottom = y + TITLE_H + p.bars.length * (BAR_H + BAR_GAP);
      for (const t of ticks) {
        out.push(
          `<line x1="${px(at(t))}" y1="${px(y + TITLE_H - 6)}" x2="${px(at(t))}" y2="${
            px(bottom)
          }" stroke="#e3e3e3"/>`,
          text(at(t), bottom + 14, usLabel(t), `text-anchor="middle" fill="#777" font-size="10"`),
        );
      }
      p.bars.forEach((b, i) => {
        const by = y + TITLE_H + i * (BAR_H + BAR_GAP);
        out.push(text(x + LABEL_W - 6, by + BAR_H - 3, b.label, `text-anchor="end" fill="#333"`));
        if (!(b.value > 0)) {
          out.push(text(x + LABEL_W + 4, by + BAR_H - 3, b.text || "not measured", `fill="#999"`));
          return;
        }
        const end = at(b.value);
        out.push(
          `<rect x="${px(x + LABEL_W)}" y="${px(by)}" width="${
            px(Math.max(1, end - x - LABEL_W))
          }" height="${BAR_H}" fill="${b.color}"/>`,
        );
        let right = end;
        if (b.whisker !== undefined && b.whisker > b.value) {
          right = at(b.whisker);
          const mid = by + BAR_H / 2;
          out.push(
            `<line x1="${px(end)}" y1="${px(mid)}" x2="${px(right)}" y2="${
              px(mid)
            }" stroke="#333"/>`,
            `<line x1="${px(right)}" y1="${px(by + 2)}" x2="${px(right)}" y2="${
              px(by + BAR_H - 2)
            }" stroke="#333"/>`,
          );
        }
        out.push(text(right + 4, by + BAR_H - 3, b.text, `fill="#333"`));
      });
      return out;
    },
  );
  return frame(title, subtitle, width, height, body);
}

/** One panel of columns per distribution, each on its own scale from 0. */
export function columnChart(
  title: string,
  subtitle: string,
  panels: Columns[],
  columns = 3,
): string {
  const w = 300, plotH = 110, top = 44;
  const layout = {
    cols: Math.min(columns, panels.length),
  };
  const body: string[] = [];
  let y = 56;
  for (let i = 0; i < panels.length; i += layout.cols) {
    panels.slice(i, i + layout.cols).forEach((p, j) => {
      const x = PANEL_PAD + j * (w + PANEL_PAD);
      const max = niceMax(Math.max(0, ...p.values, p.reference ?? 0));
      const base = y + top + plotH;
      body.push(
        text(x, y + 14, p.title, `font-weight="600" fill="#222"`),
        text(x, y + 30, p.note, `fill="#555" font-size="11"`),
        `<line x1="${x + 36}" y1="${base}" x2="${x + w}" y2="${base}" stroke="#999"/>`,
        text(x + 32, base, "0", `text-anchor="end" fill="#777" font-size="10"`),
        text(
          x + 32,
          y + top + 8,
          max.toLocaleString("en-US"),
          `text-anchor="end" fill="#777" font-size="10"`,
        ),
        `<line x1="${x + 36}" y1="${y + top}" x2="${x + w}" y2="${y + top}" stroke="#eee"/>`,
      );
      const n = Math.max(1, p.values.length);
      const cw = (w - 38) / n;
      p.values.forEach((v, k) => {
        const h = max > 0 ? (v / max) * plotH : 0;
        body.push(
          `<rect x="${px(x + 37 + k * cw)}" y="${px(base - h)}" width="${
            px(Math.max(0.5, cw - 1))
          }" height="${px(h)}" fill="${p.color}"/>`,
        );
      });
      if (p.reference !== undefined && max > 0) {
        const ry = base - (p.reference / max) * plotH;
        body.push(
          `<line x1="${x + 36}" y1="${px(ry)}" x2="${x + w}" y2="${
            px(ry)
          }" stroke="#111" stroke-dasharray="4 3"/>`,
        );
      }
    });
    y += top + plotH + 24;
  }
  return frame(title, subtitle, PANEL_PAD + layout.cols * (w + PANEL_PAD), y, body);
}
