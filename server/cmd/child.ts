/**
 * The command of `lockd run` as a process group (docs/cli.md, "lockd run"): spawned
 * directly, never through a shell, as the leader of a group (and session) of its own, so a
 * signal reaches every process it started; stopped with SIGTERM, then SIGKILL after a grace.
 * Also the signal listeners that pass signals on.
 *
 * @module
 */

import { setTimeout as delay } from "node:timers/promises";
import { CommandError, spawnFailure } from "./exit.ts";

/** How often a stopping group is checked for processes left. */
const POLL_MS = 25;

/** Whether process groups exist here (not on Windows). */
const GROUPS = Deno.build.os !== "windows";

/** A running command and its process group. */
export class ChildGroup {
  /** The command's process id, also the id of its process group. */
  readonly pid: number;
  /** How it ended (its code is 128+N after a death by signal N). */
  readonly status: Promise<Deno.CommandStatus>;
  #child: Deno.ChildProcess;
  #exited = false;

  private constructor(child: Deno.ChildProcess) {
    this.#child = child;
    this.pid = child.pid;
    this.status = child.status.finally(() => {
      this.#exited = true;
    });
  }

  /**
   * Spawns `command` with `args` (no shell), standard streams inherited, `env` added to this
   * process's environment without the variables named in `withheld` (taken out of this
   * process's own environment first, so every other variable passes on byte for byte), in a
   * process group of its own.
   *
   * @throws {CommandError} 127 when it is not found, 126 when it cannot be executed.
   */
  static spawn(
    command: string,
    args: string[],
    env: Record<string, string>,
    withheld: readonly string[] = [],
  ): ChildGroup {
    for (const name of withheld) Deno.env.delete(name);
    try {
      return new ChildGroup(
        new Deno.Command(command, {
          args,
          env,
          stdin: "inherit",
          stdout: "inherit",
          stderr: "inherit",
          detached: GROUPS, // setsid(): its own session and process group
        }).spawn(),
      );
    } catch (error) {
      const kind = error instanceof Error ? error.constructor.name : "Error";
      const detail = error instanceof Error ? error.message : String(error);
      const failure = spawnFailure(command, kind, detail);
      throw new CommandError(failure.message, failure.code);
    }
  }

  /** Whether the command itself has exited (others of its group may live on). */
  get exited(): boolean {
    return this.#exited;
  }

  /**
   * Sends `signal` to every process of the group. Returns `false` when none is left.
   */
  signal(signal: Deno.Signal): boolean {
    try {
      if (GROUPS) Deno.kill(-this.pid, signal);
      else if (!this.#exited) this.#child.kill(signal);
      return true;
    } catch {
      return false; // ESRCH: the group is gone
    }
  }

  /** Whether some process of the group is still there (probed with SIGCONT, harmless). */
  #alive(): boolean {
    return GROUPS ? this.signal("SIGCONT") : !this.#exited;
  }

  /**
   * Stops the whole group: SIGTERM (and SIGCONT, so a stopped process gets it), then, if a
   * process of the group is still there after `graceMs`, SIGKILL. Resolves once the command
   * has exited and (within a second after SIGKILL) no process of its group is left.
   */
  async stop(graceMs: number): Promise<void> {
    this.signal("SIGTERM");
    this.signal("SIGCONT");
    const deadline = performance.now() + graceMs;
    while (performance.now() < deadline) {
      if (this.#exited && !this.#alive()) return;
      await this.#until(Math.min(POLL_MS, deadline - performance.now()));
    }
    this.signal("SIGKILL");
    await this.status;
    const until = performance.now() + 1000;
    while (this.#alive() && performance.now() < until) await delay(POLL_MS);
  }

  /** Waits `ms`, or less if the command exits meanwhile. */
  async #until(ms: number): Promise<void> {
    const timer = new AbortController();
    await Promise.race([
      this.status.then(() => {}),
      delay(Math.max(0, ms), undefined, { signal: timer.signal }).catch(() => {}),
    ]);
    timer.abort();
  }
}

/** The signals `lockd run` passes on to its command. */
export const FORWARDED_SIGNALS: readonly Deno.Signal[] = GROUPS
  ? ["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"]
  : ["SIGINT"];

/**
 * Listens for `signals` and calls `handler` with each; returns the function that stops
 * listening. While listening, these signals no longer end this process.
 */
export function onSignals(
  signals: readonly Deno.Signal[],
  handler: (signal: Deno.Signal) => void,
): () => void {
  const listeners = signals.map((name) => [name, () => handler(name)] as const);
  for (const [name, listener] of listeners) Deno.addSignalListener(name, listener);
  return () => {
    for (const [name, listener] of listeners) Deno.removeSignalListener(name, listener);
  };
}
