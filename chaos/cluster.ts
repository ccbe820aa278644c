/**
 * The chaos cluster: N real `server/main.ts` processes on 127.0.0.1, each with its own data
 * directory and a {@linkcode PeerGate} in front of it. Every node advertises its gate and
 * lists every gate in `--peers`, so peer links go through gates that can cut and heal them,
 * while clients use the nodes' own ports (as in the partial-partition test of
 * tests/cluster_faults_test.ts). The nodes are `Member`s of tests/_cluster.ts: killed,
 * paused, resumed and restarted on the same port and data directory, probed with `R probe 1`.
 *
 * @module
 */

import { Member, within } from "../tests/_cluster.ts";
import { freePorts, sleep } from "../tests/_net.ts";
import { PeerGate } from "../tests/_peer_gate.ts";
import type { Replication } from "./history.ts";

/** Options of {@linkcode ChaosCluster.start}. */
export interface ChaosClusterOptions {
  /** Number of nodes. */
  size: number;
  /** The nodes' `--failover-timeout`, in seconds. */
  failoverTimeout: number;
  /** The nodes' `--heartbeat`, in seconds. */
  heartbeat: number;
  /** The `--replication` mode asked for. */
  replication: Replication;
  /** Progress lines. */
  log: (line: string) => void;
}

/** Prefix of the nodes' data directories. */
const DATA_DIR_PREFIX = "lockd-chaos-";
/** Attempts with fresh ports when a start fails (a port taken meanwhile by another process). */
const START_ATTEMPTS = 3;
/** Longest graceful stop. */
const STOP_TIMEOUT_MS = 10_000;
/** Pause between two rounds of probes. */
const POLL_MS = 25;

/** The answer of a node that exited on an unknown `--replication` flag. */
const UNKNOWN_FLAG = /unknown option '--replication'/i;

/** A started cluster. */
export class ChaosCluster {
  /** The nodes, in priority order. */
  readonly members: Member[];
  /** The gate in front of each node. */
  readonly gates: PeerGate[];
  /** The replication mode the nodes run in. */
  readonly replication: Replication;
  /** Whether the nodes really run `--replication sync`. */
  readonly syncApplies: boolean;

  private constructor(members: Member[], gates: PeerGate[], replication: Replication) {
    this.members = members;
    this.gates = gates;
    this.replication = replication;
    this.syncApplies = replication === "sync";
  }

  /**
   * Starts the nodes and waits for their ready lines. When the nodes refuse `--replication`
   * (exit 2, unknown option), starts them without it: their default, asynchronous.
   *
   * @throws If the nodes cannot be started in three attempts.
   */
  static async start(options: ChaosClusterOptions): Promise<ChaosCluster> {
    let failure = "";
    for (let attempt = 1; attempt <= START_ATTEMPTS; attempt++) {
      const ports = freePorts(options.size);
      const gates = ports.map((port) => new PeerGate(port));
      const dirs: string[] = [];
      for (const _ of ports) dirs.push(await Deno.makeTempDir({ prefix: DATA_DIR_PREFIX }));
      const flags = ["--replication", options.replication];
      let started = await startNodes(ports, gates, dirs, flags, options);
      let mode = options.replication;
      if (started === "unknown-flag") {
        options.log(
          `the server refuses --replication (exit 2, unknown option): running its default, ` +
            `asynchronous replication; sync-only checks are not applicable`,
        );
        mode = "async";
        started = await startNodes(ports, gates, dirs, [], options);
      }
      if (Array.isArray(started)) return new ChaosCluster(started, gates, mode);
      failure = started === "unknown-flag" ? "unknown --replication flag" : started;
      await Promise.all(gates.map((g) => g.close()));
      await Promise.all(dirs.map((d) => Deno.remove(d, { recursive: true }).catch(() => {})));
      options.log(`cluster start ${attempt} of ${START_ATTEMPTS} failed: ${failure}`);
    }
    throw new Error(`the cluster did not start: ${failure}`);
  }

  /** Every node's own address, for clients. */
  get addresses(): string[] {
    return this.members.map((m) => m.address);
  }

  /** The indexes of the nodes that answer as active now. */
  async actives(): Promise<number[]> {
    const probes = await Promise.all(this.members.map((m) => m.probe()));
    return probes.flatMap((p, i) => (p.state === "active" ? [i] : []));
  }

