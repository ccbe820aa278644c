/**
 * `LockClient`: the official client behaviour of SPEC §3 on any transport. It keeps one
 * connection per address (two for a single address), picks them round-robin, pipelines
 * requests, moves an acquire to the next connection when its connection drops, retries
 * releases for 5 s, follows `M` redirects to the active node and rides through failover.
 *
 * @module
 */

import { formatSeconds, keyError, type Reply } from "./codec.ts";
import { ConnectionLost, Slot } from "./connection.ts";
import {
  LockAbortedError,
  LockError,
  LockRejectedError,
  LockTimeoutError,
  LockUnavailableError,
} from "./errors.ts";
import { HeldLock, type Lock, type LockOwner } from "./lock.ts";
import { type Address, type Connect, connectTransport, parseAddress } from "./transport.ts";

/** What the package's own modules (the bridge) may do with a client beyond its public API. */
export interface ClientInternals {
  /** Sends one request line with the client's retry rules; resolves with the final reply. */
  exchange(op: string, key: string, line: string): Promise<Reply>;
  /** Releases a grant with the release retry of SPEC §3. */
  release(key: string, token: bigint): Promise<void>;
}

/** Internal access to clients, for the bridge (not exported from the package entry). */
export const clientInternals: WeakMap<LockClient, ClientInternals> = new WeakMap();

/**
 * Options of {@linkcode LockClient}. Durations here are milliseconds, as their names say.
 *
 * @example A client that reconnects faster and renews every lock by default
 * ```ts
 * import { LockClient, type LockClientOptions } from "@lockd/client";
 * const options: LockClientOptions = { reconnectIntervalMs: 1000, autoExtend: true };
 * const client = new LockClient(["10.0.0.1:7321", "10.0.0.2:7321"], options);
 * await client.close();
 * ```
 */
export interface LockClientOptions {
  /** Pause between background reconnection attempts of a dropped connection. Default 3000 ms. */
  reconnectIntervalMs?: number;
  /** Longest time one connection attempt may take. Default 3000 ms. */
  connectTimeoutMs?: number;
  /**
   * How long a request keeps trying while the cluster has no reachable active node (a
   * standby redirects to a node that is down, or answers `E no active node`). Default
   * 10000 ms.
   */
  retryTimeoutMs?: number;
  /** How long a release is retried when no connection can carry it. Default 5000 ms. */
  releaseRetryMs?: number;
  /** Pause between release attempts. Default 200 ms. */
  releaseRetryIntervalMs?: number;
  /**
   * A connection with requests outstanding that receives nothing (not even the answer to a
   * `?` probe sent after a third of this) for this long is dropped, and its requests move
   * to the next connection: a frozen or unreachable node. Default 2000 ms.
   */
  staleConnectionMs?: number;
  /** Default of {@linkcode AcquireOptions.autoExtend} for every acquire. Default `false`. */
  autoExtend?: boolean;
  /** Opens connections; replaces TCP/WebSocket (for tests, or custom transports). */
  connect?: Connect;
  /**
   * Connections kept to each address. Default (SPEC §3): two for a single address, so one
   * dropping does not interrupt service; one each when there are several.
   */
  connectionsPerAddress?: number;
}

/**
 * Options of {@linkcode LockClient.acquire}. Durations here are seconds.
 *
 * @example Acquire with a 10 s lease, queueing at most 2.5 s, abortable
 * ```ts
 * import { type AcquireOptions, LockClient } from "@lockd/client";
 * const client = new LockClient("127.0.0.1:7321");
 * const options: AcquireOptions = { lease: 10, wait: 2.5, signal: AbortSignal.timeout(5000) };
 * const lock = await client.acquire("orders:17", options);
 * await lock.release();
 * await client.close();
 * ```
 */
export interface AcquireOptions {
  /** Lease in seconds (> 0, fractions allowed): the server frees the lock after it. Default 30. */
  lease?: number;
  /** Longest time to queue, in seconds; `0` (or `Infinity`) waits without limit. Default 0. */
  wait?: number;
  /** Aborts the acquire: it rejects at once, and a grant that arrives later is released. */
  signal?: AbortSignal;
  /** Renew the lease at a third of its length while held. Default: the client's setting. */
  autoExtend?: boolean;
}

