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
import { Exchange, type Router, sleep } from "./router.ts";
import { type TimerEntry, timers } from "./timer.ts";

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
  /** A request is on its way (`close()` waits until every one has ended). */
  begin(): void;
  /** A request that began has ended. */
  end(): void;
  /** Rejects: now, or, while the client closes, when its close ends (client/close_gate.ts). */
  fail(reject: (error: unknown) => void, error: unknown): void;
}

/** What an acquire asks for, as a grant's maker sees it. */
export interface AcquireParams {
  /** The key. */
  readonly key: string;
  /** Lease in ms. */
  readonly leaseMs: number;
  /** Longest time to queue in ms (0: no limit). */
  readonly waitMs: number;
  /** Bound to the client's session. */
  readonly session: boolean;
  /** Renew at a third of the lease while held. */
  readonly autoExtend: boolean;
  /** Aborts the acquire. */
  readonly signal: AbortSignal | undefined;
}

/**
 * What a grant becomes: made by the client (it keeps its locks), from the acquire's
 * parameters, the token and the earliest moment the grant can have been made.
 */
export type Granted<L> = (acquire: AcquireParams, token: bigint, grantedAt: number) => L;

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
 * Acquires `params.key` for `leaseMs`, queueing at most `waitMs` (0: no limit).
 *
 * @throws {LockTimeoutError} The wait ran out.
 * @throws {LockAbortedError} `signal` fired first; a later grant is released at once.
 * @throws {LockUnavailableError} No connection could carry it.
 * @throws {LockRejectedError} The server refused it.
 */
export function acquire<L>(
  ctx: RequestContext,
  params: AcquireParams,
  granted: Granted<L>,
): Promise<L> {
  const signal = params.signal;
  if (signal?.aborted) return Promise.reject(new LockAbortedError(params.key, signal.reason));
  return new AcquireRequest(ctx, params, granted).start();
}

/**
 * One acquire: the exchange the router sends (its own receiver), its promise, and, with a
 * wait, the client-side deadline (its own timer entry). Nothing is allocated per acquire
 * beyond this object, its promise and the line, unless the caller passed a signal.
 */
class AcquireRequest<L> extends Exchange implements TimerEntry, AcquireParams {
  /** @internal The wait's deadline, as a timer entry. */
  due = 0;
  /** @internal */
  slot = -1;
  /** @internal */
  seq = 0;
  readonly leaseMs: number;
  readonly waitMs: number;
  readonly session: boolean;
  readonly autoExtend: boolean;
  readonly signal: AbortSignal | undefined;
  #ctx: RequestContext;
  #granted: Granted<L>;
  #resolve!: (lock: L) => void;
  #reject!: (error: unknown) => void;
  /** While `start()` runs: the first line goes out now, at `startedAt`. */
  #starting = true;
  #sentAt = 0;
  #sends = 0;
  /** What the deadline of the latest send looks at. */
  #connection: ManagedConnection | undefined;
  #received = 0;
  #drops = 0;
  #send = 0;
  #onAbort: (() => void) | undefined;

  constructor(ctx: RequestContext, params: AcquireParams, granted: Granted<L>) {
    super("A", params.key);
    this.#ctx = ctx;
    this.#granted = granted;
    this.leaseMs = params.leaseMs;
    this.waitMs = params.waitMs;
    this.session = params.session;
    this.autoExtend = params.autoExtend;
    this.signal = params.signal;
    const started = performance.now();
    this.startedAt = started;
    // The wait bounds the whole acquire: with no node to queue at (a cluster without an
    // active node, every node down) it ends by the same time as a wait that ran out in a
    // queue.
    if (this.waitMs !== 0) {
      this.until = started + this.waitMs + REPLY_MARGIN_MS + 2 * ctx.router.replyLatency;
    }
  }

