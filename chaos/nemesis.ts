/**
 * The nemesis: injects one fault at a time into a {@linkcode ChaosCluster}, driven by a
 * seeded PRNG, with a recovery gap between faults long enough that fault windows never
 * overlap. Faults: `kill -9` of a node then a restart after 1–3 s; SIGSTOP for the failover
 * timeout plus 0.3–1.5 s then SIGCONT; a graceful restart (SIGTERM, exit, start); a
 * partition that holds one node's peer links both ways for 1.5–4 s. The target is the
 * active node 70 % of the time (found by probing), another node otherwise.
 *
 * @module
 */

import { within } from "../tests/_cluster.ts";
import type { ChaosCluster } from "./cluster.ts";
import { FAULT_TAIL_MS } from "./checker.ts";
import { type Fault, type FaultKind, now } from "./history.ts";

/** Options of {@linkcode Nemesis}. */
export interface NemesisOptions {
  /** The seeded PRNG (`[0, 1)`). */
  random: () => number;
  /** The nodes' failover timeout, in ms. */
  failoverTimeoutMs: number;
  /** Progress lines. */
  log: (line: string) => void;
}

const KINDS: FaultKind[] = ["kill", "pause", "restart", "partition"];
/** Share of faults aimed at the active node. */
const ACTIVE_BIAS = 0.7;
/** Most faults in one run (the duration ends it long before). */
const MAX_FAULTS = 10_000;
/** Attempts to restart a node. */
const RESTART_ATTEMPTS = 3;
/** Longest convergence wait after a fault. */
const CONVERGE_TIMEOUT_MS = 10_000;
/** Longest graceful stop of a node before it is killed. */
const STOP_TIMEOUT_MS = 10_000;

/** What the PRNG decided for one fault: the same draws, in the same order, every time. */
interface Plan {
  gapMs: number;
  kind: FaultKind;
  aimAtActive: boolean;
  pick: number;
  length: number;
}

/** Resolves after `ms`, or at once when `signal` fires. */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done);
  });
}

/** Injects faults and records them. */
export class Nemesis {
  /** Every fault so far. */
  readonly faults: Fault[] = [];
  /** Node exits nobody asked for, and graceful stops or restarts that went wrong. */
  readonly badExits: string[] = [];
  #cluster: ChaosCluster;
  #options: NemesisOptions;

  /** A nemesis for `cluster`; nothing happens before {@linkcode run}. */
  constructor(cluster: ChaosCluster, options: NemesisOptions) {
    this.#cluster = cluster;
    this.#options = options;
  }

