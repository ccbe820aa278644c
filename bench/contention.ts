/**
 * Scenario 2: 64 clients contending for one key: throughput, waits and fairness.
 *
 * @module
 */

import { Bench, type Json, type Kind, progress, type Server } from "./_bench.ts";
import { int, median, num } from "./_stats.ts";
import { alternate, startSingle } from "./pairs.ts";

export interface ContentionFigure {
  clients: number;
  redisRetryUs: number;
  runs: Record<Kind, Json[]>;
  median: Record<
    Kind,
    { grantsPerS: number; waitP50: number; waitP99: number; min: number; max: number; cov: number }
  >;
}

export async function scenarioContention(bench: Bench): Promise<ContentionFigure> {
  const clients = 64;
  const label = "scenario 2, contention";
  const start = (kind: Server) => startSingle(bench, kind);
  const runs = await alternate(
    bench,
    label,
    bench.kinds,
    start,
    async (kind, server, warmup, what) => {
      const result = await bench.run(what, [
        "contend",
        "--proto",
        kind,
        "--port",
        server.port,
        "--conns",
        clients,
        "--warmup",
        warmup,
        "--duration",
        bench.options.duration,
        "--retry-us",
        bench.options.redisRetryUs,
        "--prefix",
        "bench:",
      ]);
      progress(
        `${what}: ${int(Number(result.handoffs_per_s))} grants/s, wait p99 ${
          num(Number(result.wait_p99_us) / 1000)
        } ms, grants per client ${result.grants_min}–${result.grants_max}`,
      );
      return result;
    },
  );
  const summary = (rs: Json[]) => {
    const pick = (field: string) => median(rs.map((r) => Number(r[field])));
    return {
      grantsPerS: pick("handoffs_per_s"),
      waitP50: pick("wait_p50_us") / 1000,
      waitP99: pick("wait_p99_us") / 1000,
      min: pick("grants_min"),
      max: pick("grants_max"),
      cov: pick("grants_cov"),
    };
  };
  return {
    clients,
    redisRetryUs: bench.options.redisRetryUs,
    runs,
    median: { lockd: summary(runs.lockd), redis: summary(runs.redis) },
  };
}
