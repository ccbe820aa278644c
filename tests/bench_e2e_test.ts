/**
 * Tests of the end-to-end benchmark's pure parts (`deno task bench:clients`, issue 14): the
 * latency histogram, the fairness figures, the workload loops against an in-memory lock, the
 * merging of workers' results, the medians and targets of the report, its markdown, and the
 * SVG charts. No server, no process: the live path (servers, workers, /proc) runs only in
 * `deno task bench:clients` itself.
 */

import assert from "node:assert/strict";
import { fairnessSvg, latencySvg, throughputSvg } from "../bench/_e2e_charts.ts";
import {
  aggregate,
  type Context,
  markdown,
  type Row,
  summaryTable,
  targets,
} from "../bench/_e2e_report.ts";
import { cells, combine, type Measurement, VARIANTS } from "../bench/_e2e_run.ts";
import { bareNpmSpecifiers } from "../bench/_e2e_snapshot.ts";
import { machineTicks, stealShare } from "../bench/_procs.ts";
import { fairness, GrantLog, Histogram, summarize } from "../bench/_e2e_stats.ts";
import { decades, escapeXml, niceMax, usLabel } from "../bench/_e2e_svg.ts";
import { type Held, type LockSystem, type WorkerResult, Workload } from "../bench/_e2e_workload.ts";

Deno.test("Histogram quantiles are within 0.5 % of the nearest-rank sample", () => {
  const h = new Histogram();
  const values: number[] = [];
  for (let i = 1; i <= 10_000; i++) {
    const v = 3 + (i * 7919) % 50_000; // spread over 3 µs – 50 ms, in no order
    values.push(v);
    h.record(v);
  }
  values.sort((a, b) => a - b);
  for (const q of [0.01, 0.5, 0.9, 0.99, 0.999]) {
    const exact = values[Math.ceil(q * values.length) - 1];
    const got = h.quantile(q);
    assert.ok(Math.abs(got / exact - 1) <= 0.005, `q ${q}: ${got} vs ${exact}`);
  }
  assert.equal(h.quantile(1), values.at(-1));
  assert.equal(h.quantile(0), values[0]);
  assert.equal(h.count, 10_000);
  assert.ok(Math.abs(h.mean() - values.reduce((a, b) => a + b, 0) / values.length) < 1e-6);
});

Deno.test("Histogram merges and survives JSON", () => {
  const a = new Histogram(), b = new Histogram(), all = new Histogram();
  for (let i = 0; i < 500; i++) {
    a.record(10 + i);
    b.record(1000 + i * 3);
    all.record(10 + i);
    all.record(1000 + i * 3);
  }
  const merged = Histogram.fromJSON(JSON.parse(JSON.stringify(a)));
  merged.merge(Histogram.fromJSON(b.toJSON()));
  for (const q of [0.25, 0.5, 0.75, 0.99]) assert.equal(merged.quantile(q), all.quantile(q));
  assert.equal(merged.count, 1000);
  assert.equal(merged.min, 10);
  assert.equal(merged.max, 1000 + 499 * 3);
});

Deno.test("Histogram of nothing summarizes to NaN, and tiny values share the first bucket", () => {
  const empty = summarize(Histogram.fromJSON(new Histogram().toJSON()));
  assert.equal(empty.count, 0);
  assert.ok(Number.isNaN(empty.p50) && Number.isNaN(empty.max) && Number.isNaN(empty.mean));
  const h = new Histogram();
  h.record(0);
  h.record(0.5);
  assert.equal(Histogram.bucket(0.5), 0);
  assert.equal(h.quantile(0.5), 0.5); // clamped to the exact max
});

