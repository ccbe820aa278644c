/**
 * One measurement of the end-to-end benchmark: a fresh server, the worker processes of one
 * variant (a lock system's client in one runtime), warm-up, a recorded window bracketed by
 * `/proc` readings of every process's CPU time, and the workers' results merged.
 *
 * @module
 */

import { findRuntime } from "../tests/_runtimes.ts";
import { nodeBundle, sources } from "./_e2e_snapshot.ts";
import {
  type Fairness,
  fairness,
  Histogram,
  type LatencySummary,
  summarize,
} from "./_e2e_stats.ts";
import { startServer, type SystemName } from "./_e2e_servers.ts";
import type { WorkerConfig, WorkerResult } from "./_e2e_workload.ts";
import { cpuTicks, machineTicks, sleep, stealShare, tail } from "./_procs.ts";

const ADAPTERS: Record<SystemName, string> = {
  lockd: "_e2e_lockd",
  redlock: "_e2e_redlock",
  semaphore: "_e2e_semaphore",
  etcd3: "_e2e_etcd",
};

export type RuntimeName = "deno" | "node" | "bun";

/** A lock system's client in one runtime: one row of the report. */
export interface Variant {
  /** `system/runtime`, e.g. `redlock/node`. */
  id: string;
  system: SystemName;
  runtime: RuntimeName;
  /** lockd over `client/node_tcp.ts` instead of the runtime's default transport. */
  nodeNet?: boolean;
  /** lockd with one connection per address instead of its default two (`lockd-1conn`). */
  oneConnection?: boolean;
}

/** Every variant, in report order. Bun runs lockd only (the others live on npm). */
export const VARIANTS: readonly Variant[] = [
  { id: "lockd/deno", system: "lockd", runtime: "deno" },
  { id: "lockd/node", system: "lockd", runtime: "node" },
  { id: "lockd/bun", system: "lockd", runtime: "bun" },
  { id: "redlock/deno", system: "redlock", runtime: "deno" },
  { id: "redlock/node", system: "redlock", runtime: "node" },
  { id: "semaphore/deno", system: "semaphore", runtime: "deno" },
  { id: "semaphore/node", system: "semaphore", runtime: "node" },
  { id: "etcd3/deno", system: "etcd3", runtime: "deno" },
  { id: "etcd3/node", system: "etcd3", runtime: "node" },
  { id: "lockd-node-net/deno", system: "lockd", runtime: "deno", nodeNet: true },
  { id: "lockd-1conn/deno", system: "lockd", runtime: "deno", oneConnection: true },
];

/** Workloads: (a) one task, (b) 64 tasks on own keys, (c) 64 on one key, (d) 4 × 16. */
export type WorkloadName = "a" | "b" | "c" | "d";
/** `any`: where the scheduler puts them; `same`: client and server on one CPU; `split`: two. */
export type Placement = "any" | "same" | "split";

/** One workload in one placement: one table of the report. */
export interface Cell {
  /** `a`, `a/same`, `a/split`, `b`, ... */
  id: string;
  workload: WorkloadName;
  placement: Placement;
  procs: number;
  tasksPerProc: number;
  sharedKey: boolean;
}

/** The cells of `workloads` in `placements` (placements apply to a and b only). */
export function cells(workloads: WorkloadName[], placements: Placement[]): Cell[] {
  const out: Cell[] = [];
  for (const w of workloads) {
    const shape = {
      a: { procs: 1, tasksPerProc: 1, sharedKey: false },
      b: { procs: 1, tasksPerProc: 64, sharedKey: false },
      c: { procs: 1, tasksPerProc: 64, sharedKey: true },
      d: { procs: 4, tasksPerProc: 16, sharedKey: false },
    }[w];
    for (const placement of w === "a" || w === "b" ? placements : ["any" as const]) {
      out.push({
        id: placement === "any" ? w : `${w}/${placement}`,
        workload: w,
        placement,
        ...shape,
      });
    }
  }
  return out;
}

/** Settings every measurement shares. */
export interface RunSettings {
  warmup: number;
  duration: number;
  leaseMs: number;
  waitMs: number;
  pollMs: number;
  redlockRetryMs: number;
  /** The two CPUs of the pinned placements: the server's and the client's. */
  cpus: [number, number];
  ticksPerSecond: number;
}