/**
 * Options of {@linkcode LockClient.tryAcquire}: those of an acquire, without `wait`.
 *
 * @example Try once, with a 5 s lease renewed while held
 * ```ts
 * import { LockClient, type TryAcquireOptions } from "@lockd/client";
 * const client = new LockClient("127.0.0.1:7321");
 * const options: TryAcquireOptions = { lease: 5, autoExtend: true };
 * const lock = await client.tryAcquire("reports", options);
 * await lock?.release();
 * await client.close();
 * ```
 */
export type TryAcquireOptions = Omit<AcquireOptions, "wait">;

/** Which `E` replies mean "try again soon" rather than "your request is wrong". */
function retryable(message: string | undefined): boolean {
  return message === "no active node" || message === "shutting down";
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}

function checkKey(key: string): void {
  if (typeof key !== "string") throw new TypeError(`key must be a string, got ${typeof key}`);
  const problem = keyError(key);
  if (problem !== undefined) throw new TypeError(`Invalid key ${JSON.stringify(key)}: ${problem}`);
}

/** Seconds the protocol can carry exactly (10^12 s, about 31,700 years). */
const MAX_SECONDS = 1e12;

function toMs(seconds: number, what: "lease" | "wait"): number {
  const isLease = what === "lease";
  if (
    typeof seconds !== "number" || Number.isNaN(seconds) || seconds < 0 ||
    (isLease && (seconds === 0 || seconds >= MAX_SECONDS))
  ) {
    const rule = isLease
      ? `a positive number of seconds below ${MAX_SECONDS}`
      : "0 or more seconds";
    throw new TypeError(`${what} must be ${rule}, got ${seconds}`);
  }
  // A wait too long to write is no limit at all, which the protocol spells 0.
  if (!isLease && seconds >= MAX_SECONDS) return 0;
  return Math.ceil(seconds * 1000);
}

/** Time allowed for a reply's trip past the wait it answers, besides twice the latency (ms). */
const REPLY_MARGIN_MS = 200;
/** Time a silent connection gets to answer a probe before it counts as frozen (ms). */
const PROBE_GRACE_MS = 500;

/** Tracks one request's attempts (SPEC §3: fail after as many attempts as connections). */
interface Attempt {
  /** Set when the caller gave up (abort): stop retrying. */
  abandoned: boolean;
}

/**
 * A client of a lockd node or cluster.
 *
 * @example Take a lock, use its fencing token, release it
 * ```ts
 * import { LockClient } from "@lockd/client";
 * const client = new LockClient(["10.0.0.1:7321", "10.0.0.2:7321", "10.0.0.3:7321"]);
 * {
 *   await using lock = await client.acquire("orders:17", { lease: 30, wait: 5 });
 *   console.log(`holding ${lock.key} with token ${lock.token}`);
 * } // released here
 * await client.withLock("reports", { lease: 10 }, async (lock) => {
 *   // ... work while !lock.signal.aborted ...
 * });
 * await client.close();
 * ```
 */