Deno.test("GrantLog and fairness() count grants per task and back-to-back grants", () => {
  const log = new GrantLog(4);
  for (const task of [0, 1, 0, 0, 2, 2, 1]) log.grant(task);
  assert.deepEqual(log.perTask, [3, 2, 2, 0]);
  assert.equal(log.backToBack, 2);
  const f = fairness(log.perTask, log.backToBack);
  assert.equal(f.grants, 7);
  assert.equal(f.min, 0);
  assert.equal(f.max, 3);
  assert.equal(f.starved, 1);
  assert.equal(f.backToBackShare, 2 / 6);
  const even = fairness([5, 5, 5], 0);
  assert.equal(even.cov, 0);
  assert.equal(even.backToBackShare, 0);
  assert.ok(Number.isNaN(fairness([], 0).min));
});

/** An in-memory lock server: FIFO waiters per key, every reply a macrotask away. */
function fifoLocks(options: { failEvery?: number } = {}): LockSystem & { acquires: number } {
  const held = new Set<string>();
  const queues = new Map<string, (() => void)[]>();
  const later = (fn: () => void) => setTimeout(fn, 0);
  const system = {
    acquires: 0,
    acquire(key: string, waitMs: number): Promise<Held | null> {
      system.acquires++;
      if (options.failEvery && system.acquires % options.failEvery === 0) {
        return new Promise((_, reject) => later(() => reject(new Error("injected failure"))));
      }
      const grant = (): Held => ({
        release: () =>
          new Promise<void>((resolve) =>
            later(() => {
              const next = queues.get(key)?.shift();
              if (next) next();
              else held.delete(key);
              resolve();
            })
          ),
      });
      return new Promise((resolve) => {
        if (!held.has(key)) {
          held.add(key);
          later(() => resolve(grant()));
        } else if (waitMs === 0) {
          later(() => resolve(null));
        } else {
          const queue = queues.get(key) ?? [];
          queues.set(key, queue);
          queue.push(() => resolve(grant()));
        }
      });
    },
    close: () => Promise.resolve(),
  };
  return system;
}

async function runFor(workload: Workload, ms: number): Promise<WorkerResult> {
  workload.run();
  await new Promise((resolve) => setTimeout(resolve, 10)); // warm-up
  workload.start();
  await new Promise((resolve) => setTimeout(resolve, ms));
  const result = workload.stop();
  await workload.drained();
  return result;
}

Deno.test("Workload on own keys counts completed cycles and their latencies", async () => {
  const system = fifoLocks();
  const result = await runFor(
    new Workload(system, { tasks: 8, keyPrefix: "k", sharedKey: false, waitMs: 0 }),
    60,
  );
  assert.ok(result.cycles > 0, "some cycles");
  assert.equal(result.cycle.count, result.cycles);
  // A cycle whose grant came just before the window opened still counts when its release
  // completes inside it: at most one such cycle per task.
  assert.ok(result.acquire.count + 8 >= result.cycles, `${result.acquire.count} ${result.cycles}`);
  assert.equal(result.timeouts, 0);
  assert.equal(result.errors, 0);
  assert.ok(result.seconds > 0.05 && result.seconds < 1);
  assert.equal(result.perTask.reduce((a, b) => a + b, 0), result.acquire.count);
});

Deno.test("Workload on one key through a FIFO lock is exactly fair", async () => {
  const workload = new Workload(fifoLocks(), {
    tasks: 5,
    keyPrefix: "one",
    sharedKey: true,
    waitMs: 1000,
  });
  const result = await runFor(workload, 60);
  const f = fairness(result.perTask, result.backToBack);
  assert.ok(f.grants >= 10, `grants ${f.grants}`);
  assert.ok(f.max - f.min <= 1, `per task ${result.perTask}`);
  assert.equal(f.backToBackShare, 0);
  assert.equal(workload.fairness().grants, f.grants);
});

Deno.test("Workload counts errors, keeps a few of their messages, and goes on", async () => {
  const result = await runFor(
    new Workload(fifoLocks({ failEvery: 3 }), {
      tasks: 2,
      keyPrefix: "e",
      sharedKey: false,
      waitMs: 0,
    }),
    60,
  );
  assert.ok(result.errors > 0);
  assert.ok(result.cycles > 0);
  assert.ok(result.errorSamples.length >= 1 && result.errorSamples.length <= 5);
  assert.match(result.errorSamples[0], /injected failure/);
});

