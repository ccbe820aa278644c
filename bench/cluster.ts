/**
 * Scenario 5: a 2-node cluster: throughput with a standby, failover and handoff times.
 *
 * @module
 */

import { Bench, type Json, progress } from "./_bench.ts";
import { freePorts, type ServerProcess, sleep, startLockd, startRedis } from "./_procs.ts";
import { num, quantile } from "./_stats.ts";
import { type PairsFigure, type PairsMedian, pairsMedian, pairsRuns } from "./pairs.ts";

/** Async and sync clusters in turn (the pair runs' two slots), `conns` × `depth`. */
async function asyncVsSync(
  bench: Bench,
  conns: number,
  depth: number,
): Promise<ReplicationFigure["pipelined"]> {
  // The runs alternate between the two slots: "lockd" is the async cluster, "redis" the sync.
  const runs = await pairsRuns(
    bench,
    "scenario 5, async vs sync replication",
    conns,
    depth,
    ["lockd", "redis"],
    (slot) => startCluster(bench, slot === "lockd" ? "async" : "sync"),
    () => "lockd",
  );
  return {
    async: pairsMedian(runs.lockd),
    sync: pairsMedian(runs.redis),
    runs: { async: runs.lockd, sync: runs.redis },
  };
}

/** Async against sync replication, alternating in one run (both with one standby). */
export interface ReplicationFigure {
  /** 64 connections × 32 in flight. */
  pipelined: { async: PairsMedian; sync: PairsMedian; runs: { async: Json[]; sync: Json[] } };
  /** One connection, one request at a time: what an acknowledgement adds to latency. */
  single: { async: PairsMedian; sync: PairsMedian; runs: { async: Json[]; sync: Json[] } };
}

export interface ClusterFigure {
  pairs: PairsFigure;
  replication: ReplicationFigure;
  failover: { runs: Json[]; p50: number; p99: number; max: number; failed: number };
  handoff: {
    runs: Json[];
    gapP50: number;
    gapP99: number;
    gapMax: number;
    toGrantP50: number;
    errorsAfter: number;
    failed: number;
  };
}

/** Starts a 2-node lockd cluster; resolves with [active, standby]. */
export async function startCluster(
  bench: Bench,
  replication: "async" | "sync" = "async",
): Promise<ServerProcess[]> {
  const ports = freePorts(2);
  const peers = ports.map((p) => `127.0.0.1:${p}`);
  const nodes = await Promise.all(
    ports.map((port, i) =>
      startLockd({
        dataDir: bench.dir("node"),
        port,
        peers,
        name: i === 0 ? "lockd node 1" : "lockd node 2",
        args: ["--replication", replication],
      })
    ),
  );
  const active = nodes.find((n) => n.role === "active");
  const standby = nodes.find((n) => n.role === "standby");
  if (active === undefined || standby === undefined) {
    for (const n of nodes) await n.stop();
    throw new Error(`cluster did not settle: roles ${nodes.map((n) => n.role).join(", ")}`);
  }
  // The standby asks for a snapshot once it follows the active: give it a few heartbeats.
  await sleep(500);
  return [active, standby];
}

export async function startReplicated(bench: Bench): Promise<ServerProcess[]> {
  const master = await startRedis({ dir: bench.dir("redis"), name: "redis master" });
  try {
    const replica = await startRedis({
      dir: bench.dir("redis"),
      replicaOf: master.port,
      name: "redis replica",
    });
    return [master, replica];
  } catch (error) {
    await master.stop();
    throw error;
  }
}

export async function probeRuns(bench: Bench, signal: "SIGKILL" | "SIGTERM"): Promise<Json[]> {
  const runs: Json[] = [];
  for (let i = 0; i < bench.options.failovers; i++) {
    const how = signal === "SIGKILL" ? "failover (kill -9)" : "handoff (SIGTERM)";
    const what = `scenario 5, ${how}, run ${i + 1}`;
    const [active, standby] = await startCluster(bench);
    try {
      const result = await bench.run(what, [
        "probe",
        "--proto",
        "lockd",
        "--port",
        active.port,
        "--port-b",
        standby.port,
        "--pid",
        active.pid,
        "--signal",
        signal === "SIGKILL" ? 9 : 15,
        "--before",
        0.3,
        "--timeout",
        10,
        "--prefix",
        "probe:",
      ]);
      const code = await Promise.race([active.exited, sleep(10_000).then(() => undefined)]);
      if (signal === "SIGTERM" && code !== 0) {
        bench.note(`${what}: the old active exited with ${code ?? "nothing within 10 s"}`);
      }
      if (Number(result.signal_to_grant_ms) < 0) {
        bench.note(`${what}: no grant from the standby within 10 s`, standby.log());
      }
      runs.push({ ...result, old_active_exit: code ?? null });
      progress(
        `${what}: first grant on the new active ${
          num(Number(result.signal_to_grant_ms))
        } ms after the signal, gap ${num(Number(result.gap_ms))} ms`,
      );
    } finally {
      await active.stop();
      await bench.stop(standby, what);
    }
  }
  return runs;
}

export async function scenarioCluster(bench: Bench): Promise<ClusterFigure> {
  const runs = await pairsRuns(
    bench,
    "scenario 5, pairs with a standby",
    64,
    32,
    bench.kinds,
    (kind) => kind === "lockd" ? startCluster(bench) : startReplicated(bench),
  );
  const pairs: PairsFigure = {
    conns: 64,
    depth: 32,
    runs,
    median: { lockd: pairsMedian(runs.lockd), redis: pairsMedian(runs.redis) },
  };
  const replication: ReplicationFigure = {
    pipelined: await asyncVsSync(bench, 64, 32),
    single: await asyncVsSync(bench, 1, 1),
  };
  const ok = (rs: Json[], field: string) =>
    rs.map((r) => Number(r[field])).filter((v) => Number.isFinite(v) && v >= 0);
  const killed = await probeRuns(bench, "SIGKILL");
  const failoverTimes = ok(killed, "signal_to_grant_ms");
  const stopped = await probeRuns(bench, "SIGTERM");
  const gaps = ok(stopped, "gap_ms");
  return {
    pairs,
    replication,
    failover: {
      runs: killed,
      p50: quantile(failoverTimes, 0.5),
      p99: quantile(failoverTimes, 0.99),
      max: quantile(failoverTimes, 1),
      failed: killed.length - failoverTimes.length,
    },
    handoff: {
      runs: stopped,
      gapP50: quantile(gaps, 0.5),
      gapP99: quantile(gaps, 0.99),
      gapMax: quantile(gaps, 1),
      toGrantP50: quantile(ok(stopped, "signal_to_grant_ms"), 0.5),
      errorsAfter: stopped.reduce((n, r) => n + Number(r.errors_after_signal), 0),
      failed: stopped.length - gaps.length,
    },
  };
}