/** One measurement's figures. */
export interface Measurement {
  variant: string;
  cell: string;
  run: number;
  seconds: number;
  /** Completed cycles (one key: grants) in the window, all processes. */
  cycles: number;
  /** Cycles (grants) per second. */
  rate: number;
  timeouts: number;
  errors: number;
  errorSamples: string[];
  /** Acquire start → release done (µs). */
  cycle: LatencySummary;
  /** Acquire start → grant (µs): the wait on one key. */
  acquire: LatencySummary;
  /** CPU time per cycle (µs), all client processes together, and the server's. */
  clientCpuPerCycle: number;
  serverCpuPerCycle: number;
  /** CPU use in cores (1 = one core busy) over the window. */
  clientCores: number;
  serverCores: number;
  /** 1-minute load average just before the window. */
  loadavg: number;
  /**
   * Share of the machine's CPU time the host stole during the window (0–1): a virtual
   * machine's neighbours slow every figure (`/proc/stat`).
   */
  steal?: number;
  /** One key: grants per task and how even they were. */
  fairness?: Fairness & { perTask: number[] };
}

/** How to start the worker of a runtime. */
interface Launcher {
  binary: string;
  version: string;
  args(config: WorkerConfig): string[];
  adapter(system: SystemName): string;
  /** The `node:net` transport module, for lockd-node-net. */
  nodeTcp: string;
}

const launchers = new Map<RuntimeName, Promise<Launcher | undefined>>();

/** The runtime's launcher, or `undefined` if its binary is missing (see tests/_runtimes.ts). */
export function launcher(name: RuntimeName): Promise<Launcher | undefined> {
  let l = launchers.get(name);
  if (l === undefined) launchers.set(name, l = makeLauncher(name));
  return l;
}

async function makeLauncher(name: RuntimeName): Promise<Launcher | undefined> {
  const runtime = await findRuntime(name);
  if (runtime === undefined) return undefined;
  const { root } = await sources();
  const worker = `${root}bench/e2e_worker.ts`;
  const ts = (system: SystemName) => `file://${root}bench/${ADAPTERS[system]}.ts`;
  const nodeTcp = `file://${root}client/node_tcp.ts`;
  if (name === "deno") {
    return {
      binary: runtime.binary,
      version: runtime.version,
      args: (config) => [
        "run",
        "-A",
        "--quiet",
        `--lock=${root}bench/deno.lock`,
        worker,
        JSON.stringify(config),
      ],
      adapter: ts,
      nodeTcp,
    };
  }
  if (name === "bun") {
    return {
      binary: runtime.binary,
      version: runtime.version,
      args: (config) => [worker, JSON.stringify(config)],
      adapter: ts,
      nodeTcp,
    };
  }
  const dir = await nodeBundle();
  return {
    binary: runtime.binary,
    version: runtime.version,
    args: (config) => [`${dir}/e2e_worker.js`, JSON.stringify(config)],
    adapter: (system) => `file://${dir}/${ADAPTERS[system]}.js`,
    nodeTcp,
  };
}

/** A worker process: JSON lines out, `start` / `stop` in. */
class Worker {
  readonly pid: number;
  readonly #child: Deno.ChildProcess;
  readonly #stdin: WritableStreamDefaultWriter<Uint8Array>;
  readonly #err: ReturnType<typeof tail>;
  readonly #exited: Promise<number>;
  #waiters: ((line: Record<string, unknown>) => void)[] = [];
  #buffered: Record<string, unknown>[] = [];
  #closed = false;