function workerResult(cycles: number, latency: number, perTask: number[] = []): WorkerResult {
  const h = new Histogram();
  for (let i = 0; i < cycles; i++) h.record(latency);
  return {
    seconds: 2,
    cycles,
    timeouts: 0,
    errors: 0,
    errorSamples: [],
    cycle: h.toJSON(),
    acquire: h.toJSON(),
    perTask,
    backToBack: 0,
  };
}

Deno.test("cells() makes every workload and placement asked for", () => {
  const all = cells(["a", "b", "c", "d"], ["any", "same", "split"]);
  assert.deepEqual(all.map((c) => c.id), [
    "a",
    "a/same",
    "a/split",
    "b",
    "b/same",
    "b/split",
    "c",
    "d",
  ]);
  const d = all.find((c) => c.id === "d")!;
  assert.equal(d.procs * d.tasksPerProc, 64);
  assert.ok(all.find((c) => c.id === "c")!.sharedKey);
  assert.deepEqual(cells(["b", "c"], ["same"]).map((c) => c.id), ["b/same", "c"]);
});

Deno.test("combine() adds the processes' rates and divides CPU time by cycles", () => {
  const v = VARIANTS.find((x) => x.id === "lockd/deno")!;
  const d = cells(["d"], ["any"])[0];
  const m = combine(v, d, 1, [workerResult(1000, 100), workerResult(3000, 300)], {
    clientUs: 40_000,
    serverUs: 8_000,
    wall: 2,
    load: 0.5,
  });
  assert.equal(m.cycles, 4000);
  assert.equal(m.rate, 2000); // 500 + 1500 per second
  assert.equal(m.clientCpuPerCycle, 10);
  assert.equal(m.serverCpuPerCycle, 2);
  assert.equal(m.clientCores, 0.02);
  assert.ok(Math.abs(m.cycle.p50 / 300 - 1) < 0.005);
  assert.equal(m.fairness, undefined);
  const c = cells(["c"], ["any"])[0];
  const one = combine(v, c, 1, [workerResult(10, 50, [4, 4, 4])], {
    clientUs: 1200,
    serverUs: 600,
    wall: 2,
    load: 0,
  });
  assert.equal(one.rate, 6); // 12 grants in 2 s
  assert.equal(one.clientCpuPerCycle, 100);
  assert.equal(one.fairness?.max, 4);
});

function measurement(variant: string, cell: string, rate: number, extra = {}): Measurement {
  const lat = { count: 1, p50: 100, p99: 200, p999: 300, max: 400, mean: 120 };
  return {
    variant,
    cell,
    run: 1,
    seconds: 1,
    cycles: rate,
    rate,
    timeouts: 0,
    errors: 0,
    errorSamples: [],
    cycle: lat,
    acquire: lat,
    clientCpuPerCycle: 1e6 / rate,
    serverCpuPerCycle: 1e5 / rate,
    clientCores: 1,
    serverCores: 0.1,
    loadavg: 0.2,
    ...extra,
  };
}

function sampleRows(): Row[] {
  const variants = VARIANTS.filter((v) =>
    ["lockd/deno", "redlock/deno", "semaphore/deno"].includes(v.id)
  );
  const cs = cells(["a", "b", "c", "d"], ["any", "same"]);
  const even = { ...fairness([10, 10, 10], 0), perTask: [10, 10, 10] };
  const skewed = { ...fairness([0, 5, 25], 20), perTask: [0, 5, 25] };
  const ms: Measurement[] = [];
  for (const run of [1, 2, 3]) {
    ms.push(measurement("lockd/deno", "b", [90_000, 100_000, 30_000][run - 1]));
    ms.push(measurement("redlock/deno", "b", 50_000));
    ms.push(measurement("lockd/deno", "c", 9000, { fairness: even }));
    ms.push(measurement("redlock/deno", "c", 3000, { fairness: skewed }));
    ms.push(measurement("semaphore/deno", "c", 4000, { fairness: skewed }));
    ms.push(measurement("lockd/deno", "a/same", 5000));
    ms.push(measurement("semaphore/deno", "a/same", 6000, {
      cycle: { count: 1, p50: 90, p99: 150, p999: 200, max: 300, mean: 95 },
    }));
  }
  return aggregate(variants, cs, ms, [{ variant: "lockd/deno", cell: "d", error: "it broke" }]);
}

