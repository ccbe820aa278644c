/**
 * One chaos run, start to end: the resource server, the cluster behind its gates, the
 * worker processes, the nemesis for the duration, the convergence measurement, a clean stop
 * of workers and nodes, and the checker's verdict. Every process, gate, socket and data
 * directory it made is gone when {@linkcode runChaos} settles, whatever happened.
 *
 * @module
 */

import { mulberry32 } from "../tests/_prng.ts";
import { analyze, type Report } from "./checker.ts";
import { ChaosCluster } from "./cluster.ts";
import { type History, now, type Replication } from "./history.ts";
import { Nemesis } from "./nemesis.ts";
import { ResourceServer } from "./resource.ts";

/** What to run. Durations are seconds. */
export interface ChaosOptions {
  /** How long the nemesis injects faults. */
  duration: number;
  /** Seeds the nemesis and, derived from it, every worker. */
  seed: number;
  /** Cluster size. */
  nodes: number;
  /** `--replication` of every node. */
  replication: Replication;
  /** Client worker processes. */
  workers: number;
  /** Keys the workers contend for. */
  keys: number;
  /** The nodes' `--failover-timeout`. */
  failoverTimeout: number;
  /** The nodes' `--heartbeat`. */
  heartbeat: number;
}

/** Hooks of {@linkcode runChaos}. */
export interface RunHooks {
  /** Progress lines (already prefixed with the time into the run). */
  log: (line: string) => void;
  /** Ends the fault phase early (Ctrl+C); the run still stops cleanly and is judged. */
  signal?: AbortSignal;
}

/** Everything a run produced. */
export interface ChaosResult {
  /** What the checker judged. */
  history: History;
  /** Its verdict. */
  report: Report;
  /** How the nodes' answers changed while the harness waited for convergence. */
  convergenceTrace: string[];
  /** Every node's stderr, all runs. */
  nodeLogs: { node: number; address: string; stderr: string }[];
  /** Every worker's stderr and exit code. */
  workerLogs: { worker: number; code: number | null; stderr: string }[];
}

const WORKER_MAIN = new URL("./worker.ts", import.meta.url).pathname;
/** Longest wait for every worker to connect to the resource server. */
const CONNECT_TIMEOUT_MS = 30_000;
/** Longest convergence wait. */
const CONVERGE_TIMEOUT_MS = 10_000;
/** Longest stop of a worker after SIGTERM (an acquire's wait, a release's retries). */
const WORKER_STOP_MS = 20_000;

/** One worker process. */
class WorkerProcess {
  readonly id: number;
  readonly exited: Promise<number>;
  #child: Deno.ChildProcess;
  #stderr = "";

  constructor(id: number, args: string[]) {
    this.id = id;
    const child = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", WORKER_MAIN, ...args],
      stdin: "null",
      stdout: "null",
      stderr: "piped",
    }).spawn();
    this.#child = child;
    const err = (async () => {
      for await (const chunk of child.stderr.pipeThrough(new TextDecoderStream())) {
        this.#stderr += chunk;
      }
    })();
    this.exited = Promise.all([child.status, err]).then(([status]) => status.code);
  }

  get stderr(): string {
    return this.#stderr;
  }

  signal(signal: Deno.Signal): void {
    try {
      this.#child.kill(signal);
    } catch {
      // Exited already.
    }
  }
}

/** Resolves with `promise`'s value, or `undefined` after `ms`. */
async function orTimeout<T>(promise: Promise<T>, ms: number): Promise<T | undefined> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<undefined>((resolve) =>
    timer = setTimeout(() => resolve(undefined), ms)
  );
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Runs the harness once.
 *
 * @throws If the cluster or the workers cannot be started (nothing is judged then).
 */
