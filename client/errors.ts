/**
 * Typed errors of `@lockd/client`. Every error the client rejects with is a
 * {@linkcode LockError}, so one `instanceof` separates lock trouble from bugs; the
 * subclasses tell timeout, unavailability, rejection, loss and abort apart.
 *
 * @module
 */

/**
 * Base class of every error of the lockd client.
 *
 * @example Telling lock errors apart
 * ```ts
 * import { LockClient, LockError, LockTimeoutError } from "@lockd/client";
 * const client = new LockClient("127.0.0.1:7321");
 * try {
 *   await client.acquire("orders:17", { wait: 5 });
 * } catch (error) {
 *   if (error instanceof LockTimeoutError) console.log("busy for 5 s");
 *   else if (error instanceof LockError) console.log("lock service trouble", error.message);
 *   else throw error;
 * } finally {
 *   await client.close();
 * }
 * ```
 */
export class LockError extends Error {
  /**
   * Creates the error.
   *
   * @param message Readable reason, sentence case, no trailing period.
   * @param options Standard error options (`cause`).
   */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "LockError";
  }
}

/**
 * The wait limit of an acquire ran out before the lock was granted (reply `T`). Nothing is
 * held and the request can never be granted later.
 *
 * @example Catching a timeout
 * ```ts
 * import { LockTimeoutError } from "@lockd/client";
 * const error = new LockTimeoutError("orders:17", 5);
 * console.log(error instanceof LockTimeoutError, error.key); // true "orders:17"
 * ```
 */
export class LockTimeoutError extends LockError {
  /** The key that stayed busy. */
  readonly key: string;
  /**
   * Creates the error.
   *
   * @param key The key.
   * @param waitSeconds The wait that ran out, in seconds.
   */
  constructor(key: string, waitSeconds: number) {
    super(`Lock "${key}" was not granted within ${waitSeconds} s`);
    this.name = "LockTimeoutError";
    this.key = key;
  }
}

/**
 * No usable connection: every registered connection was tried (as many attempts as there
 * are connections, docs/client.md) and none could carry the request, or the cluster had no
 * reachable active node within the client's `retryTimeoutMs`.
 *
 * @example Catching unavailability
 * ```ts
 * import { LockUnavailableError } from "@lockd/client";
 * const error = new LockUnavailableError("No lockd node reachable at 10.0.0.1:7321");
 * console.log(error instanceof LockUnavailableError); // true
 * ```
 */
export class LockUnavailableError extends LockError {
  /**
   * Creates the error.
   *
   * @param message What was tried.
   * @param options Standard error options (`cause`).
   */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "LockUnavailableError";
  }
}

/**
 * The server rejected the request (reply `E`), e.g. a lease above its `--max-lease`.
 * Nothing changed on the server.
 *
 * @example Reading the server's reason
 * ```ts
 * import { LockRejectedError } from "@lockd/client";
 * const error = new LockRejectedError("A", "k", "lease must be at most 86400 seconds");
 * console.log(error.serverMessage); // "lease must be at most 86400 seconds"
 * ```
 */
export class LockRejectedError extends LockError {
  /** The server's message (the text after `E`). */
  readonly serverMessage: string;
  /** The request's op (`A`, `R` or `X`). */
  readonly op: string;
  /** The key. */
  readonly key: string;
  /**
   * Creates the error.
   *
   * @param op The request's op.
   * @param key The key.
   * @param serverMessage The text after `E`.
   */
  constructor(op: string, key: string, serverMessage: string) {
    super(`lockd rejected ${op} "${key}": ${serverMessage}`);
    this.name = "LockRejectedError";
    this.serverMessage = serverMessage;
    this.op = op;
    this.key = key;
  }
}

/**
 * The lock is no longer held by this grant: an extend was answered `N` (the lease ran out
 * and the lock may belong to someone else now), or the lease could not be proven before it
 * ran out. Stop touching the protected resource.
 *
 * @example Reacting to a lost lock
 * ```ts
 * import { LockLostError } from "@lockd/client";
 * const error = new LockLostError("orders:17", 42n, "the lease ran out");
 * console.log(error.token); // 42n
 * ```
 */
export class LockLostError extends LockError {
  /** The key. */
  readonly key: string;
  /** The fencing token of the grant that was lost. */
  readonly token: bigint;
  /**
   * Creates the error.
   *
   * @param key The key.
   * @param token The lost grant's token.
   * @param why What happened.
   */
  constructor(key: string, token: bigint, why: string) {
    super(`Lock "${key}" (token ${token}) is lost: ${why}`);
    this.name = "LockLostError";
    this.key = key;
    this.token = token;
  }
}

/**
 * The caller's `AbortSignal` fired. Its reason is the `cause`. Its `name` is
 * `"AbortError"`, as with `fetch`, so code that checks names keeps working.
 *
 * @example Aborting an acquire
 * ```ts
 * import { LockAbortedError } from "@lockd/client";
 * const error = new LockAbortedError("orders:17", new Error("user left"));
 * console.log(error.name, error.cause); // "AbortError" Error: user left
 * ```
 */
export class LockAbortedError extends LockError {
  /** The key of the aborted acquire. */
  readonly key: string;
  /**
   * Creates the error.
   *
   * @param key The key.
   * @param reason The signal's reason.
   */
  constructor(key: string, reason: unknown) {
    super(`Acquire of "${key}" was aborted`, { cause: reason });
    this.name = "AbortError";
    this.key = key;
  }
}
