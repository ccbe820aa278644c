/**
 * Scenario 4: a million leases expiring: lateness, idle CPU, fill rate.
 *
 * @module
 */

import { Bench, type Json, type Kind, progress } from "./_bench.ts";
import { cpuPercent, sleep } from "./_procs.ts";
import { median, num } from "./_stats.ts";

export interface LeaseFigure {
  locks: number;
  leaseS: number;
  samples: number;
  runs: Record<Kind, Json[]>;
  /**
   * Medians over runs of each run's quantiles, in ms: [from the holder's reply (low), from
   * its request (high)].
   */
  lateP50: [number, number];
  lateP99: [number, number];
  lateMax: [number, number];
  /** The sampled holders' acquire round trips (ms): how far apart the two bounds can be. */
  holderRttP50: number;
  holderRttP99: number;
  idleCpu: Record<Kind, number>;
  fillPerS: Record<Kind, number>;
}

/** Sampled leases of the expiry scenario (at most a tenth of the locks). */
export const LEASE_SAMPLES = 1000;
/** Pause between the last grant of the fill and the first sampled lease (server idle). */
export const LEASE_SETTLE_MS = 200;

export async function scenarioLeases(bench: Bench): Promise<LeaseFigure> {
  const { locks, lease } = bench.options;
  const samples = Math.max(1, Math.min(LEASE_SAMPLES, Math.floor(locks / 10)));
  const cpuWindowMs = 3000;
  const runs: Record<Kind, Json[]> = { lockd: [], redis: [] };
  for (let i = 0; i < bench.options.heavyRuns; i++) {
    for (const kind of bench.kinds) {
      const what = `scenario 4, leases, ${kind}, run ${i + 1}`;
      const result = await bench.withServer(kind, what, async (s): Promise<Json> => {
        let cpu = NaN, fillS = NaN;
        const args: (string | number)[] = [
          "fill",
          "--proto",
          kind,
          "--port",
          s.port,
          "--conns",
          4,
          "--depth",
          100,
          "--count",
          locks,
          "--lease-ms",
          lease * 1000,
          "--prefix",
          "lease:",
        ];
        if (kind === "lockd") args.push("--samples", samples, "--settle-ms", LEASE_SETTLE_MS);
        const r = await bench.run(what, args, async (line) => {
          if (!line.startsWith("loaded") && !line.startsWith("filled")) return;
          fillS = Number(line.split(" ")[1]);
          if (fillS + 1 + cpuWindowMs / 1000 > lease - 1) {
            bench.note(
              `${what}: filling took ${fillS.toFixed(1)} s, too close to the ${lease} s lease ` +
                "for an idle CPU measurement (raise --lease)",
            );
            return;
          }
          await sleep(1000);
          cpu = await cpuPercent(s.pid, cpuWindowMs, bench.ticks);
        });
        return { ...r, idle_cpu_percent: cpu, fill_s_reported: fillS };
      });
      runs[kind].push(result);
      const late = kind === "lockd"
        ? `, lateness p99 ${num(Number(result.late_p99_ms))}–${
          num(Number(result.late_from_send_p99_ms))
        } ms (holder round trip p99 ${num(Number(result.holder_rtt_p99_ms))} ms)`
        : "";
      progress(`${what}: idle CPU ${num(Number(result.idle_cpu_percent))} %${late}`);
    }
  }
  const pick = (kind: Kind, field: string) => median(runs[kind].map((r) => Number(r[field])));
  return {
    locks,
    leaseS: lease,
    samples,
    runs,
    lateP50: [pick("lockd", "late_p50_ms"), pick("lockd", "late_from_send_p50_ms")],
    lateP99: [pick("lockd", "late_p99_ms"), pick("lockd", "late_from_send_p99_ms")],
    lateMax: [pick("lockd", "late_max_ms"), pick("lockd", "late_from_send_max_ms")],
    holderRttP50: pick("lockd", "holder_rtt_p50_ms"),
    holderRttP99: pick("lockd", "holder_rtt_p99_ms"),
    idleCpu: { lockd: pick("lockd", "idle_cpu_percent"), redis: pick("redis", "idle_cpu_percent") },
    fillPerS: { lockd: pick("lockd", "fill_per_s"), redis: pick("redis", "fill_per_s") },
  };
}
