/**
 * The client's three requests (docs/client.md): an acquire whose wait also runs on the
 * client side (a held-back `T`, a frozen node), that an abort ends at once and whose late
 * grant is released; an extend; and a release retried for `releaseRetryMs` every
 * `releaseRetryIntervalMs`.
 *
 * @module
 */

import { acquireLine, extendLine, releaseLine, type Reply } from "./codec.ts";
import {
  LockAbortedError,
  LockError,
  LockRejectedError,
  LockTimeoutError,
  LockUnavailableError,
} from "./errors.ts";
import type { ManagedConnection } from "./managed_connection.ts";
import type { ResolvedOptions } from "./options.ts";
import { type Attempt, type Router, sleep } from "./router.ts";
import { after, type CancelTimer } from "./timer.ts";

/** What the requests need from their client. */
export interface RequestContext {
  /** Where requests go. */
  router: Router;
  /** The client's options. */
  options: ResolvedOptions;
  /** Aborts when the client closes. */
  closed: AbortSignal;
  /** Keeps a background promise from being unhandled; `close()` waits for it. */
  track(promise: Promise<unknown>): void;
}

/** What a grant becomes: made by the client (it keeps its locks). */
export type Granted<L> = (token: bigint, grantedAt: number) => L;

/** Time allowed for a reply's trip past the wait it answers, besides twice the latency (ms). */
const REPLY_MARGIN_MS = 200;
/** Time a silent connection gets to answer a probe before it counts as frozen (ms). */
const PROBE_GRACE_MS = 500;

/** The error of a reply that is not one of the expected ones. */
export function unexpected(reply: Reply): LockError {
  if (reply.status === "E") return new LockRejectedError(reply.op, reply.key, reply.text ?? "");
  return new LockError(`Unexpected reply to ${reply.op} "${reply.key}": ${reply.status}`);
}

/**
 * Acquires `key` for `leaseMs`, queueing at most `waitMs` (0: no limit).
 *
 * @throws {LockTimeoutError} The wait ran out.
 * @throws {LockAbortedError} `signal` fired first; a later grant is released at once.
 * @throws {LockUnavailableError} No connection could carry it.
 * @throws {LockRejectedError} The server refused it.
 */
export async function acquire<L>(
  ctx: RequestContext,
  key: string,
  { leaseMs, waitMs, session, signal }: {
    leaseMs: number;
    waitMs: number;
    session?: boolean;
    signal?: AbortSignal;
  },
  granted: Granted<L>,
): Promise<L> {
  if (signal?.aborted) throw new LockAbortedError(key, signal.reason);
  const { router } = ctx;
  const started = performance.now();
  // The wait bounds the whole acquire: with no node to queue at (a cluster without an active
  // node, every node down) it ends by the same time as a wait that ran out in a queue.
  const attempt: Attempt = {
    abandoned: false,
    until: waitMs === 0 ? undefined : started + waitMs + REPLY_MARGIN_MS + 2 * router.replyLatency,
  };
  let sentAt = started;
  const { promise, resolve, reject } = Promise.withResolvers<L>();
  let cancelDeadline: CancelTimer | undefined;
  let sends = 0;
  const cleanup = () => {
    cancelDeadline?.();
    signal?.removeEventListener("abort", onAbort);
  };
  const giveUp = (error: Error) => {
    if (attempt.abandoned) return;
    attempt.abandoned = true;
    cleanup();
    reject(error);
  };
  const onAbort = () => giveUp(new LockAbortedError(key, signal!.reason));
  // The server answers T once the wait is over, but its reply can be held back behind an
  // earlier acquire of the same key on the same connection (docs/protocol.md, "Ordering
  // and pipelining"), and a node can freeze. So the caller's wait also runs here: when it
  // is over (plus a margin for the reply's trip), a connection that answered anything
  // since the request went out is alive and the answer is T; one that stayed silent is
  // probed, and dropped if the probe goes unanswered, which moves the request to the next
  // connection.
  const deadline = async (connection: ManagedConnection, received: number, send: number) => {
    if (connection.up && connection.received === received) {
      const graceMs = Math.min(
        ctx.options.staleConnectionMs,
        PROBE_GRACE_MS + 4 * router.replyLatency,
      );
      // Moved on: the next send has its own deadline.
      if (!(await connection.probe(graceMs))) return;
      if (attempt.abandoned || send !== sends) return;
    }
    giveUp(new LockTimeoutError(key, waitMs / 1000));
  };
  const line = (connection: ManagedConnection) => {
    sentAt = performance.now();
    // After a move to another connection the queue position is lost: ask for what is left.
    const left = waitMs === 0 ? 0 : Math.max(1, Math.ceil(waitMs - (sentAt - started)));
    if (left > 0) {
      cancelDeadline?.();
      const send = ++sends;
      const received = connection.received;
      cancelDeadline = after(
        left + REPLY_MARGIN_MS + 2 * router.replyLatency,
        () => ctx.track(deadline(connection, received, send)),
      );
    }
    return acquireLine(key, leaseMs, left, session);
  };
  signal?.addEventListener("abort", onAbort, { once: true });
  const exchange = router.exchange("A", key, line, attempt);
  const settle = (reply: Reply): L => {
    if (reply.status === "A") {
      // Granted between sending and now, at least one latency before now (unknown
      // latency: assume the earliest).
      const latency = router.latency;
      return granted(
        reply.token!,
        latency > 0 ? Math.max(sentAt, performance.now() - latency) : sentAt,
      );
    }
    if (reply.status === "T") throw new LockTimeoutError(key, waitMs / 1000);
    throw unexpected(reply);
  };
  ctx.track(exchange.then((reply) => {
    cleanup();
    if (attempt.abandoned) {
      // The caller gave up: a grant that arrives now is released at once.
      if (reply.status === "A") ctx.track(release(ctx, key, reply.token!));
      return;
    }
    try {
      resolve(settle(reply));
    } catch (error) {
      reject(error);
    }
  }, (error) => {
    cleanup();
    if (!attempt.abandoned) reject(error);
  }));
  return await promise;
}

