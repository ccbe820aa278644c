/**
 * The watchdog of `lockd run`'s command (docs/cli.md, "lockd run"): a small `sh` process,
 * in a session of its own, that holds the read end of a pipe from lockd run. When lockd run
 * ends without dismissing it (killed with `kill -9`, or crashed), the pipe closes and the
 * watchdog stops the command's whole process group: SIGTERM (and SIGCONT), then SIGKILL
 * after the kill grace. Without it the command would run on after its lock is freed (the
 * session's grace), unaware. The command itself is still spawned directly; only the
 * watchdog is a shell.
 *
 * @module
 */

/** Marks the watchdog's command line (`$0` of its shell), for `ps` and tests. */
export const WATCHDOG_NAME = "lockd-run-watchdog";

/**
 * `$1` is the process group, `$2` the grace in seconds. Terminal and job-control signals
 * are ignored: only the end of its input (or the word `done`) moves it.
 */
const SCRIPT = [
  "trap '' INT TERM HUP QUIT USR1 USR2 PIPE",
  "IFS= read -r line",
  '[ "$line" = done ] && exit 0',
  'kill -TERM -"$1" 2>/dev/null || exit 0',
  'kill -CONT -"$1" 2>/dev/null',
  'sleep "$2"',
  'kill -KILL -"$1" 2>/dev/null',
  "exit 0",
].join("\n");

const DONE = new TextEncoder().encode("done\n");

/** A watchdog over one process group; {@linkcode Watchdog.dismiss} it before exiting. */
export class Watchdog {
  #input: WritableStreamDefaultWriter<Uint8Array>;
  #dismissed = false;

  private constructor(input: WritableStreamDefaultWriter<Uint8Array>) {
    this.#input = input;
  }

  /**
   * Starts a watchdog over process group `pgid`, whose processes get SIGKILL `graceSeconds`
   * after the SIGTERM. Returns `undefined` where there are no process groups (Windows) or
   * no `sh` to run it; `warn` is told in the second case.
   */
  static start(
    pgid: number,
    graceSeconds: number,
    warn: (line: string) => void,
  ): Watchdog | undefined {
    if (Deno.build.os === "windows") return undefined;
    try {
      const child = new Deno.Command("sh", {
        args: ["-c", SCRIPT, WATCHDOG_NAME, String(pgid), String(graceSeconds)],
        stdin: "piped",
        stdout: "null",
        stderr: "null",
        detached: true, // no terminal signal reaches it
      }).spawn();
      child.unref();
      child.status.catch(() => {});
      return new Watchdog(child.stdin.getWriter());
    } catch (error) {
      const why = error instanceof Error ? error.message : String(error);
      warn(`no watchdog (${why}): a kill -9 of lockd run would leave the command running`);
      return undefined;
    }
  }

  /** lockd run ends normally: the watchdog exits and stops nothing. Never throws. */
  async dismiss(): Promise<void> {
    if (this.#dismissed) return;
    this.#dismissed = true;
    try {
      await this.#input.write(DONE);
      await this.#input.close();
    } catch {
      // It is gone already.
    }
  }
}