export async function runChaos(options: ChaosOptions, hooks: RunHooks): Promise<ChaosResult> {
  const startedAt = now();
  const log = (line: string) => hooks.log(`+${((now() - startedAt) / 1000).toFixed(1)} s ${line}`);
  const resource = new ResourceServer();
  const workers: WorkerProcess[] = [];
  const badWorkers: string[] = [];
  let cluster: ChaosCluster | undefined;
  let nemesis: Nemesis | undefined;
  let convergenceMs: number | null = null;
  let convergenceTrace: string[] = [];
  const stopExits: string[] = [];
  const stop = new AbortController();
  let deadline: ReturnType<typeof setTimeout> | undefined;
  const onAbort = () => stop.abort();
  hooks.signal?.addEventListener("abort", onAbort);
  try {
    cluster = await ChaosCluster.start({
      size: options.nodes,
      failoverTimeout: options.failoverTimeout,
      heartbeat: options.heartbeat,
      replication: options.replication,
      log,
    });
    log(`cluster up (${cluster.replication} replication): ${cluster.addresses.join(", ")}`);
    for (let id = 1; id <= options.workers; id++) {
      workers.push(
        new WorkerProcess(id, [
          ...["--id", String(id), "--seed", String((options.seed + id * 0x9e3779b9) >>> 0)],
          ...["--checker", resource.address, "--nodes", cluster.addresses.join(",")],
          ...["--keys", String(options.keys), "--max-seconds", String(options.duration + 300)],
        ]),
      );
    }
    if (!await resource.waitFor(workers.length, { timeoutMs: CONNECT_TIMEOUT_MS })) {
      throw new Error(`only ${resource.connected} of ${workers.length} workers connected`);
    }
    log(`${workers.length} workers running; faults for ${options.duration} s`);

    nemesis = new Nemesis(cluster, {
      random: mulberry32(options.seed),
      failoverTimeoutMs: options.failoverTimeout * 1000,
      log,
    });
    if (hooks.signal?.aborted) stop.abort();
    deadline = setTimeout(() => stop.abort(), options.duration * 1000);
    await nemesis.run(stop.signal);
    // The nemesis measured convergence after its last fault, from that fault's end. Then
    // check that the cluster is (still) converged: a node revived at the very end counts.
    const last = nemesis.faults.at(-1);
    const final = await cluster.waitConverged(now(), CONVERGE_TIMEOUT_MS);
    const lastMs = last === undefined ? final.ms : last.convergedMs ?? null;
    convergenceMs = final.ms === null ? null : lastMs;
    convergenceTrace = last?.convergence ?? final.trace;
    log(
      `convergence after the last fault: ` +
        `${convergenceMs === null ? "never" : `${Math.round(convergenceMs)} ms`} ` +
        `(answers: ${convergenceTrace.join("; ")})`,
    );

    for (const w of workers) w.signal("SIGTERM");
    await Promise.all(workers.map(async (w) => {
      const code = await orTimeout(w.exited, WORKER_STOP_MS);
      if (code === undefined) {
        badWorkers.push(`worker ${w.id} did not stop within ${WORKER_STOP_MS} ms of SIGTERM`);
        w.signal("SIGKILL");
      } else if (code !== 0) {
        badWorkers.push(`worker ${w.id} exited ${code}: ${w.stderr.slice(-500)}`);
      }
    }));
    await resource.waitFor(workers.length, { closed: true, timeoutMs: 5000 });
    if (resource.garbage.length > 0) {
      badWorkers.push(`${resource.garbage.length} unreadable lines, e.g. ${resource.garbage[0]}`);
    }
    log("workers stopped; stopping the cluster");
    stopExits.push(...await cluster.stop());
  } finally {
    clearTimeout(deadline);
    hooks.signal?.removeEventListener("abort", onAbort);
    for (const w of workers) w.signal("SIGKILL");
    await Promise.all(workers.map((w) => w.exited));
    await cluster?.dispose();
    await resource.close();
  }

  if (cluster === undefined || nemesis === undefined) throw new Error("unreachable");
  const history: History = {
    startedAt,
    replication: cluster.replication,
    syncApplies: cluster.syncApplies,
    failoverTimeoutMs: options.failoverTimeout * 1000,
    faults: nemesis.faults,
    events: resource.events,
    writes: resource.writes,
    convergenceMs,
    badExits: [...nemesis.badExits, ...stopExits],
    badWorkers,
  };
  return {
    history,
    report: analyze(history),
    convergenceTrace,
    nodeLogs: cluster.logs(),
    workerLogs: await Promise.all(
      workers.map(async (w) => ({ worker: w.id, code: await w.exited, stderr: w.stderr })),
    ),
  };
}
