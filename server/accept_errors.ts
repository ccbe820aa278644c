/**
 * What a failed `listener.accept()` means for the accept loop (docs/server.md, "Logs"). Pure.
 *
 * Most failures concern the one connection being accepted: its client reset it before the
 * server took it (Deno then reports `NotConnected`, os error 107, or `ConnectionAborted`), or a
 * network error pending on it. The loop skips such a connection at once: sleeping would stall
 * every client behind a churn of resets. Only running out of resources (file descriptors,
 * buffers, memory) is worth a pause, since the next accept would fail the same way.
 *
 * @module
 */

/**
 * How the accept loop treats a failed accept:
 *
 * - `connection`: only that connection failed; accept the next one now.
 * - `resources`: out of file descriptors, buffers or memory; log, back off, retry.
 * - `unknown`: anything else; handled as `resources` (a failure that repeats must not spin
 *   the loop).
 */
export type AcceptFailure = "connection" | "resources" | "unknown";

/**
 * Errors of one connection (accept(2), "Error handling": Linux passes a new socket's pending
 * network errors on to `accept`), by the code Deno sets on its errors.
 */
const CONNECTION_CODES: ReadonlySet<string> = new Set([
  "ECONNABORTED",
  "ECONNRESET",
  "ENOTCONN",
  "EPIPE",
  "ETIMEDOUT",
  "EPROTO",
  "ENOPROTOOPT",
  "EOPNOTSUPP",
  "EHOSTDOWN",
  "EHOSTUNREACH",
  "ENETDOWN",
  "ENETUNREACH",
  "ENONET",
  "EPERM", // Linux: a firewall rule refused this connection
  "EAGAIN",
  "EWOULDBLOCK",
  "EINTR",
]);

/** Resource exhaustion: the next accept would fail too. */
const RESOURCE_CODES: ReadonlySet<string> = new Set(["EMFILE", "ENFILE", "ENOBUFS", "ENOMEM"]);

/** Deno's error classes that only concern one connection (for an error without a code). */
const CONNECTION_CLASSES: readonly (new (...args: never[]) => Error)[] = [
  Deno.errors.NotConnected,
  Deno.errors.ConnectionAborted,
  Deno.errors.ConnectionReset,
  Deno.errors.BrokenPipe,
  Deno.errors.TimedOut,
  Deno.errors.NetworkUnreachable,
  Deno.errors.Interrupted,
  Deno.errors.WouldBlock,
];

/**
 * Classifies an error thrown by `listener.accept()`: by its `code` (`"ENOTCONN"`,
 * `"EMFILE"`...) when it has one, else by its Deno error class, else `unknown`.
 *
 * @example A client reset its connection before it was accepted
 * ```ts
 * import { classifyAcceptError } from "./accept_errors.ts";
 * const error = new Deno.errors.NotConnected("Transport endpoint is not connected (os error 107)");
 * console.assert(classifyAcceptError(error) === "connection");
 * ```
 */
export function classifyAcceptError(error: unknown): AcceptFailure {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === "string") {
    if (CONNECTION_CODES.has(code)) return "connection";
    if (RESOURCE_CODES.has(code)) return "resources";
  }
  if (CONNECTION_CLASSES.some((kind) => error instanceof kind)) return "connection";
  return "unknown";
}
