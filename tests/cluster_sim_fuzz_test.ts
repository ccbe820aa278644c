/**
 * Seeded random faults on the deterministic cluster simulator (`_sim_fuzz.ts`): overlapping
 * pauses, kill -9, graceful restarts, partitions and stalled links under a stream of
 * acquires and releases. Once every fault is over the cluster must settle on one active that
 * serves, with every standby in sync, and grant tokens above every earlier one; no token is
 * ever granted twice. Fake time: a run of 20 s of faults takes milliseconds.
 *
 * `LOCKD_SIM_FUZZ_SEED=N` replays one seed; `LOCKD_SIM_FUZZ_RUNS=N` runs N seeds from a
 * random start (printed) instead of the fixed ones.
 */

import assert from "node:assert/strict";
import { type FuzzResult, fuzzRun } from "./_sim_fuzz.ts";

/** Seeds run on every test run: fixed, so that CI is reproducible. */
const FIXED = Array.from({ length: 100 }, (_, i) => 1000 + i);

function seeds(): number[] {
  const one = Deno.env.get("LOCKD_SIM_FUZZ_SEED");
  if (one !== undefined) return [Number(one)];
  const runs = Deno.env.get("LOCKD_SIM_FUZZ_RUNS");
  if (runs === undefined) return FIXED;
  const start = Math.floor(Math.random() * 2 ** 31);
  console.log(`seeds ${start}..${start + Number(runs) - 1}`);
  return Array.from({ length: Number(runs) }, (_, i) => start + i);
}

function report(run: FuzzResult): string {
  return [
    `seed ${run.seed} (${run.size} nodes, ${run.grants} grants; replay: LOCKD_SIM_FUZZ_SEED=${run.seed}):`,
    ...run.problems.map((p) => `  ${p}`),
    "faults:",
    ...run.faults.map((f) => `  ${f}`),
    run.timeline,
  ].join("\n");
}

Deno.test("ClusterNode under seeded random faults settles on one active, in sync, tokens above all earlier; never a token twice", async () => {
  const failed: FuzzResult[] = [];
  let grants = 0;
  for (const seed of seeds()) {
    const run = await fuzzRun(seed);
    grants += run.grants;
    if (run.problems.length > 0) failed.push(run);
  }
  assert.deepEqual(failed.map((r) => r.seed), [], failed.slice(0, 3).map(report).join("\n\n"));
  assert.ok(grants > 0, "the workload was granted something");
});
