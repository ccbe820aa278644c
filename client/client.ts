/**
 * `LockClient`, the facade: the official client behaviour (docs/client.md) on any
 * transport. Acquires with their waits, try-locks, `withLock`, releases retried for 5 s,
 * extends, and closing; where requests go is the {@linkcode Router}'s job.
 *
 * @module
 */

import { type Address, parseAddress, serverList } from "./address.ts";
import { helloLine, type KeyState, type Reply } from "./codec.ts";
import { LockError, LockTimeoutError, LockUnavailableError } from "./errors.ts";
import { type Lock, LockHandle, type LockOwner } from "./lock.ts";
import {
  type AcquireOptions,
  checkGrant,
  checkKey,
  type LockClientOptions,
  type ResolvedOptions,
  resolveOptions,
  toMs,
  type TryAcquireOptions,
} from "./options.ts";
import {
  acquire,
  type AcquireParams,
  extend,
  release,
  releaseLock,
  type RequestContext,
} from "./requests.ts";
import {
  inspectKey,
  listLocks,
  type LocksOptions,
  locksOptions,
  nodeStatuses,
  type NodeStatusResult,
} from "./inspect.ts";
import { defaultClientName, newSessionId } from "./identity.ts";
import { Router, sleep } from "./router.ts";
import { CloseGate } from "./close_gate.ts";

export type { AcquireOptions, LockClientOptions, TryAcquireOptions };

/** What the package's own modules (the bridge) may do with a client beyond its public API. */
export interface ClientInternals {
  /** Sends one request line with the client's retry rules; resolves with the final reply. */
  exchange(op: string, key: string, line: string): Promise<Reply>;
  /** Releases a grant with the release retry of docs/client.md. */
  release(key: string, token: bigint): Promise<void>;
}