  constructor(binary: string, args: string[], cwd: string, cpus?: string) {
    const cmd = cpus === undefined ? binary : "taskset";
    const child = new Deno.Command(cmd, {
      args: cpus === undefined ? args : ["-c", cpus, binary, ...args],
      cwd,
      env: { NO_COLOR: "1" },
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    this.#child = child;
    this.pid = child.pid;
    this.#stdin = child.stdin.getWriter();
    const err = tail(child.stderr);
    this.#err = err;
    const reading = (async () => {
      let text = "";
      for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) {
        text += chunk;
        let nl;
        while ((nl = text.indexOf("\n")) >= 0) {
          const line = text.slice(0, nl).trim();
          text = text.slice(nl + 1);
          if (!line.startsWith("{")) continue;
          const parsed = JSON.parse(line);
          const waiter = this.#waiters.shift();
          if (waiter) waiter(parsed);
          else this.#buffered.push(parsed);
        }
      }
    })();
    this.#exited = (async () => {
      const status = await child.status;
      await Promise.all([reading.catch(() => {}), err.done.catch(() => {})]);
      this.#closed = true;
      for (const w of this.#waiters.splice(0)) w({ error: `exited with ${status.code}` });
      return status.code;
    })();
  }

  /** The next JSON line, or `{error}` if it exits first or `timeoutMs` passes. */
  next(timeoutMs: number): Promise<Record<string, unknown>> {
    const buffered = this.#buffered.shift();
    if (buffered) return Promise.resolve(buffered);
    if (this.#closed) return Promise.resolve({ error: "exited" });
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.#waiters = this.#waiters.filter((w) => w !== done);
        resolve({ error: `no output within ${timeoutMs} ms` });
      }, timeoutMs);
      const done = (line: Record<string, unknown>) => {
        clearTimeout(timer);
        resolve(line);
      };
      this.#waiters.push(done);
    });
  }

  /** Waits for `key` in the next line; throws with the worker's stderr otherwise. */
  async expect(key: string, timeoutMs: number): Promise<unknown> {
    const line = await this.next(timeoutMs);
    if (key in line) return line[key];
    throw new Error(
      `worker ${this.pid}: ${line.error ?? JSON.stringify(line)}\n${this.#err.text()}`,
    );
  }

  send(line: string): Promise<void> {
    return this.#stdin.write(new TextEncoder().encode(line + "\n"));
  }

  /** Waits for its exit (killing it after `timeoutMs`) and closes its stdin. */
  async end(timeoutMs: number): Promise<number> {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<void>((resolve) => timer = setTimeout(resolve, timeoutMs));
    await Promise.race([this.#exited, late]);
    clearTimeout(timer);
    if (!this.#closed) {
      try {
        this.#child.kill("SIGKILL");
      } catch {
        // Exited meanwhile.
      }
    }
    await this.#stdin.close().catch(() => {});
    return await this.#exited;
  }
}

function loadavg(): number {
  return Number(Deno.readTextFileSync("/proc/loadavg").split(" ")[0]);
}

/** One measurement of `variant` in `cell`: fresh server, workers, warm-up, window. */
export async function measure(
  variant: Variant,
  cell: Cell,
  run: number,
  settings: RunSettings,
): Promise<Measurement> {
  const l = await launcher(variant.runtime);
  if (l === undefined) throw new Error(`${variant.runtime} is not installed`);
  const pinned = cell.placement !== "any";
  const [serverCpu, clientCpu] = settings.cpus;
  const started = await startServer(variant.system, {
    cpus: pinned ? String(serverCpu) : undefined,
    root: (await sources()).root,
  });
  const workers: Worker[] = [];
  try {
    for (let p = 0; p < cell.procs; p++) {
      const config: WorkerConfig = {
        adapter: l.adapter(variant.system),
        address: `127.0.0.1:${started.server.port}`,
        leaseMs: settings.leaseMs,
        waitMs: cell.sharedKey ? settings.waitMs : 0,
        pollMs: settings.pollMs,
        redlockRetryMs: settings.redlockRetryMs,
        transport: variant.nodeNet ? l.nodeTcp : undefined,
        connectionsPerAddress: variant.oneConnection ? 1 : undefined,
        tasks: cell.tasksPerProc,
        keyPrefix: cell.sharedKey ? "bench:shared" : `bench:${p}`,
        sharedKey: cell.sharedKey,
      };
      const cpus = cell.placement === "same"
        ? String(serverCpu)
        : cell.placement === "split"
        ? String(clientCpu)
        : undefined;
      workers.push(new Worker(l.binary, l.args(config), (await sources()).root, cpus));
    }
    await Promise.all(workers.map((w) => w.expect("ready", 60_000)));
    await sleep(settings.warmup * 1000);
    const load = loadavg();
    const machine0 = machineTicks();
    const server0 = cpuTicks(started.server.pid);
    const clients0 = workers.map((w) => cpuTicks(w.pid));
    const t0 = performance.now();
    await Promise.all(workers.map((w) => w.send("start")));
    await sleep(settings.duration * 1000);
    await Promise.all(workers.map((w) => w.send("stop")));
    const wall = (performance.now() - t0) / 1000;
    const steal = stealShare(machine0, machineTicks());
    const server1 = cpuTicks(started.server.pid);
    const clients1 = workers.map((w) => cpuTicks(w.pid));
    const results = await Promise.all(
      workers.map((w) => w.expect("result", 30_000) as Promise<WorkerResult>),
    );
    const cycles = results.reduce((a, r) => a + r.cycles, 0);
    const errors = results.flatMap((r) => r.errorSamples);
    if (cycles === 0 && errors.length > 0) throw new Error(`no cycle, only errors: ${errors[0]}`);
    if (started.server.exitCode() !== undefined) {
      throw new Error(`${started.server.name} exited during the run\n${started.server.log()}`);
    }
    const us = (ticks: number) => ticks / settings.ticksPerSecond * 1e6;
    const clientUs = us(clients1.reduce((a, b) => a + b, 0) - clients0.reduce((a, b) => a + b, 0));
    const serverUs = us(server1 - server0);
    return combine(variant, cell, run, results, {
      clientUs,
      serverUs,
      wall,
      load,
      steal,
    });
  } finally {
    await Promise.all(workers.map((w) => w.end(10_000)));
    await started.stop();
  }
}

/** Merges the workers' results into one measurement. */
export function combine(
  variant: Variant,
  cell: Cell,
  run: number,
  results: WorkerResult[],
  cpu: { clientUs: number; serverUs: number; wall: number; load: number; steal?: number },
): Measurement {
  const cycleH = new Histogram(), acquireH = new Histogram();
  for (const r of results) {
    cycleH.merge(Histogram.fromJSON(r.cycle));
    acquireH.merge(Histogram.fromJSON(r.acquire));
  }
  const cycles = results.reduce((a, r) => a + r.cycles, 0);
  // Each process's rate over its own window; the windows are the orchestrator's, give or take.
  const rate = results.reduce((a, r) => a + (r.seconds > 0 ? r.cycles / r.seconds : 0), 0);
  const m: Measurement = {
    variant: variant.id,
    cell: cell.id,
    run,
    seconds: cpu.wall,
    cycles,
    rate,
    timeouts: results.reduce((a, r) => a + r.timeouts, 0),
    errors: results.reduce((a, r) => a + r.errors, 0),
    errorSamples: results.flatMap((r) => r.errorSamples).slice(0, 5),
    cycle: summarize(cycleH),
    acquire: summarize(acquireH),
    clientCpuPerCycle: cycles > 0 ? cpu.clientUs / cycles : NaN,
    serverCpuPerCycle: cycles > 0 ? cpu.serverUs / cycles : NaN,
    clientCores: cpu.clientUs / 1e6 / cpu.wall,
    serverCores: cpu.serverUs / 1e6 / cpu.wall,
    loadavg: cpu.load,
    steal: cpu.steal,
  };
  if (cell.sharedKey) {
    const perTask = results.flatMap((r) => r.perTask);
    const backToBack = results.reduce((a, r) => a + r.backToBack, 0);
    m.fairness = { ...fairness(perTask, backToBack), perTask };
    // On one key the figure is grants per second (a grant whose release falls after the
    // window still counts).
    const seconds = results.reduce((a, r) => a + r.seconds, 0) / results.length;
    m.rate = seconds > 0 ? m.fairness.grants / seconds : 0;
    m.clientCpuPerCycle = m.fairness.grants > 0 ? cpu.clientUs / m.fairness.grants : NaN;
    m.serverCpuPerCycle = m.fairness.grants > 0 ? cpu.serverUs / m.fairness.grants : NaN;
  }
  return m;
}
