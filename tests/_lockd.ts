/**
 * Test helpers for the `lockd` subcommands (docs/cli.md): run `server/main.ts <command>` to
 * its exit, or keep one running (`lockd run`) with its stdin writable and its stdout and
 * stderr watched for lines; child scripts written to a temp directory; process liveness
 * from `/proc`.
 *
 * @module
 */

import { within } from "./_cluster.ts";

const MAIN = new URL("../server/main.ts", import.meta.url).pathname;

/** An environment that leaves out the caller's `LOCKD_*` variables, plus `extra`. */
export function cleanEnv(extra: Record<string, string> = {}): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(Deno.env.toObject())) {
    if (!name.startsWith("LOCKD_")) env[name] = value;
  }
  return { ...env, ...extra };
}

/** What a finished command printed and its exit status. */
export interface Finished {
  /** Exit status. */
  code: number;
  /** Standard output. */
  stdout: string;
  /** Standard error. */
  stderr: string;
}

/** A running `lockd` command (usually `lockd run`). */
export class LockdProcess {
  readonly child: Deno.ChildProcess;
  /** When it was started (ms, `performance.now()`). */
  readonly startedAt = performance.now();
  /** The exit status, once stdout and stderr were read to their end. */
  readonly exited: Promise<number>;
  /** When it exited (ms, `performance.now()`), once it did. */
  exitedAt: number | undefined;
  #out = "";
  #err = "";
  #listeners = new Set<() => void>();
  #stdin: WritableStreamDefaultWriter<Uint8Array>;

  constructor(args: string[], env: Record<string, string>) {
    const child = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", MAIN, ...args],
      env,
      clearEnv: true,
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    this.child = child;
    const stdin = child.stdin.getWriter();
    this.#stdin = stdin;
    const pump = async (stream: ReadableStream<Uint8Array>, add: (text: string) => void) => {
      for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
        add(chunk);
        for (const listener of [...this.#listeners]) listener();
      }
    };
    const outDone = pump(child.stdout, (t) => this.#out += t);
    const errDone = pump(child.stderr, (t) => this.#err += t);
    this.exited = (async () => {
      const status = await child.status;
      this.exitedAt = performance.now();
      await Promise.all([outDone, errDone]);
      for (const listener of [...this.#listeners]) listener();
      await stdin.close().catch(() => {});
      return status.code;
    })();
  }

  /** Standard output so far. */
  get stdout(): string {
    return this.#out;
  }

  /** Standard error so far. */
  get stderr(): string {
    return this.#err;
  }

  /** Writes `text` to its stdin (which `lockd run` hands to its command). */
  async write(text: string): Promise<void> {
    await this.#stdin.write(new TextEncoder().encode(text));
  }

  /** Resolves with the first match of `pattern` in stdout (or stderr with `from`). */
  waitFor(
    pattern: RegExp,
    timeoutMs = 10_000,
    from: "stdout" | "stderr" = "stdout",
  ): Promise<RegExpExecArray> {
    const search = () => pattern.exec(from === "stdout" ? this.#out : this.#err);
    return within(
      new Promise((resolve, reject) => {
        const check = () => {
          const match = search();
          if (match !== null) {
            this.#listeners.delete(check);
            resolve(match);
          } else if (this.exitedAt !== undefined) {
            this.#listeners.delete(check);
            reject(new Error(`exited before printing ${pattern}; stderr: ${this.#err}`));
          }
        };
        this.#listeners.add(check);
        check();
      }),
      timeoutMs,
      `${pattern} on ${from}; stdout: ${this.#out}; stderr: ${this.#err}`,
    );
  }

  /** Sends `signal` to the lockd process itself. */
  signal(signal: Deno.Signal): void {
    try {
      this.child.kill(signal);
    } catch {
      // Exited meanwhile.
    }
  }

  /** Waits for the exit (at most `timeoutMs`, else kills it and fails). */
  async finish(timeoutMs = 15_000): Promise<Finished> {
    try {
      const code = await within(this.exited, timeoutMs, `lockd exit; stderr: ${this.#err}`);
      return { code, stdout: this.#out, stderr: this.#err };
    } catch (error) {
      this.signal("SIGKILL");
      await this.exited;
      throw error;
    }
  }
}

/** Starts `server/main.ts args` with `env` (and no inherited `LOCKD_*`). */
export function spawnLockd(args: string[], env: Record<string, string> = {}): LockdProcess {
  return new LockdProcess(args, cleanEnv(env));
}

/** Runs `server/main.ts args` to its exit (killed after `timeoutMs`). */
export function runLockd(
  args: string[],
  env: Record<string, string> = {},
  timeoutMs = 15_000,
): Promise<Finished> {
  return spawnLockd(args, env).finish(timeoutMs);
}

/** Writes an executable `sh` script into `dir`; returns its path. */
export async function script(dir: string, name: string, body: string): Promise<string> {
  const path = `${dir}/${name}`;
  await Deno.writeTextFile(path, `#!/bin/sh\n${body}\n`);
  await Deno.chmod(path, 0o755);
  return path;
}

/** Whether process `pid` exists and is not a zombie (from `/proc/<pid>/stat`). */
export function processAlive(pid: number): boolean {
  let stat: string;
  try {
    stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
  } catch {
    return false;
  }
  const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
  return state !== "Z" && state !== "X";
}

/** Kills what is left of process group `pgid` (cleanup after a test; gone is fine). */
export function killGroup(pgid: number): void {
  try {
    Deno.kill(-pgid, "SIGKILL");
  } catch {
    // Already gone.
  }
}
