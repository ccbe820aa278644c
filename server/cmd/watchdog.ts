/**
 * The watchdog of `lockd run`'s command (docs/cli.md, "lockd run"): a small `sh` process,
 * in a session of its own, started right after the command with the command's process group
 * as an argument, that holds the read end of a pipe from lockd run. When lockd run ends
 * without dismissing it (killed with `kill -9`, or crashed), the pipe closes and the
 * watchdog stops the command's whole process group: SIGTERM (and SIGCONT), then SIGKILL
 * after the kill grace. Without it the command would run on after its lock is freed (the
 * session's grace), unaware. The command itself is still spawned directly; only the
 * watchdog is a shell.
 *
 * The group is an argument, not a line on the pipe: a write to the pipe is asynchronous,
 * so a lockd run killed before its event loop got to it (a loaded machine) left a watchdog
 * that saw the end of its input with no group to stop. An argument is there once the
 * spawn returns.
 *
 * @module
 */

/** Marks the watchdog's command line (`$0` of its shell): `pgrep -f lockd-run-watchdog`. */
export const WATCHDOG_NAME = "lockd-run-watchdog";

/** The longest grace the watchdog counts, in tenths of a second (about 3 years). */
const MAX_TENTHS = 1e9;

/**
 * `$1` is the grace in tenths of a second, `$2` the process group. Only the end of the
 * input, or the line `done`, moves it. Terminal and job-control signals are ignored. After
 * the SIGTERM it checks every tenth of a second whether the group is still there, and
 * leaves as soon as it is gone: it never signals a group id that may have been reused.
 * A `sleep` without fractions (strict POSIX) waits whole seconds instead.
 */
const SCRIPT = [
  "trap '' INT TERM HUP QUIT USR1 USR2 PIPE",
  'group="$2"',
  'case "$group" in "" | *[!0-9]*) exit 0 ;; esac',
  "IFS= read -r line",
  '[ "$line" = done ] && exit 0',
  'kill -TERM -"$group" 2>/dev/null || exit 0',
  'kill -CONT -"$group" 2>/dev/null',
  "waited=0",
  'while [ "$waited" -lt "$1" ]; do',
  '  kill -0 -"$group" 2>/dev/null || exit 0',
  "  if sleep 0.1 2>/dev/null; then waited=$((waited + 1)); else sleep 1; waited=$((waited + 10)); fi",
  "done",
  'kill -KILL -"$group" 2>/dev/null',
  "exit 0",
].join("\n");

const encoder = new TextEncoder();

/** Options of {@linkcode Watchdog.start}. */
export interface WatchdogOptions {
  /** Seconds between the SIGTERM and the SIGKILL (`--kill-grace`). */
  graceSeconds: number;
  /** Told when no watchdog could be started (one line, no trailing newline). */
  warn: (line: string) => void;
}

/**
 * A watchdog over one process group: {@linkcode Watchdog.start} it the moment the command
 * is spawned, {@linkcode Watchdog.dismiss} it before exiting.
 */
export class Watchdog {
  #input: WritableStreamDefaultWriter<Uint8Array>;
  #dismissed = false;

  private constructor(input: WritableStreamDefaultWriter<Uint8Array>) {
    this.#input = input;
  }

  /**
   * Starts a watchdog over process group `pgid` (the command's pid: it leads its own
   * group), which will get SIGKILL `graceSeconds` after the SIGTERM. Returns `undefined`
   * where there are no process groups (Windows) or no `sh` to run it; `warn` is told in the
   * second case.
   */
  static start(pgid: number, options: WatchdogOptions): Watchdog | undefined {
    if (Deno.build.os === "windows") return undefined;
    const { graceSeconds, warn } = options;
    const tenths = String(Math.min(MAX_TENTHS, Math.ceil(graceSeconds * 10)));
    let failure = "";
    // /bin/sh first: it is there even when PATH is not.
    for (const shell of ["/bin/sh", "sh"]) {
      try {
        const child = new Deno.Command(shell, {
          args: ["-c", SCRIPT, WATCHDOG_NAME, tenths, String(pgid)],
          stdin: "piped",
          stdout: "null",
          stderr: "null",
          detached: true, // a session of its own: no terminal signal reaches it
        }).spawn();
        child.unref();
        child.status.catch(() => {});
        return new Watchdog(child.stdin.getWriter());
      } catch (error) {
        failure = error instanceof Error ? error.message : String(error);
      }
    }
    warn(`no watchdog (${failure}): a kill -9 of lockd run would leave the command running`);
    return undefined;
  }

  /** lockd run ends normally: the watchdog exits and stops nothing. Never throws. */
  async dismiss(): Promise<void> {
    if (this.#dismissed) return;
    this.#dismissed = true;
    await this.#send("done\n");
    try {
      await this.#input.close();
    } catch {
      // It is gone already.
    }
  }

  async #send(text: string): Promise<void> {
    try {
      await this.#input.write(encoder.encode(text));
    } catch {
      // It is gone already.
    }
  }
}