export class LockClient implements AsyncDisposable {
  #slots: Slot[] = [];
  #next = 0;
  #active: string | undefined;
  #closing = new AbortController();
  #closed: Promise<void> | undefined;
  #locks = new Set<HeldLock>();
  #background = new Set<Promise<unknown>>();
  #options: Required<Omit<LockClientOptions, "connect" | "connectionsPerAddress">> & {
    connect: Connect;
  };
  #owner: LockOwner;
  /** Decaying maximum of measured round trips (ms): an upper bound of one-way latency. */
  #latency = 0;

  /**
   * Creates a client and starts connecting in the background.
   *
   * @param servers One address or several (a cluster, any order): `host:port`,
   * `tcp://host:port`, `ws://...` or `wss://...` (a bridge). One address gets two connections.
   * @param options Timings in milliseconds and defaults.
   * @throws {TypeError} If no address is given or one cannot be parsed.
   */
  constructor(servers: string | readonly string[], options: LockClientOptions = {}) {
    const list = typeof servers === "string" ? [servers] : [...servers];
    if (list.length === 0) throw new TypeError("LockClient needs at least one server address");
    const addresses = new Map<string, Address>();
    // WebSocket connections carry this client's id, so a bridge treats them as one client:
    // a grant taken on one can be released on the other.
    const id = crypto.randomUUID();
    for (const text of list) {
      const address = parseAddress(text);
      if (address.url !== undefined) {
        const url = new URL(address.url);
        url.searchParams.set("client", id);
        address.url = url.href;
      }
      addresses.set(address.key, address);
    }
    for (const [name, value] of Object.entries(options)) {
      if (
        name.endsWith("Ms") && value !== undefined &&
        !(typeof value === "number" && value > 0 && Number.isFinite(value))
      ) {
        throw new TypeError(
          `${name} must be a positive number of milliseconds, got ${String(value)}`,
        );
      }
    }
    this.#options = {
      reconnectIntervalMs: options.reconnectIntervalMs ?? 3000,
      connectTimeoutMs: options.connectTimeoutMs ?? 3000,
      retryTimeoutMs: options.retryTimeoutMs ?? 10_000,
      releaseRetryMs: options.releaseRetryMs ?? 5000,
      releaseRetryIntervalMs: options.releaseRetryIntervalMs ?? 200,
      staleConnectionMs: options.staleConnectionMs ?? 2000,
      autoExtend: options.autoExtend ?? false,
      connect: options.connect ?? connectTransport,
    };
    const perAddress = options.connectionsPerAddress ?? (addresses.size === 1 ? 2 : 1);
    if (!Number.isInteger(perAddress) || perAddress < 1) {
      throw new TypeError(
        `connectionsPerAddress must be a whole number above 0, got ${perAddress}`,
      );
    }
    for (let i = 0; i < perAddress; i++) {
      for (const address of addresses.values()) this.#addSlot(address);
    }
    this.#owner = {
      extend: (key, token, leaseMs) => this.#extend(key, token, leaseMs),
      release: (key, token) => this.#release(key, token),
      forget: (lock) => this.#locks.delete(lock),
    };
    for (const slot of this.#slots) slot.connect();
    clientInternals.set(this, {
      exchange: (op, key, line) => this.#exchange(op, key, () => line),
      release: (key, token) => this.#release(key, token),
    });
  }

  /** Number of managed connections (two for a single address). */
  get connections(): number {
    return this.#slots.length;
  }

  /** Number of connections usable right now. */
  get connected(): number {
    return this.#slots.filter((s) => s.up).length;
  }

  /**
   * Acquires `key`, queueing behind earlier waiters for at most `wait` seconds.
   *
   * @param key 1–250 bytes of UTF-8, no whitespace or control characters.
   * @param options Lease and wait in seconds, an abort signal, auto-extension.
   * @returns The held {@linkcode Lock}.
   * @throws {LockTimeoutError} The wait ran out (`T`): nothing is held.
   * @throws {LockUnavailableError} No connection could carry the request.
   * @throws {LockRejectedError} The server refused it (`E`), e.g. a lease above its limit.
   * @throws {LockAbortedError} `signal` fired first; a later grant is released at once.
   * @throws {TypeError} For an invalid key, lease or wait (nothing is sent).
   *
   * @example Wait up to 5 s for a 30 s lease
   * ```ts
   * import { LockClient, LockTimeoutError } from "@lockd/client";
   * const client = new LockClient("127.0.0.1:7321");
   * try {
   *   const lock = await client.acquire("orders:17", { lease: 30, wait: 5 });
   *   console.log(lock.token); // e.g. 1042n
   *   await lock.release();
   * } catch (error) {
   *   if (!(error instanceof LockTimeoutError)) throw error;
   * } finally {
   *   await client.close();
   * }
   * ```
   */
  acquire(key: string, options: AcquireOptions | undefined = {}): Promise<Lock> {
    options ??= {};
    if (this.#closed !== undefined) return Promise.reject(new LockError("The client is closed"));
    try {
      checkKey(key);
      const leaseMs = toMs(options.lease ?? 30, "lease");
      const waitMs = toMs(options.wait ?? 0, "wait");
      return this.#acquire(key, leaseMs, waitMs, options);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /**
   * Takes `key` only if it is free now: never queues behind a holder.
   *
   * @returns The {@linkcode Lock}, or `null` if someone else holds it.
   * @throws {LockUnavailableError} No connection could carry the request.
   * @throws {LockRejectedError} The server refused it (`E`).
   * @throws {LockAbortedError} `signal` fired first.
   *
   * @example Skip the work if someone else is doing it
   * ```ts
   * import { LockClient } from "@lockd/client";
   * const client = new LockClient("127.0.0.1:7321");
   * const lock = await client.tryAcquire("nightly-report", { lease: 60 });
   * if (lock === null) console.log("already running elsewhere");
   * else await lock.release();
   * await client.close();
   * ```
   */
  async tryAcquire(key: string, options: TryAcquireOptions = {}): Promise<Lock | null> {
    try {
      return await this.acquire(key, { ...options, wait: 0.001 });
    } catch (error) {
      if (error instanceof LockTimeoutError) return null;
      throw error;
    }
  }

  /**
   * Runs `fn` while holding `key` (acquired with the default lease and wait), and releases
   * it afterwards, whatever `fn` does.
   *
   * @returns What `fn` returns.
   * @throws Whatever {@linkcode acquire} or `fn` throws.
   *
   * @example Run a job under a lock
   * ```ts
   * import { LockClient } from "@lockd/client";
   * const client = new LockClient("127.0.0.1:7321");
   * const total = await client.withLock("ledger", async (lock) => {
   *   console.log(`token ${lock.token}`);
   *   return 42;
   * });
   * await client.close();
   * ```
   */
  withLock<T>(key: string, fn: (lock: Lock) => T | Promise<T>): Promise<T>;
  /**
   * Runs `fn` while holding `key` (acquired with `options`), then releases it. If the work
   * succeeded but no node confirms the release within 5 s, the result is still returned (the
   * lease frees the lock).
   *
   * @returns What `fn` returns.
   * @throws Whatever {@linkcode acquire} or `fn` throws.
   *
   * @example Hold "k" for at most 10 s while working
   * ```ts
   * import { LockClient } from "@lockd/client";
   * const client = new LockClient("127.0.0.1:7321");
   * await client.withLock("k", { lease: 10, wait: 5 }, async (lock) => {
   *   if (lock.signal.aborted) return; // lost: stop touching the resource
   * });
   * await client.close();
   * ```
   */
  withLock<T>(
    key: string,
    options: AcquireOptions,
    fn: (lock: Lock) => T | Promise<T>,
  ): Promise<T>;
  async withLock<T>(
    key: string,
    optionsOrFn: AcquireOptions | ((lock: Lock) => T | Promise<T>),
    maybeFn?: (lock: Lock) => T | Promise<T>,
  ): Promise<T> {
    const fn = typeof optionsOrFn === "function" ? optionsOrFn : maybeFn;
    const options = typeof optionsOrFn === "function" ? {} : optionsOrFn;
    if (typeof fn !== "function") throw new TypeError("withLock needs a function to run");
    const lock = await this.acquire(key, options);
    let result: T;
    try {
      result = await fn(lock);
    } catch (error) {
      await lock.release().catch(() => {}); // fn's error matters more; the lease covers.
      throw error;
    }
    // The work is done: if the release cannot be confirmed (no node reachable for 5 s), the
    // lease frees the lock; the caller keeps its result.
    await lock.release().catch((error) => {
      if (!(error instanceof LockUnavailableError)) throw error;
    });
    return result;
  }

  /**
   * Releases every held lock (one attempt each, at most about a second in all), then closes
   * every connection and timer. Requests still outstanding reject with a
   * {@linkcode LockError}, and a grant that arrives meanwhile is released. Calling it again
   * returns the same promise. Never rejects.
   *
   * @example Close when the page goes away
   * ```ts
   * import { LockClient } from "@lockd/client";
   * const client = new LockClient("wss://locks.example.com/");
   * globalThis.addEventListener("pagehide", () => client.close());
   * ```
   */
  close(): Promise<void> {
    this.#closed ??= this.#close();
    return this.#closed;
  }

  /** Same as {@linkcode close}, for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  async #close(): Promise<void> {
    const held = [...this.#locks];
    const releases = held.map((lock) => lock.release().catch(() => {}));
    const timeout = new AbortController();
    await Promise.race([Promise.all(releases), sleep(1000, timeout.signal)]);
    timeout.abort();
    for (const lock of held) lock.stop();
    this.#closing.abort(new LockError("The client is closed"));
    await Promise.allSettled([...this.#background]);
  }

  #addSlot(address: Address): Slot {
    const slot = new Slot(address, {
      connect: this.#options.connect,
      reconnectIntervalMs: this.#options.reconnectIntervalMs,
      connectTimeoutMs: this.#options.connectTimeoutMs,
      closed: this.#closing.signal,
      roundTrip: (ms) => this.#latency = Math.max(ms, this.#latency * 0.9),
      staleAfterMs: this.#options.staleConnectionMs,
      lost: () => this.#connectionLost(),
    });
    this.#slots.push(slot);
    return slot;
  }

  /**
   * A connection dropped. With no connection left at all, every held lock is suspected
   * lost: a single node that restarts comes back empty, and nothing can renew a lease
   * meanwhile. (Losing one node of a cluster is not a loss: a standby keeps the locks.)
   * A bridge releases what a client holds once its last WebSocket closes, so losing every
   * bridge connection is enough.
   */
  #connectionLost(): void {
    if (this.#closing.signal.aborted) return;
    const bridged = this.#slots.filter((s) => s.address.scheme !== "tcp");
    let why: string;
    if (!this.#slots.some((s) => s.up)) why = "every connection to lockd dropped";
    else if (bridged.length > 0 && !bridged.some((s) => s.up)) {
      why = "every connection to the bridge dropped, and the bridge releases its locks";
    } else return;
    for (const lock of this.#locks) lock.lose(why, false);
  }

  /** Keeps a background promise from being unhandled and lets close() wait for it. */
  #track(promise: Promise<unknown>): void {
    const tracked = promise.catch(() => {}).finally(() => this.#background.delete(tracked));
    this.#background.add(tracked);
  }

  async #acquire(
    key: string,
    leaseMs: number,
    waitMs: number,
    options: AcquireOptions,
  ): Promise<Lock> {
    const signal = options.signal;
    if (signal?.aborted) throw new LockAbortedError(key, signal.reason);
    const autoExtend = options.autoExtend ?? this.#options.autoExtend;
    const attempt: Attempt = { abandoned: false };
    const started = performance.now();
    let sentAt = started;
    const { promise, resolve, reject } = Promise.withResolvers<Lock>();
    let timer: ReturnType<typeof setTimeout> | undefined;
    let sends = 0;
    const cleanup = () => {
      clearTimeout(timer);
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
    // earlier acquire of the same key on the same connection (SPEC §2 ordering), and a node
    // can freeze. So the caller's wait also runs here: when it is over (plus a margin for
    // the reply's trip), a connection that answered anything since the request went out is
    // alive and the answer is T; one that stayed silent is probed, and dropped if the probe
    // goes unanswered, which moves the request to the next connection (SPEC §3).
    const deadline = async (slot: Slot, received: number, send: number) => {
      if (slot.up && slot.received === received) {
        const graceMs = Math.min(
          this.#options.staleConnectionMs,
          PROBE_GRACE_MS + 4 * this.#latency,
        );
        if (!(await slot.probe(graceMs))) return; // Moved on: the next send has its own deadline.
        if (attempt.abandoned || send !== sends) return;
      }
      giveUp(new LockTimeoutError(key, waitMs / 1000));
    };
    const line = (slot: Slot) => {
      sentAt = performance.now();
      // After a move to another connection the queue position is lost: ask for what is left.
      const left = waitMs === 0 ? 0 : Math.max(1, Math.ceil(waitMs - (sentAt - started)));
      if (left > 0) {
        clearTimeout(timer);
        const send = ++sends;
        const received = slot.received;
        timer = setTimeout(
          () => this.#track(deadline(slot, received, send)),
          left + REPLY_MARGIN_MS + 2 * this.#latency,
        );
      }
      return `A ${key} ${formatSeconds(leaseMs)} ${formatSeconds(left)}`;
    };
    signal?.addEventListener("abort", onAbort, { once: true });
    const exchange = this.#exchange("A", key, line, attempt);
    const settle = (reply: Reply): Lock => {
      if (reply.status === "A") {
        // Granted between sending and now, at least one latency before now (unknown
        // latency: assume the earliest).
        const grantedAt = this.#latency > 0
          ? Math.max(sentAt, performance.now() - this.#latency)
          : sentAt;
        const lock = new HeldLock(key, reply.token!, this.#owner, {
          leaseMs,
          grantedAt,
          autoExtend,
        });
        this.#locks.add(lock);
        if (this.#closed !== undefined) {
          // close() began while this was in flight: nothing may stay held.
          this.#track(lock.release());
          throw new LockError("The client is closed");
        }
        return lock;
      }
      if (reply.status === "T") throw new LockTimeoutError(key, waitMs / 1000);
      throw this.#unexpected(reply);
    };
    this.#track(exchange.then((reply) => {
      cleanup();
      if (attempt.abandoned) {
        // The caller gave up: a grant that arrives now is released at once.
        if (reply.status === "A") this.#track(this.#release(key, reply.token!));
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

  async #extend(key: string, token: bigint, leaseMs: number): Promise<boolean> {
    const reply = await this.#exchange(
      "X",
      key,
      () => `X ${key} ${token} ${formatSeconds(leaseMs)}`,
    );
    if (reply.status === "X") return true;
    if (reply.status === "N") return false;
    throw this.#unexpected(reply);
  }

  async #release(key: string, token: bigint): Promise<void> {
    const until = performance.now() + this.#options.releaseRetryMs;
    for (;;) {
      try {
        const reply = await this.#within(
          until - performance.now(),
          this.#exchange("R", key, () => `R ${key} ${token}`),
          () => new LockUnavailableError(`Release of "${key}" not confirmed in time`),
        );
        if (reply.status === "R" || reply.status === "N") return;
        throw this.#unexpected(reply);
      } catch (error) {
        const retry = error instanceof LockUnavailableError && !this.#closing.signal.aborted &&
          performance.now() + this.#options.releaseRetryIntervalMs < until;
        if (!retry) throw error;
      }
      await sleep(this.#options.releaseRetryIntervalMs, this.#closing.signal);
    }
  }

  /** `promise`, or `late()` after `ms` (the promise then finishes in the background). */
  #within<T>(ms: number, promise: Promise<T>, late: () => Error): Promise<T> {
    this.#track(promise);
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => reject(late()), Math.max(0, ms));
      promise.then(resolve, reject).finally(() => clearTimeout(timer));
    });
  }

  #unexpected(reply: Reply): LockError {
    if (reply.status === "E") return new LockRejectedError(reply.op, reply.key, reply.text ?? "");
    return new LockError(`Unexpected reply to ${reply.op} "${reply.key}": ${reply.status}`);
  }

  /**
   * The next connection, round-robin over those usable now: those of the known active node
   * first and, for an acquire, those without an earlier acquire of the same key outstanding
   * (the server answers those in order, so a try-lock would wait behind a long wait).
   */
  #pick(op: string, key: string): Slot | undefined {
    const up = this.#slots.filter((s) => s.up);
    if (up.length === 0) return undefined;
    const preferred = up.filter((s) => s.address.key === this.#active);
    let pool = preferred.length > 0 ? preferred : up;
    if (op === "A" && pool.length > 1) {
      const free = pool.filter((s) => !s.outstanding(op, key));
      if (free.length > 0) pool = free;
    }
    return pool[this.#next++ % pool.length];
  }

  /** Connects every idle connection now and resolves with the first that comes up. */
  async #anyUp(): Promise<Slot | undefined> {
    const attempts = this.#slots.map(async (slot) => (await slot.connect()) ? slot : undefined);
    const first = await Promise.any(
      attempts.map(async (a) => (await a) ?? Promise.reject(new Error("down"))),
    ).catch(() => undefined);
    return first;
  }

  #slotFor(addressText: string): Slot | undefined {
    let address: Address;
    try {
      address = parseAddress(addressText);
    } catch {
      return undefined;
    }
    return this.#slots.find((s) => s.address.key === address.key) ?? this.#addSlot(address);
  }

  /**
   * Sends one request until it gets a final reply: moves to the next connection when one
   * drops (failing after as many attempts as connections), follows `M`, and waits out a
   * cluster with no active node for up to `retryTimeoutMs`.
   */
  async #exchange(
    op: string,
    key: string,
    line: (slot: Slot) => string,
    attempt?: Attempt,
  ): Promise<Reply> {
    const closed = this.#closing.signal;
    const giveUpAt = performance.now() + this.#options.retryTimeoutMs;
    let failures = 0;
    let lastProblem = "";
    let target: Slot | undefined;
    let backoff = 25;
    let hops = 0;
    const unavailable = () =>
      new LockUnavailableError(
        `No usable lockd connection for ${op} "${key}" (${
          this.#slots.map((s) => s.address.key).join(", ")
        })` +
          (lastProblem ? `: ${lastProblem}` : ""),
      );
    const pause = async () => {
      if (performance.now() + backoff > giveUpAt) throw unavailable();
      await sleep(backoff, closed);
      backoff = Math.min(backoff * 2, 200);
    };
    for (;;) {
      if (closed.aborted) throw new LockError("The client is closed");
      if (attempt?.abandoned) throw new LockError("Abandoned");
      let slot = target ?? this.#pick(op, key);
      target = undefined;
      if (slot !== undefined && !slot.up && !(await slot.connect())) {
        // A redirect to a node that is down: the cluster is failing over. Ask again soon.
        lastProblem = `${slot.address.key} is unreachable`;
        if (this.#active === slot.address.key) this.#active = undefined;
        await pause();
        continue;
      }
      slot ??= await this.#anyUp();
      if (slot === undefined) {
        const reasons = [...new Set(this.#slots.map((s) => s.lastError).filter((e) => e))];
        lastProblem = reasons.length > 0 ? reasons.join("; ") : "no node could be reached";
        if (++failures >= this.#slots.length) throw unavailable();
        continue;
      }
      if (closed.aborted) throw new LockError("The client is closed");
      let reply: Reply;
      try {
        reply = await slot.request(op, key, line(slot));
      } catch (error) {
        if (!(error instanceof ConnectionLost)) throw error;
        lastProblem = error.message;
        if (this.#active === slot.address.key) this.#active = undefined;
        // Give up only once as many attempts as connections failed and none is usable.
        if (++failures >= this.#slots.length && !this.#slots.some((s) => s.up)) {
          throw unavailable();
        }
        continue;
      }
      if (reply.status === "M") {
        target = this.#slotFor(reply.text!);
        if (++hops > 3) await pause(); // Nodes pointing at each other: let the cluster settle.
        if (target === slot) target = undefined; // A node that names itself: don't loop on it.
        else this.#active = target?.address.key;
        lastProblem = `redirected to ${reply.text}`;
        if (target === undefined) await pause();
        continue;
      }
      if (reply.status === "E" && retryable(reply.text)) {
        lastProblem = `${slot.address.key} answered "${reply.text}"`;
        await pause();
        continue;
      }
      this.#active = slot.address.key; // It served the request: prefer it from now on.
      return reply;
    }
  }
}
