/**
 * The cluster's work that runs outside a client request, guarded: the role machine's timers
 * and the lines of peer links. A data directory that fails under it (a standby that cannot
 * save an announced token mark, a node promoted on a full disk) must stop the node through
 * its fatal path, logged with `event=fatal` (docs/server.md, "Logs"), not crash the process
 * from a timer, nor pass for a reset peer link that is redialled and fails again for good.
 *
 * @module
 */

import type { LineHandler } from "../line_socket.ts";
import { DataDirError } from "../tokens.ts";
import type { Scheduler } from "./ports.ts";

/** `fn`, with anything it throws sent to `fatal` instead. */
export function guarded(fn: () => void, fatal: (error: unknown) => void): () => void {
  return () => {
    try {
      fn();
    } catch (error) {
      fatal(error);
    }
  };
}

/** `scheduler` whose callbacks send anything they throw to `fatal`. */
export function guardedScheduler(
  scheduler: Scheduler,
  fatal: (error: unknown) => void,
): Scheduler {
  return {
    every: (ms, fn) => scheduler.every(ms, guarded(fn, fatal)),
    after: (ms, fn) => scheduler.after(ms, guarded(fn, fatal)),
  };
}

/**
 * `handler` of a peer link whose lines send a {@linkcode DataDirError} to `fatal`. Any other
 * error still ends the link, as before (the peer redials and starts over).
 */
export function guardedPeer(handler: LineHandler, fatal: (error: unknown) => void): LineHandler {
  return {
    line(text) {
      try {
        handler.line(text);
      } catch (error) {
        if (!(error instanceof DataDirError)) throw error;
        fatal(error);
      }
    },
    closed: () => handler.closed(),
  };
}
