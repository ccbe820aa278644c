/**
 * What the end-to-end benchmark's workers record, runtime-neutral and without I/O: a
 * mergeable latency histogram, and the grant log of the fairness run (grants per task, how
 * often the same task got the key twice in a row).
 *
 * @module
 */

/** Values at or below this (µs) share the first bucket. */
const MIN_US = 1;
/** Relative width of a bucket: quantiles are within half of it (0.5 %). */
const STEP = 0.01;
const LOG_STEP = Math.log1p(STEP);
/** Buckets up to 1,000 s. */
const BUCKETS = Math.ceil(Math.log(1e9 / MIN_US) / LOG_STEP) + 2;

/** A histogram's contents as JSON: exact count, sum, min and max, and its non-empty buckets. */
export interface HistogramJson {
  count: number;
  sum: number;
  min: number;
  max: number;
  /** `[bucket index, count]` pairs. */
  buckets: [number, number][];
}

/**
 * Latencies in µs in buckets 1 % wide (log scale), so that workers can record every sample
 * cheaply and the orchestrator can merge the histograms of several processes.
 */
export class Histogram {
  #counts = new Float64Array(BUCKETS);
  count = 0;
  sum = 0;
  min = Infinity;
  max = -Infinity;

  /** Bucket index of `us`. */
  static bucket(us: number): number {
    if (!(us > MIN_US)) return 0;
    return Math.min(BUCKETS - 1, Math.floor(Math.log(us / MIN_US) / LOG_STEP) + 1);
  }

  /** The value a bucket stands for: the geometric middle of its bounds (µs). */
  static value(bucket: number): number {
    return bucket === 0 ? MIN_US : MIN_US * Math.exp((bucket - 0.5) * LOG_STEP);
  }

  /** Adds one sample (µs). */
  record(us: number): void {
    this.#counts[Histogram.bucket(us)]++;
    this.count++;
    this.sum += us;
    if (us < this.min) this.min = us;
    if (us > this.max) this.max = us;
  }

  /** Adds every sample of `other`. */
  merge(other: Histogram): void {
    for (let i = 0; i < BUCKETS; i++) this.#counts[i] += other.#counts[i];
    this.count += other.count;
    this.sum += other.sum;
    this.min = Math.min(this.min, other.min);
    this.max = Math.max(this.max, other.max);
  }

  /**
   * Nearest-rank quantile `q` (0..1), within 0.5 % of the sample's value, clamped to the
   * exact min and max (NaN if empty).
   */
  quantile(q: number): number {
    if (this.count === 0) return NaN;
    if (q <= 0) return this.min;
    if (q >= 1) return this.max;
    const rank = Math.min(this.count, Math.max(1, Math.ceil(q * this.count)));
    let seen = 0;
    for (let i = 0; i < BUCKETS; i++) {
      seen += this.#counts[i];
      if (seen >= rank) return Math.min(this.max, Math.max(this.min, Histogram.value(i)));
    }
    return this.max;
  }

  /** Mean of the samples (NaN if empty). */
  mean(): number {
    return this.count === 0 ? NaN : this.sum / this.count;
  }

  toJSON(): HistogramJson {
    const buckets: [number, number][] = [];
    for (let i = 0; i < BUCKETS; i++) if (this.#counts[i] > 0) buckets.push([i, this.#counts[i]]);
    return { count: this.count, sum: this.sum, min: this.min, max: this.max, buckets };
  }

  static fromJSON(json: HistogramJson): Histogram {
    const h = new Histogram();
    for (const [i, n] of json.buckets) h.#counts[i] += n;
    h.count = json.count;
    h.sum = json.sum;
    h.min = json.count > 0 ? json.min : Infinity;
    h.max = json.count > 0 ? json.max : -Infinity;
    return h;
  }
}

/** Latency summary of a histogram, in µs. */
export interface LatencySummary {
  count: number;
  p50: number;
  p99: number;
  p999: number;
  max: number;
  mean: number;
}

/** p50, p99, p99.9, max and mean of `h`. */
export function summarize(h: Histogram): LatencySummary {
  return {
    count: h.count,
    p50: h.quantile(0.5),
    p99: h.quantile(0.99),
    p999: h.quantile(0.999),
    max: h.count > 0 ? h.max : NaN,
    mean: h.mean(),
  };
}

/** Who got the key, in the order the grants arrived (the fairness run). */
export class GrantLog {
  /** Grants per task. */
  readonly perTask: number[];
  grants = 0;
  /** Grants that went to the task that had the previous grant. */
  backToBack = 0;
  #last = -1;

  constructor(tasks: number) {
    this.perTask = new Array(tasks).fill(0);
  }

  /** Task `task` was granted the key. */
  grant(task: number): void {
    this.perTask[task]++;
    if (task === this.#last) this.backToBack++;
    this.#last = task;
    this.grants++;
  }
}

/** How evenly the grants of the fairness run were spread. */
export interface Fairness {
  grants: number;
  /** Fewest and most grants of one task. */
  min: number;
  max: number;
  /** Coefficient of variation of the grants per task (0 is perfectly even). */
  cov: number;
  /** Share of grants (0..1) that went to the task that had the previous one. */
  backToBackShare: number;
  /** Tasks that got no grant at all. */
  starved: number;
}

/** The fairness figures of a grant log's counts. */
export function fairness(
  perTask: readonly number[],
  backToBack: number,
): Fairness {
  const grants = perTask.reduce((a, b) => a + b, 0);
  const n = perTask.length;
  const mean = n > 0 ? grants / n : NaN;
  const variance = n > 0 ? perTask.reduce((a, b) => a + (b - mean) ** 2, 0) / n : NaN;
  return {
    grants,
    min: n > 0 ? Math.min(...perTask) : NaN,
    max: n > 0 ? Math.max(...perTask) : NaN,
    cov: mean > 0 ? Math.sqrt(variance) / mean : NaN,
    // The first grant has no predecessor.
    backToBackShare: grants > 1 ? backToBack / (grants - 1) : NaN,
    starved: perTask.filter((g) => g === 0).length,
  };
}