Deno.test("aggregate() takes medians, and the fairness of the median run", () => {
  const rows = sampleRows();
  const b = rows.find((r) => r.variant === "lockd/deno" && r.cell === "b")!;
  assert.equal(b.rate, 90_000);
  assert.deepEqual(b.rates, [90_000, 100_000, 30_000]);
  assert.equal(b.runs, 3);
  const d = rows.find((r) => r.variant === "lockd/deno" && r.cell === "d")!;
  assert.equal(d.runs, 0);
  assert.deepEqual(d.failed, ["it broke"]);
  assert.ok(Number.isNaN(d.rate));
  assert.equal(rows.find((r) => r.variant === "lockd/deno" && r.cell === "c")!.fairness?.max, 10);
  // Nothing measured, nothing failed: no row.
  assert.equal(rows.find((r) => r.variant === "semaphore/deno" && r.cell === "b"), undefined);
});

Deno.test("targets() says met, missed or not measured, with the numbers", () => {
  const list = targets(sampleRows());
  const get = (start: string) => list.find((t) => t.target.startsWith(start))!;
  const b = get("Deno, (b) 64 tasks");
  assert.equal(b.met, true);
  assert.match(b.measured, /^1\.80× \(90,000 vs 50,000\)/);
  assert.equal(get("Deno, (b): lockd client CPU").met, false); // 11.1 vs 20 µs: 0.56×
  assert.equal(get("Deno, (d)").met, undefined);
  const a = get("Deno, (a)");
  assert.equal(a.met, false);
  assert.match(a.measured, /redis-semaphore · Deno/);
  const c = get("Deno, (c)");
  assert.equal(c.met, true); // 9000 vs 4000, 10–10 per task
  assert.match(c.measured, /2\.25×/);
  assert.equal(get("Node.js, (b) 64 tasks").met, undefined);
});

Deno.test("markdown() has the summary, targets, one table per workload, charts, anomalies", () => {
  const rows = sampleRows();
  const variants = VARIANTS.filter((v) =>
    ["lockd/deno", "redlock/deno", "semaphore/deno"].includes(v.id)
  );
  const ctx: Context = {
    command: "deno task bench:clients --quick",
    date: "2026-01-01T00:00:00.000Z",
    cpu: "Test CPU",
    cores: 2,
    kernel: "6.0",
    memoryGiB: 8,
    versions: { Deno: "2.9.6", Redis: "7.0.15" },
    git: "abc1234",
    loadavgAtStart: 0.1,
    loadavgRange: [0.1, 0.9],
    stealRange: [0.004, 0.25],
    elapsedS: 12,
    settings: {
      runs: 3,
      warmup: 1,
      duration: 3,
      leaseMs: 10_000,
      waitMs: 10_000,
      pollMs: 10,
      redlockRetryMs: 200,
      cpus: [0, 1],
    },
    anomalies: ["redis was slow"],
  };
  const md = markdown(rows, variants, cells(["a", "b", "c", "d"], ["any", "same"]), ctx, [
    { name: "x_throughput.svg", alt: "Throughput" },
  ]);
  for (
    const heading of [
      "## Summary",
      "## Targets (issue 14)",
      "## (a) one task, client and server on one CPU",
      "## (b) 64 tasks, own keys",
      "## (c) 64 tasks, one key",
      "## (d) 4 processes × 16 tasks",
      "## Charts",
      "## Anomalies seen during this run",
    ]
  ) assert.ok(md.includes(`${heading}\n`), heading);
  assert.ok(md.includes("![Throughput](x_throughput.svg)"));
  assert.ok(md.includes("lockd/deno in d: it broke"));
  assert.ok(md.includes("redis was slow"));
  assert.ok(md.includes("stolen by the host during a window: 0.40 %–25.0 %"), "steal range");
  assert.ok(md.includes("| lockd · Deno | 9,000 |"), "one-key row");
  assert.ok(md.includes("69.0 %"), "back to back of the skewed runs: 20 of 29");
  // A cell nobody ran has no section.
  assert.ok(!md.includes("## (a) one task\n"));
  const summary = summaryTable(rows, variants).join("\n");
  assert.ok(summary.includes("| lockd · Deno | 100 / – | 90,000 |"), summary);
});