/**
 * Extends the grant of `key` carrying `token` to `leaseMs` from now.
 *
 * @returns `true` on `X`, `false` on `N` (that token does not hold the key).
 * @throws {LockUnavailableError} No connection could carry it.
 * @throws {LockRejectedError} The server refused it.
 */
export async function extend(
  ctx: RequestContext,
  key: string,
  token: bigint,
  leaseMs: number,
): Promise<boolean> {
  const reply = await ctx.router.exchange("X", key, () => extendLine(key, token, leaseMs));
  if (reply.status === "X") return true;
  if (reply.status === "N") return false;
  throw unexpected(reply);
}

/**
 * Releases the grant of `key` carrying `token`, retrying while no connection can carry it.
 * `R` and `N` both end it: the lock is gone either way. Resolves `true` on `R`, `false` on
 * `N` (which a retry after a lost reply to an `R` also gets).
 *
 * @throws {LockUnavailableError} No node confirmed it within `releaseRetryMs`.
 * @throws {LockRejectedError} The server refused it.
 */
export async function release(ctx: RequestContext, key: string, token: bigint): Promise<boolean> {
  const { options, closed } = ctx;
  const until = performance.now() + options.releaseRetryMs;
  for (;;) {
    try {
      const reply = await within(
        ctx,
        until - performance.now(),
        ctx.router.exchange("R", key, () => releaseLine(key, token)),
        () => new LockUnavailableError(`Release of "${key}" not confirmed in time`),
      );
      if (reply.status === "R" || reply.status === "N") return reply.status === "R";
      throw unexpected(reply);
    } catch (error) {
      const retry = error instanceof LockUnavailableError && !closed.aborted &&
        performance.now() + options.releaseRetryIntervalMs < until;
      if (!retry) throw error;
    }
    await sleep(options.releaseRetryIntervalMs, closed);
  }
}

/** `promise`, or `late()` after `ms` (the promise then finishes in the background). */
function within<T>(
  ctx: RequestContext,
  ms: number,
  promise: Promise<T>,
  late: () => Error,
): Promise<T> {
  ctx.track(promise);
  return new Promise<T>((resolve, reject) => {
    const cancel = after(ms, () => reject(late()));
    promise.then(resolve, reject).finally(cancel);
  });
}
