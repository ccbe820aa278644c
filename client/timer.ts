/**
 * A timer for any delay: `setTimeout` cannot wait longer than 2^31-1 ms (about 24.8 days)
 * and fires at once when asked to (Deno warns `TimeoutOverflowWarning`), so a long wait or
 * lease would end immediately. This one waits in steps and re-arms until the time is due.
 * Every timer of the client goes through it.
 *
 * @module
 */

/** How to let a numeric timer id not keep the process alive (installed by `tcp.ts`). */
let unrefTimer: ((id: number) => void) | undefined;

/**
 * Installs the runtime's way to let a numeric timer not keep the process alive. The TCP
 * transport, which only runs where sockets can keep a process alive, installs Deno's.
 */
export function setTimerUnref(fn: (id: number) => void): void {
  unrefTimer = fn;
}

/**
 * Lets the timer `id` not keep the process alive: the installed function for numeric ids
 * (Deno), the timer object's own `unref()` (Node.js, Bun); nothing in a browser, where it
 * does not matter.
 */
function unref(id: ReturnType<typeof setTimeout>): void {
  if (typeof id === "number") unrefTimer?.(id);
  else (id as { unref?(): void }).unref?.();
}

/** The longest delay `setTimeout` honours, in ms. */
export const MAX_TIMEOUT_MS = 2 ** 31 - 1;

/** Cancels a timer made by {@linkcode after}; calling it again does nothing. */
export type CancelTimer = () => void;

/**
 * Calls `fn` once `ms` milliseconds have passed on the monotonic clock (at once for 0 or
 * less; never for `Infinity`), unless cancelled first. A `weak` timer does not keep the
 * process alive by itself.
 *
 * @example
 * ```ts ignore
 * const cancel = after(30 * 86_400_000, () => console.log("30 days later"));
 * cancel();
 * ```
 */
export function after(ms: number, fn: () => void, weak = false): CancelTimer {
  const due = performance.now() + Math.max(0, ms);
  let id: ReturnType<typeof setTimeout> | undefined;
  const arm = () => {
    const left = due - performance.now();
    id = left > MAX_TIMEOUT_MS
      ? setTimeout(arm, MAX_TIMEOUT_MS)
      : setTimeout(fn, Math.max(0, left));
    if (weak) unref(id);
  };
  arm();
  return () => clearTimeout(id);
}