  start(): Promise<L> {
    const promise = new Promise<L>((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    const signal = this.signal;
    if (signal !== undefined) {
      this.#onAbort = () => this.#giveUp(new LockAbortedError(this.key, signal.reason));
      signal.addEventListener("abort", this.#onAbort, { once: true });
    }
    this.#ctx.begin();
    this.#ctx.router.send(this);
    this.#starting = false;
    return promise;
  }

  line(connection: ManagedConnection): string {
    const sentAt = this.#starting ? this.startedAt : performance.now();
    this.#sentAt = sentAt;
    // After a move to another connection the queue position is lost: ask for what is left.
    const waitMs = this.waitMs;
    const left = waitMs === 0 ? 0 : Math.max(1, Math.ceil(waitMs - (sentAt - this.startedAt)));
    if (left > 0) {
      // The server answers T once the wait is over, but its reply can be held back behind an
      // earlier acquire of the same key on the same connection (docs/protocol.md, "Ordering
      // and pipelining"), and a node can freeze. So the caller's wait also runs here: see
      // fire().
      this.#send = ++this.#sends;
      this.#connection = connection;
      this.#received = connection.received;
      this.#drops = connection.drops;
      timers.schedule(
        this,
        sentAt + left + REPLY_MARGIN_MS + 2 * this.#ctx.router.replyLatency,
      );
    }
    return acquireLine(this.key, this.leaseMs, left, this.session);
  }

  /**
   * The wait (plus a margin for the reply's trip) is over: a connection that answered
   * anything since the request went out is alive and the answer is T; one that stayed
   * silent is probed, and dropped if the probe goes unanswered, which moves the request to
   * the next connection; one that dropped meanwhile leaves it to the retry loop. @internal
   */
  fire(): void {
    this.#ctx.track(this.#deadline(this.#connection!, this.#received, this.#send));
  }

  async #deadline(connection: ManagedConnection, received: number, send: number): Promise<void> {
    // Lost with its connection: the retry loop sends it again (with a deadline of its own)
    // or, past the wait, gives up as unavailable. Nothing says the key was busy.
    if (connection.drops !== this.#drops) return;
    if (connection.up && connection.received === received) {
      const graceMs = Math.min(
        this.#ctx.options.staleConnectionMs,
        PROBE_GRACE_MS + 4 * this.#ctx.router.replyLatency,
      );
      // Moved on: the next send has its own deadline.
      if (!(await connection.probe(graceMs))) return;
      if (this.abandoned || send !== this.#sends) return;
    }
    this.#giveUp(new LockTimeoutError(this.key, this.waitMs / 1000));
  }

  #giveUp(error: Error): void {
    if (this.abandoned) return;
    this.abandoned = true;
    this.#cleanup();
    this.#ctx.fail(this.#reject, error);
  }

  #cleanup(): void {
    timers.cancel(this);
    if (this.#onAbort !== undefined) this.signal!.removeEventListener("abort", this.#onAbort);
  }

  done(reply: Reply): void {
    this.#cleanup();
    this.#ctx.end();
    if (this.abandoned) {
      // The caller gave up: a grant that arrives now is released at once.
      if (reply.status === "A") this.#ctx.track(release(this.#ctx, this.key, reply.token!));
      return;
    }
    try {
      this.#resolve(this.#settle(reply));
    } catch (error) {
      this.#ctx.fail(this.#reject, error);
    }
  }

  failed(error: unknown): void {
    this.#cleanup();
    this.#ctx.end();
    if (!this.abandoned) this.#ctx.fail(this.#reject, error);
  }

  #settle(reply: Reply): L {
    if (reply.status === "A") {
      // Granted between sending and now, at least one latency before now (unknown
      // latency: assume the earliest).
      const latency = this.#ctx.router.latency;
      const sentAt = this.#sentAt;
      return this.#granted(
        this,
        reply.token!,
        latency > 0 ? Math.max(sentAt, performance.now() - latency) : sentAt,
      );
    }
    if (reply.status === "T") throw new LockTimeoutError(this.key, this.waitMs / 1000);
    throw unexpected(reply);
  }
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
export function release(ctx: RequestContext, key: string, token: bigint): Promise<boolean> {
  return new ReleaseRequest<boolean>(ctx, key, token, true).start();
}

/** {@linkcode release}, resolving with nothing (a `Lock`'s release). */
export function releaseLock(ctx: RequestContext, key: string, token: bigint): Promise<void> {
  return new ReleaseRequest<void>(ctx, key, token, false).start();
}

/**
 * One release: its exchange (retried every `releaseRetryIntervalMs` while no connection can
 * carry it) and its bound, `releaseRetryMs` from the start (its own timer entry), past
 * which it is reported unconfirmed while the attempt in flight finishes in the background.
 */
class ReleaseRequest<T extends boolean | void> extends Exchange implements TimerEntry {
  /** @internal The bound, as a timer entry. */
  due = 0;
  /** @internal */
  slot = -1;
  /** @internal */
  seq = 0;
  #ctx: RequestContext;
  #token: bigint;
  #line: string | undefined;
  #answer: boolean;
  #resolve!: (value: T) => void;
  #reject!: (error: unknown) => void;
  #until = 0;
  /** Reported unconfirmed: what the attempt in flight gets is no longer anyone's. */
  #late = false;

  constructor(ctx: RequestContext, key: string, token: bigint, answer: boolean) {
    super("R", key);
    this.#ctx = ctx;
    this.#token = token;
    this.#answer = answer;
  }

  start(): Promise<T> {
    const promise = new Promise<T>((resolve, reject) => {
      this.#resolve = resolve;
      this.#reject = reject;
    });
    const now = performance.now();
    this.#until = now + this.#ctx.options.releaseRetryMs;
    timers.schedule(this, this.#until);
    this.#attempt(now);
    return promise;
  }

  #attempt(now: number): void {
    this.startedAt = now;
    this.#ctx.begin();
    this.#ctx.router.send(this);
  }

  line(): string {
    // The same line for every attempt: built once.
    return this.#line ??= releaseLine(this.key, this.#token);
  }

  /** `releaseRetryMs` passed with no confirmation. @internal */
  fire(): void {
    this.#late = true;
    this.#ctx.fail(
      this.#reject,
      new LockUnavailableError(`Release of "${this.key}" not confirmed in time`),
    );
  }

  done(reply: Reply): void {
    this.#ctx.end();
    if (this.#late) return;
    timers.cancel(this);
    if (reply.status === "R" || reply.status === "N") {
      this.#resolve((this.#answer ? reply.status === "R" : undefined) as T);
    } else this.#ctx.fail(this.#reject, unexpected(reply));
  }

  failed(error: unknown): void {
    this.#ctx.end();
    if (this.#late) return;
    const { options, closed } = this.#ctx;
    const retry = error instanceof LockUnavailableError && !closed.aborted &&
      performance.now() + options.releaseRetryIntervalMs < this.#until;
    if (!retry) {
      timers.cancel(this);
      this.#ctx.fail(this.#reject, error);
      return;
    }
    sleep(options.releaseRetryIntervalMs, closed).then(() => this.#attempt(performance.now()));
  }
}
