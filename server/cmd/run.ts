/**
 * `lockd run KEY -- CMD [ARGS...]` (docs/cli.md, "lockd run"): acquire a session-bound,
 * auto-extended lock, run the command under it with `LOCKD_KEY` and `LOCKD_TOKEN`, pass
 * signals on to its process group, stop the group if the lock is lost (exit 70), and
 * release the moment the command exits (exit with its status). A watchdog stops the group
 * should lockd run itself be killed.
 *
 * @module
 */

import type { Lock, LockClient } from "../../mod.ts";
import { SIGUSR1_WARNING } from "../sigusr1.ts";
import { ChildGroup, FORWARDED_SIGNALS, onSignals } from "./child.ts";
import { openClient } from "./connect.ts";
import { Watchdog } from "./watchdog.ts";
import {
  childExitCode,
  credentialHint,
  EXIT,
  exitCodeOf,
  messageOf,
  signalNumber,
} from "./exit.ts";
import type { RunArgs } from "./parse.ts";
import type { Connection } from "./args.ts";

/** Where `lockd run` writes its own lines: standard error only (stdout is the command's). */
export type Diagnostics = (line: string) => void;

/** The exit status after a signal ended the wait for the lock: 128+N, as if it killed us. */
function signalExit(signal: Deno.Signal): number {
  return 128 + (signalNumber(signal, Deno.build.os) ?? 0);
}

/** Acquires the lock, giving up when `signal` fires; `undefined` when it did. */
async function acquire(
  client: LockClient,
  run: RunArgs,
  signal: AbortSignal,
): Promise<Lock | undefined> {
  try {
    return await client.acquire(run.key, {
      lease: run.lease,
      wait: run.wait,
      session: true,
      autoExtend: true,
      signal,
    });
  } catch (error) {
    if (signal.aborted) return undefined;
    throw error;
  }
}

/** Resolves with the reason once `lock.signal` fires (the lock is lost or suspected lost). */
function lost(lock: Lock): Promise<string> {
  const why = () => messageOf(lock.signal.reason);
  if (lock.signal.aborted) return Promise.resolve(why());
  return new Promise((resolve) =>
    lock.signal.addEventListener("abort", () => resolve(why()), { once: true })
  );
}

/**
 * Runs `lockd run`; resolves with its exit status. Writes nothing on stdout.
 *
 * @param say Writes one line of diagnostics (prefixed by the caller).
 */
export async function runUnderLock(
  run: RunArgs & { connection: Connection },
  say: Diagnostics,
): Promise<number> {
  // Signals count from the start: one during the wait ends the wait.
  let forward: ((signal: Deno.Signal) => void) | undefined;
  const interrupted = new AbortController();
  let received: Deno.Signal | undefined;
  const stopListening = onSignals(FORWARDED_SIGNALS, (signal) => {
    if (signal === "SIGUSR1") say(`${SIGUSR1_WARNING}: send SIGUSR1 to the command's own pid`);
    if (forward !== undefined) return forward(signal);
    received ??= signal;
    interrupted.abort(signal);
  });
  let client: LockClient | undefined;
  try {
    client = await openClient(run.connection, "run");
    const lock = await acquire(client, run, interrupted.signal);
    if (lock === undefined || received !== undefined) {
      await lock?.release().catch(() => {});
      return signalExit(received ?? "SIGINT");
    }
    if (lock.signal.aborted) {
      say(`${messageOf(lock.signal.reason)}; the command was not started`);
      return EXIT.software;
    }
    let child: ChildGroup;
    try {
      child = ChildGroup.spawn(run.command[0], run.command.slice(1), {
        LOCKD_KEY: lock.key,
        LOCKD_TOKEN: String(lock.token),
      }, withheldVariables((name) => Deno.env.get(name)));
    } catch (error) {
      await lock.release().catch(() => {});
      throw error;
    }
    // Should lockd run itself die (kill -9), the watchdog stops the group. Started in the
    // same turn as the command, with its group as an argument: armed once this returns.
    const watchdog = Watchdog.start(child.pid, { graceSeconds: run.killGrace, warn: say });
    forward = (signal) => void child.signal(signal);
    try {
      const outcome = await Promise.race([
        child.status.then((status) => ({ status })),
        lost(lock).then((why) => ({ why })),
      ]);
      if ("status" in outcome) {
        await watchdog?.dismiss();
        // Released at once, so the next waiter need not wait for our exit.
        await lock.release().catch((error) => say(`could not release: ${messageOf(error)}`));
        return childExitCode(outcome.status, Deno.build.os);
      }
      const grace = run.killGrace;
      // outcome.why reads 'Lock "k" (token 7) is lost: <why>'.
      say(`${outcome.why}; stopping the command (SIGTERM, then SIGKILL after ${grace} s)`);
      await child.stop(grace * 1000);
      return EXIT.software;
    } finally {
      await watchdog?.dismiss();
    }
  } catch (error) {
    const code = exitCodeOf(error);
    say(messageOf(error) + credentialHint(code, run.connection.auth !== undefined));
    return code;
  } finally {
    stopListening();
    await client?.close();
  }
}

/**
 * The variables `lockd run` takes out of CMD's environment (docs/cli.md, "lockd run"): the
 * secrets themselves, which CMD must not print. A credential whose secret was in
 * `LOCKD_AUTH_SECRET` goes whole (`LOCKD_AUTH_NAME` too), so that a `lockd` subcommand CMD
 * runs is not left with half a credential; one read from a file (`LOCKD_AUTH_SECRET_FILE`)
 * stays, and such subcommands use it.
 */
export function withheldVariables(env: (name: string) => string | undefined): string[] {
  const withheld = ["LOCKD_AUTH_SECRET", "LOCKD_BEARER"];
  if (env("LOCKD_AUTH_SECRET") && !env("LOCKD_AUTH_SECRET_FILE")) withheld.push("LOCKD_AUTH_NAME");
  return withheld;
}