Deno.test("the SVG helpers escape text and pick round axis bounds", () => {
  assert.equal(escapeXml(`a<b & "c">`), "a&lt;b &amp; &quot;c&quot;&gt;");
  assert.equal(niceMax(7.3), 10);
  assert.equal(niceMax(120), 200);
  assert.equal(niceMax(4000), 5000);
  assert.equal(niceMax(0), 1);
  assert.equal(niceMax(NaN), 1);
  assert.deepEqual(decades(15, 2000), [10, 100, 1000, 10_000]);
  assert.deepEqual(decades(100, 100), [100, 1000]);
  assert.equal(usLabel(10), "10 µs");
  assert.equal(usLabel(1000), "1 ms");
  assert.equal(usLabel(2e6), "2 s");
});

Deno.test("the charts are SVG documents with a bar per client and a column per task", () => {
  const rows = sampleRows();
  for (const svg of [throughputSvg(rows, "sub <1>"), latencySvg(rows, "sub <1>")]) {
    assert.match(svg, /^<svg xmlns="http:\/\/www.w3.org\/2000\/svg" [^>]*>/);
    assert.ok(svg.trimEnd().endsWith("</svg>"));
    assert.ok(!svg.includes("NaN"), "no NaN coordinates");
    assert.ok(svg.includes("sub &lt;1&gt;"));
    assert.ok(svg.includes("lockd · Deno"));
    assert.ok(svg.includes("failed"), "the failed cell is marked");
  }
  const fair = fairnessSvg(rows, "s");
  assert.ok(!fair.includes("NaN"));
  // One column per task (3 tasks × 3 clients), one background, no other rects.
  assert.equal(fair.match(/<rect /g)?.length, 1 + 9);
  assert.equal(fair.match(/stroke-dasharray/g)?.length, 3, "one even-share line per client");
});

Deno.test("bareNpmSpecifiers() turns npm: specifiers into package names for Node", () => {
  assert.equal(
    bareNpmSpecifiers(
      `import a from "npm:ioredis@5.9.3"; import b from 'npm:redlock@5.0.0-beta.2';`,
    ),
    `import a from "ioredis"; import b from 'redlock';`,
  );
  assert.equal(
    bareNpmSpecifiers(`"npm:@grpc/grpc-js@1.14.7/build/x.js"`),
    `"@grpc/grpc-js/build/x.js"`,
  );
  assert.equal(bareNpmSpecifiers(`"npm:etcd3"`), `"etcd3"`);
  assert.equal(bareNpmSpecifiers(`"node:net" "./x.ts"`), `"node:net" "./x.ts"`);
});

Deno.test("stealShare() is the stolen part of the machine's CPU time between two readings", () => {
  assert.equal(stealShare({ total: 1000, steal: 10 }, { total: 1200, steal: 60 }), 0.25);
  assert.equal(stealShare({ total: 1000, steal: 10 }, { total: 1000, steal: 10 }), 0);
  const now = machineTicks(); // this machine's /proc/stat
  assert.ok(now.total > 0 && now.steal >= 0 && now.steal <= now.total, JSON.stringify(now));
});