/** Internal access to clients, for the bridge (not exported from the package entry). */
export const clientInternals: WeakMap<LockClient, ClientInternals> = new WeakMap();

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
  #router: Router;
  #closing = new AbortController();
  #closed: Promise<void> | undefined;
  #locks = new Set<LockHandle>();
  #background = new Set<Promise<unknown>>();
  /** Requests on their way, and the rejections held back while closing. */
  #gate = new CloseGate();
  #options: ResolvedOptions;
  #owner: LockOwner;
  #requests: RequestContext;
  #session: string;
  /** The addresses the client was given (canonical forms), for `status()`. */
  #addresses: Address[];

  /**
   * Creates a client and starts connecting in the background.
   *
   * @param servers One address or several (a cluster, any order): `host:port`,
   * `tcp://host:port`, `ws://...` or `wss://...` (a bridge). One address gets two connections.
   * @param options Timings in milliseconds and defaults.
   * @throws {TypeError} If no address is given, one is not a string, or one cannot be parsed.
   */
  constructor(servers: string | readonly string[], options: LockClientOptions = {}) {
    const list = serverList(servers);
    const addresses = new Map<string, Address>();
    // WebSocket connections carry this client's id, so a bridge treats them as one client:
    // a grant taken on one can be released on the other.
    const id = crypto.randomUUID();
    const session = newSessionId();
    for (const text of list) {
      const address = parseAddress(text);
      if (address.url !== undefined) {
        const url = new URL(address.url);
        url.searchParams.set("client", id);
        address.url = url.href;
      }
      addresses.set(address.key, address);
    }
    this.#options = resolveOptions(options ?? {}, addresses.size);
    this.#addresses = [...addresses.values()];
    const resolved = this.#options;
    for (const address of addresses.values()) {
      if (address.scheme === "tls") address.caCerts = resolved.caCerts;
      if (address.url !== undefined) address.bearer = resolved.bearer;
    }
    this.#session = session;
    this.#router = new Router(
      [...addresses.values()],
      this.#options,
      this.#closing.signal,
      () => this.#connectionLost(),
      {
        session,
        line: helloLine({
          session,
          name: resolved.name ?? defaultClientName(),
          credential: resolved.auth,
        }),
        credential: resolved.auth !== undefined,
      },
    );
    this.#requests = {
      router: this.#router,
      options: this.#options,
      closed: this.#closing.signal,
      track: (promise) => this.#track(promise),
      begin: () => this.#gate.begin(),
      end: () => this.#gate.end(),
      fail: (reject, error) => this.#gate.fail(reject, error),
    };
    this.#owner = {
      extend: (key, token, leaseMs) => extend(this.#requests, key, token, leaseMs),
      release: (key, token) => releaseLock(this.#requests, key, token),
      forget: (lock) => this.#locks.delete(lock as LockHandle),
      settle: (promise) => this.#gate.settle(promise),
    };
    this.#router.start();
    clientInternals.set(this, {
      exchange: (op, key, line) => this.#router.exchange(op, key, () => line),
      release: (key, token) => releaseLock(this.#requests, key, token),
    });
  }

  /** Number of managed connections (two for a single address). */
  get connections(): number {
    return this.#router.connections.length;
  }

  /** Number of connections usable right now. */
  get connected(): number {
    return this.#router.connections.filter((c) => c.up).length;
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
      return acquire(this.#requests, {
        key,
        leaseMs: toMs(options.lease ?? 30, "lease"),
        waitMs: toMs(options.wait ?? 0, "wait"),
        session: options.session ?? this.#options.sessionLocks,
        autoExtend: options.autoExtend ?? this.#options.autoExtend,
        signal: options.signal,
      }, this.#granted);
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** Makes the `Lock` of a grant (one function for every acquire, not a closure each). */
  #granted = (request: AcquireParams, token: bigint, grantedAt: number): LockHandle => {
    const lock = new LockHandle(request.key, token, this.#owner, {
      leaseMs: request.leaseMs,
      grantedAt,
      autoExtend: request.autoExtend,
    });
    this.#locks.add(lock);
    if (this.#closed !== undefined) {
      // close() began while this was in flight: nothing may stay held.
      this.#track(lock.release());
      throw new LockError("The client is closed");
    }
    return lock;
  };

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
   * Inspects `key` without changing anything (`I`, docs/protocol.md, "Inspection"): its
   * holder's token, client name and lease left (seconds), and how many acquires wait.
   *
   * @throws {LockUnavailableError} No connection could carry the request.
   * @throws {LockRejectedError} The server refused it (outside the credential's prefix).
   * @throws {TypeError} For an invalid key (nothing is sent).
   *
   * @example Who holds a key
   * ```ts
   * import { LockClient } from "@lockd/client";
   * const client = new LockClient("127.0.0.1:7321");
   * const state = await client.inspect("orders:17");
   * if (state.held) console.log(`${state.holder} holds it, ${state.leaseLeft} s left`);
   * await client.close();
   * ```
   */
  inspect(key: string): Promise<KeyState> {
    return this.#call(() => (checkKey(key), inspectKey(this.#router, key)));
  }

  /**
   * Held keys, in key order (`L`, paged until done or `limit`, default 1000): the same
   * fields as {@linkcode inspect}. Keys may change between pages.
   *
   * @throws {LockUnavailableError} No connection could carry a request.
   * @throws {LockRejectedError} The server refused it (a prefix outside the credential's).
   * @throws {TypeError} For an invalid prefix or limit (nothing is sent).
   *
   * @example Every held key under `orders:`
   * ```ts
   * import { LockClient } from "@lockd/client";
   * const client = new LockClient("127.0.0.1:7321");
   * for (const lock of await client.locks({ prefix: "orders:" })) console.log(lock.key);
   * await client.close();
   * ```
   */
  locks(options: LocksOptions = {}): Promise<KeyState[]> {
    return this.#call(() => listLocks(this.#router, locksOptions(options ?? {})));
  }

  /**
   * Asks every address the client was given for its node's status (`S`), each node itself
   * (standbys too, no redirect), at once. Never rejects: a node that could not answer has
   * an `error` instead of a `status`.
   *
   * @example A cluster at a glance
   * ```ts
   * import { LockClient } from "@lockd/client";
   * const client = new LockClient(["10.0.0.1:7321", "10.0.0.2:7321"]);
   * for (const node of await client.status()) console.log(node.address, node.status?.role);
   * await client.close();
   * ```
   */
  status(): Promise<NodeStatusResult[]> {
    return nodeStatuses(this.#router, this.#addresses);
  }

  /**
   * Releases the grant of `key` carrying `token` (held by any process: a lock taken by a
   * script and released by another), retried as a `Lock`'s release is.
   *
   * @returns `true` if it released (`R`), `false` if that token did not hold the key (`N`).
   * @throws {LockUnavailableError} No node confirmed it within `releaseRetryMs`.
   * @throws {LockRejectedError} The server refused it.
   * @throws {TypeError} For an invalid key or token (nothing is sent).
   *
   * @example Release by token
   * ```ts
   * import { LockClient } from "@lockd/client";
   * const client = new LockClient("127.0.0.1:7321");
   * console.log(await client.release("orders:17", 1042n)); // true or false
   * await client.close();
   * ```
   */
  release(key: string, token: bigint): Promise<boolean> {
    return this.#call(() => (checkGrant(key, token), release(this.#requests, key, token)));
  }

  /**
   * Resets the lease of the grant of `key` carrying `token` to `lease` seconds from now.
   *
   * @returns `true` if it extended (`X`), `false` if that token does not hold the key (`N`).
   * @throws {LockUnavailableError} No connection could carry the request.
   * @throws {LockRejectedError} The server refused it (e.g. above its `--max-lease`).
   * @throws {TypeError} For an invalid key, token or lease (nothing is sent).
   *
   * @example Keep a detached lock for another minute
   * ```ts
   * import { LockClient } from "@lockd/client";
   * const client = new LockClient("127.0.0.1:7321");
   * console.log(await client.extend("orders:17", 1042n, 60)); // true or false
   * await client.close();
   * ```
   */
  extend(key: string, token: bigint, lease: number): Promise<boolean> {
    return this.#call(() => {
      checkGrant(key, token);
      return extend(this.#requests, key, token, toMs(lease, "lease"));
    });
  }

  /**
   * Releases every held lock (one attempt each, at most about a second in all), then closes
   * every connection and timer. Requests still outstanding reject with a
   * {@linkcode LockError}, and a grant that arrives meanwhile is released (one made as it
   * closes too: docs/client.md, "Held locks"). Calling it again returns the same promise.
   * Never rejects.
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
    this.#gate.hold(); // Every rejection waits for the end (close_gate.ts).
    const held = [...this.#locks];
    const releases = held.map((lock) => lock.release().catch(() => {}));
    const timeout = new AbortController();
    await Promise.race([Promise.all(releases), sleep(1000, timeout.signal)]);
    timeout.abort();
    for (const lock of held) lock.stop();
    await this.#router.quiesce(); // close_drain.ts
    this.#closing.abort(new LockError("The client is closed"));
    // Every request on its way now fails (its connection closed): wait for them to end.
    await this.#gate.idle();
    this.#gate.open();
    await Promise.allSettled([...this.#background]);
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
    const connections = this.#router.connections;
    const bridged = connections.filter((c) => c.address.url !== undefined); // ws, wss
    let why: string;
    if (!connections.some((c) => c.up)) why = "every connection to lockd dropped";
    else if (bridged.length > 0 && !bridged.some((c) => c.up)) {
      why = "every connection to the bridge dropped, and the bridge releases its locks";
    } else return;
    for (const lock of this.#locks) lock.lose(why, false);
  }

  /** Runs `fn` unless the client is closed; what it throws becomes a rejection. */
  #call<T>(fn: () => Promise<T>): Promise<T> {
    if (this.#closed !== undefined) return Promise.reject(new LockError("The client is closed"));
    try {
      return this.#gate.settle(fn());
    } catch (error) {
      return Promise.reject(error);
    }
  }

  /** Keeps a background promise from being unhandled and lets close() wait for it. */
  #track(promise: Promise<unknown>): void {
    const tracked = promise.catch(() => {}).finally(() => this.#background.delete(tracked));
    this.#background.add(tracked);
  }
}