  /**
   * Whether exactly one node serves and every other one redirects to it, and what each
   * node answered (`active`, `M <n>` for a redirect to node n, or the probe's state).
   */
  async converged(): Promise<{ converged: boolean; answers: string }> {
    const probes = await Promise.all(this.members.map((m) => m.probe()));
    const gateOf = (address: string) => this.gates.findIndex((g) => g.address === address);
    const answers = probes.map((p) => p.state === "standby" ? `M ${gateOf(p.active)}` : p.state)
      .join(" | ");
    const actives = probes.flatMap((p, i) => (p.state === "active" ? [i] : []));
    if (actives.length !== 1) return { converged: false, answers };
    const gate = this.gates[actives[0]].address;
    const converged = probes.every((p, i) =>
      i === actives[0] || (p.state === "standby" && p.active === gate)
    );
    return { converged, answers };
  }

  /**
   * Probes every 25 ms until {@linkcode converged}; resolves with the time since `since`
   * (ms since the epoch) then, or `null` after `timeoutMs`, and every change of the nodes'
   * answers on the way (ms since `since`, answers).
   */
  async waitConverged(
    since: number,
    timeoutMs: number,
  ): Promise<{ ms: number | null; trace: string[] }> {
    const until = performance.now() + timeoutMs;
    const trace: string[] = [];
    const elapsed = () => performance.timeOrigin + performance.now() - since;
    while (performance.now() < until) {
      const { converged, answers } = await this.converged();
      if (trace.length === 0 || !trace[trace.length - 1].endsWith(` ${answers}`)) {
        trace.push(`${Math.round(elapsed())} ms: ${answers}`);
      }
      if (converged) return { ms: elapsed(), trace };
      await sleep(POLL_MS);
    }
    return { ms: null, trace };
  }

  /** Holds every peer message between node `index` and the others, both ways. */
  isolate(index: number): void {
    const cut = this.gates[index];
    for (const [i, gate] of this.gates.entries()) {
      if (i === index) continue;
      cut.hold(gate.address);
      gate.hold(cut.address);
    }
  }

  /** Lets every peer message through again. */
  heal(): void {
    for (const gate of this.gates) gate.heal();
  }

  /** Stops every node with SIGTERM at once; returns what went wrong (no exit 0 in 10 s). */
  async stop(): Promise<string[]> {
    const problems: string[] = [];
    await Promise.all(this.members.map(async (m) => {
      if (!m.running) return;
      try {
        const code = await within(m.kill("SIGTERM"), STOP_TIMEOUT_MS, `${m.address} stops`);
        if (code !== 0) problems.push(`node ${m.index} exited ${code} on the final SIGTERM`);
      } catch {
        problems.push(`node ${m.index} did not stop within ${STOP_TIMEOUT_MS} ms of SIGTERM`);
        await m.dispose();
      }
    }));
    return problems;
  }

  /** Kills whatever still runs, closes the gates and removes the data directories. */
  async dispose(): Promise<void> {
    await Promise.all(this.members.map((m) => m.dispose()));
    await Promise.all(this.gates.map((g) => g.close()));
    await Promise.all(
      this.members.map((m) => Deno.remove(m.dataDir, { recursive: true }).catch(() => {})),
    );
  }

  /** Every node's stderr (all its runs). */
  logs(): { node: number; address: string; stderr: string }[] {
    return this.members.map((m) => ({ node: m.index, address: m.address, stderr: m.stderr() }));
  }
}

/**
 * Starts one node per port: the members once all are ready, `"unknown-flag"` when every
 * node refused `--replication`, or what went wrong.
 */
async function startNodes(
  ports: number[],
  gates: PeerGate[],
  dirs: string[],
  flags: string[],
  options: ChaosClusterOptions,
): Promise<Member[] | "unknown-flag" | string> {
  const peers = gates.map((g) => g.address).join(",");
  const env = { LOCKD_TRACE: "0", LOCKD_TRACE_HB: "0" };
  const members = ports.map((port, i) =>
    new Member(i, port, dirs[i], [
      "--advertise",
      gates[i].address,
      "--peers",
      peers,
      "--heartbeat",
      String(options.heartbeat),
      "--failover-timeout",
      String(options.failoverTimeout),
      ...flags,
    ], env)
  );
  const results = await Promise.allSettled(members.map((m) => m.start()));
  if (results.every((r) => r.status === "fulfilled")) return members;
  await Promise.all(members.map((m) => m.dispose()));
  const codes = await Promise.all(members.map((m) => m.exited.catch(() => -1)));
  if (
    flags.length > 0 && members.every((m, i) => codes[i] === 2 && UNKNOWN_FLAG.test(m.stderr()))
  ) {
    return "unknown-flag";
  }
  const failed = results.find((r) => r.status === "rejected") as PromiseRejectedResult;
  return String(failed.reason instanceof Error ? failed.reason.message : failed.reason);
}
