/**
 * The end-to-end benchmark's workload, runtime-neutral and independent of the lock system:
 * `tasks` concurrent loops, each acquiring a key (its own, or one shared key) and releasing
 * it at once, counted only between `start()` and `stop()`. Every lock system is reached
 * through the small {@linkcode LockSystem} interface that `bench/_e2e_<system>.ts` adapts
 * its client library to; `bench/e2e_worker.ts` runs this in a process of its own.
 *
 * @module
 */

import { type Fairness, fairness, GrantLog, Histogram, type HistogramJson } from "./_e2e_stats.ts";

/** A lock held through a system under test. */
export interface Held {
  /** Releases it. */
  release(): Promise<void>;
}

/** A lock system, through its client library as an application uses it. */
export interface LockSystem {
  /**
   * Takes `key` for the configured lease, waiting up to `waitMs` if another holder has it.
   * Resolves with `null` if the wait ran out.
   */
  acquire(key: string, waitMs: number): Promise<Held | null>;
  /** Closes the client (its connections, timers). */
  close(): Promise<void>;
}

/** What an adapter needs to open its client. */
export interface SystemConfig {
  /** `host:port` of the server. */
  address: string;
  /** Lease (TTL) of every lock, in ms. */
  leaseMs: number;
  /**
   * Longest wait of an acquire in ms (0: the key is never contended, so an adapter that
   * retries should not).
   */
  waitMs: number;
  /** Pause between attempts of a client that polls (redis-semaphore, etcd3), in ms. */
  pollMs: number;
  /** Redlock's `retryDelay` (and `retryJitter`), in ms. */
  redlockRetryMs: number;
  /** A transport module for lockd instead of the runtime's default (`client/node_tcp.ts`). */
  transport?: string;
  /** lockd's `connectionsPerAddress`, when not its default. */
  connectionsPerAddress?: number;
}

/** An adapter module (`bench/_e2e_<system>.ts`) exports `open`. */
export type OpenSystem = (config: SystemConfig) => Promise<LockSystem>;

/** What one worker process runs. */
export interface WorkerConfig extends SystemConfig {
  /** URL of the adapter module. */
  adapter: string;
  /** Concurrent loops. */
  tasks: number;
  /** Key prefix (distinct per process); with `sharedKey` the one key is this prefix. */
  keyPrefix: string;
  /** All tasks on one key (the fairness run) instead of one key each. */
  sharedKey: boolean;
}

/** What a worker reports after `stop`. */
export interface WorkerResult {
  /** Seconds between start and stop. */
  seconds: number;
  /** Completed acquire → release cycles in the window. */
  cycles: number;
  /** Acquires that ran out of wait (`null`) in the window. */
  timeouts: number;
  /** Acquires or releases that threw, in the window. */
  errors: number;
  /** The first few error messages. */
  errorSamples: string[];
  /** Acquire start → release done, per cycle (µs). */
  cycle: HistogramJson;
  /** Acquire start → grant (µs): the wait, on a shared key. */
  acquire: HistogramJson;
  /** Grants per task, in task order. */
  perTask: number[];
  /** Grants that went to the task that had the previous grant. */
  backToBack: number;
}

const MAX_ERROR_SAMPLES = 5;
/** A loop whose acquire or release threw pauses this long (ms), so a broken server is no spin. */
const ERROR_PAUSE_MS = 5;

/** `tasks` acquire → release loops through `system`, recorded between start and stop. */
export class Workload {
  readonly #system: LockSystem;
  readonly #config: Pick<WorkerConfig, "tasks" | "keyPrefix" | "sharedKey" | "waitMs">;
  readonly #now: () => number;
  #counting = false;
  #stopping = false;
  #loops: Promise<void>[] = [];
  #started = 0;
  #stopped = 0;
  #cycles = 0;
  #timeouts = 0;
  #errors = 0;
  #errorSamples: string[] = [];
  #cycle = new Histogram();
  #acquire = new Histogram();
  #grants: GrantLog;

  constructor(
    system: LockSystem,
    config: Pick<WorkerConfig, "tasks" | "keyPrefix" | "sharedKey" | "waitMs">,
    now: () => number = () => performance.now(),
  ) {
    this.#system = system;
    this.#config = config;
    this.#now = now;
    this.#grants = new GrantLog(config.tasks);
  }

  /** Starts the loops (unrecorded: the warm-up). */
  run(): void {
    for (let i = 0; i < this.#config.tasks; i++) this.#loops.push(this.#loop(i));
  }

  /** Starts recording. */
  start(): void {
    this.#started = this.#now();
    this.#counting = true;
  }

  /** Stops recording and returns what was recorded; the loops finish in the background. */
  stop(): WorkerResult {
    this.#stopped = this.#now();
    this.#counting = false;
    this.#stopping = true;
    return {
      seconds: (this.#stopped - this.#started) / 1000,
      cycles: this.#cycles,
      timeouts: this.#timeouts,
      errors: this.#errors,
      errorSamples: this.#errorSamples,
      cycle: this.#cycle.toJSON(),
      acquire: this.#acquire.toJSON(),
      perTask: [...this.#grants.perTask],
      backToBack: this.#grants.backToBack,
    };
  }

  /** Resolves once every loop has ended (after `stop`). */
  async drained(): Promise<void> {
    await Promise.all(this.#loops);
  }

  /** The fairness figures so far. */
  fairness(): Fairness {
    return fairness(this.#grants.perTask, this.#grants.backToBack);
  }

  #error(error: unknown): void {
    if (!this.#counting) return;
    this.#errors++;
    if (this.#errorSamples.length < MAX_ERROR_SAMPLES) {
      this.#errorSamples.push(
        error instanceof Error ? `${error.name}: ${error.message}` : String(error),
      );
    }
  }

  async #loop(task: number): Promise<void> {
    const { keyPrefix, sharedKey, waitMs } = this.#config;
    const key = sharedKey ? keyPrefix : `${keyPrefix}:${task}`;
    while (!this.#stopping) {
      const t0 = this.#now();
      let held: Held | null;
      try {
        held = await this.#system.acquire(key, waitMs);
      } catch (error) {
        this.#error(error);
        await pause(ERROR_PAUSE_MS);
        continue;
      }
      const t1 = this.#now();
      if (held === null) {
        if (this.#counting) this.#timeouts++;
        continue;
      }
      // Grants and cycles are counted when they complete in the window, whenever they began.
      if (this.#counting) {
        this.#acquire.record((t1 - t0) * 1000);
        this.#grants.grant(task);
      }
      try {
        await held.release();
      } catch (error) {
        this.#error(error);
        await pause(ERROR_PAUSE_MS);
        continue;
      }
      if (this.#counting) {
        this.#cycle.record((this.#now() - t0) * 1000);
        this.#cycles++;
      }
    }
  }
}

function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