  /**
   * Injects faults until `signal` fires, then ends the current fault at once (heal,
   * resume, restart) and makes sure every node runs, unpaused and connected. After each
   * fault it measures convergence from the fault's end ({@linkcode Fault.convergedMs}); the
   * next fault waits for the gap and for that measurement.
   */
  async run(signal: AbortSignal): Promise<void> {
    let converging = Promise.resolve();
    for (let n = 0; n < MAX_FAULTS && !signal.aborted; n++) {
      const plan = this.#plan();
      await Promise.all([pause(plan.gapMs, signal), converging]);
      if (signal.aborted) break;
      await this.#reviveUnexpected();
      const fault = await this.#inject(plan, signal);
      converging = this.#cluster.waitConverged(fault.end, CONVERGE_TIMEOUT_MS).then((c) => {
        fault.convergedMs = c.ms;
        fault.convergence = c.trace;
        const ms = c.ms === null ? "not" : `in ${Math.round(c.ms)} ms`;
        this.#options.log(`converged ${ms} after the ${fault.kind} of node ${fault.node}`);
      });
    }
    await converging;
    this.#cluster.heal();
    for (const m of this.#cluster.members) if (m.paused) m.resume();
    await this.#reviveUnexpected();
  }

  #plan(): Plan {
    const r = this.#options.random;
    const ft = this.#options.failoverTimeoutMs;
    return {
      gapMs: ft + FAULT_TAIL_MS + 500 + Math.round(1500 * r()),
      kind: KINDS[Math.floor(r() * KINDS.length)],
      aimAtActive: r() < ACTIVE_BIAS,
      pick: r(),
      length: r(),
    };
  }

  async #inject(plan: Plan, signal: AbortSignal): Promise<Fault> {
    const actives = await this.#cluster.actives();
    const all = this.#cluster.members.map((_, i) => i);
    const active = actives.length > 0 ? actives[0] : undefined;
    const others = all.filter((i) => i !== active);
    const node = plan.aimAtActive && active !== undefined
      ? active
      : others[Math.floor(plan.pick * others.length)];
    const member = this.#cluster.members[node];
    const fault: Fault = {
      kind: plan.kind,
      node,
      wasActive: actives.includes(node),
      start: now(),
      end: 0,
    };
    const role = fault.wasActive ? "active" : "standby";
    const notes: string[] = [];
    const ft = this.#options.failoverTimeoutMs;
    switch (plan.kind) {
      case "kill": {
        this.#options.log(`kill -9 node ${node} (${role})`);
        await member.kill("SIGKILL");
        await pause(1000 + Math.round(2000 * plan.length), signal);
        await this.#restart(node, notes);
        break;
      }
      case "pause": {
        const ms = ft + 300 + Math.round(1200 * plan.length);
        this.#options.log(`SIGSTOP node ${node} (${role}) for ${ms} ms`);
        member.pause();
        await pause(ms, signal);
        member.resume();
        break;
      }
      case "restart": {
        this.#options.log(`SIGTERM node ${node} (${role}), then restart`);
        try {
          const code = await within(member.kill("SIGTERM"), STOP_TIMEOUT_MS, "graceful stop");
          if (code !== 0) notes.push(`exited ${code} on SIGTERM`);
        } catch {
          notes.push(`did not exit within ${STOP_TIMEOUT_MS} ms of SIGTERM: killed`);
          await member.kill("SIGKILL");
        }
        await this.#restart(node, notes);
        break;
      }
      case "partition": {
        const ms = 1500 + Math.round(2500 * plan.length);
        this.#options.log(`partition node ${node} (${role}) from its peers for ${ms} ms`);
        this.#cluster.isolate(node);
        await pause(ms, signal);
        this.#cluster.heal();
        break;
      }
    }
    fault.end = now();
    if (notes.length > 0) {
      fault.note = notes.join("; ");
      this.badExits.push(`node ${node}, ${plan.kind} fault: ${fault.note}`);
    }
    this.faults.push(fault);
    this.#options.log(
      `${plan.kind} of node ${node} over after ${Math.round(fault.end - fault.start)} ms`,
    );
    return fault;
  }

  /** Starts node `index` again (three attempts); what went wrong goes to `notes`. */
  async #restart(index: number, notes: string[]): Promise<void> {
    const member = this.#cluster.members[index];
    for (let attempt = 1; attempt <= RESTART_ATTEMPTS; attempt++) {
      try {
        const ready = await member.start();
        this.#options.log(`node ${index} restarted: ${ready}`);
        return;
      } catch (error) {
        const first = (error instanceof Error ? error.message : String(error)).split("\n")[0];
        notes.push(`restart attempt ${attempt} failed: ${first}`);
      }
    }
  }

  /** Restarts nodes that exited although no fault was under way, and records it. */
  async #reviveUnexpected(): Promise<void> {
    for (const member of this.#cluster.members) {
      if (member.running) continue;
      const code = await member.exited.catch(() => undefined);
      const notes: string[] = [];
      await this.#restart(member.index, notes);
      this.badExits.push(
        `node ${member.index} was not running (exit ${code}) outside a fault` +
          (notes.length > 0 ? `; ${notes.join("; ")}` : ""),
      );
      this.#options.log(`node ${member.index} had exited by itself (exit ${code})`);
    }
  }
}
