/**
 * The options of a `LockClient`, their defaults (docs/client.md) and the validation of
 * what callers pass: option values, keys, and seconds turned into milliseconds.
 *
 * @module
 */

import {
  clientNameError,
  type Credential,
  keyError,
  MAX_KEY_BYTES,
  MAX_TOKEN,
  parseSeconds,
} from "./codec.ts";
import type { Connect } from "./transport.ts";
import { connectTransport } from "./dial.ts";

/**
 * Options of `LockClient`. Durations here are milliseconds, as their names say.
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
   * standby redirects to a node that is down, or answers `E no active node`), counted from
   * the first retry; an acquire gets back the time a node held it queued. Default 10000 ms.
   */
  retryTimeoutMs?: number;
  /** How long a release is retried when no connection can carry it. Default 5000 ms. */
  releaseRetryMs?: number;
  /** Pause between release attempts. Default 200 ms. */
  releaseRetryIntervalMs?: number;
  /**
   * A connection with requests outstanding that receives nothing (not even the answer to a
   * `?` probe sent after a third of this) for this long is dropped, and its requests move
   * to the next connection: a frozen or unreachable node. With `auth`, 5 s more while the
   * connection's hello is unanswered and none was accepted on it yet: a refused credential is
   * answered after up to 5 s (docs/protocol.md, "Sessions and authentication"). Default
   * 2000 ms.
   */
  staleConnectionMs?: number;
  /** Default of `AcquireOptions.autoExtend` for every acquire. Default `false`. */
  autoExtend?: boolean;
  /** Opens connections; replaces TCP/WebSocket (for tests, or custom transports). */
  connect?: Connect;
  /**
   * Connections kept to each address. Default (docs/client.md): two for a single address,
   * so one dropping does not interrupt service; one each when there are several.
   */
  connectionsPerAddress?: number;
  /**
   * This client's name, shown to whoever inspects a key it holds (1–128 bytes, no spaces),
   * e.g. `billing-7@host:4242`. Default `client-` and the start of its session id.
   */
  name?: string;
  /**
   * The credential of a server that requires one (`--auth-file`): its name and secret,
   * presented in the hello of every TCP connection (docs/protocol.md, "Sessions and
   * authentication"). Use TLS (`tls://`) so the secret is not sent in the clear.
   */
  auth?: Credential;
  /**
   * Default of `AcquireOptions.session` for every acquire: locks bound to this client's
   * session, released by the server once every connection of the client has been gone for
   * its grace period (default 5 s), instead of when their lease runs out. Default `false`.
   */
  sessionLocks?: boolean;
  /** CA certificates (PEM) that `tls://` addresses are verified with. Default: the system's. */
  caCerts?: string[];
  /**
   * A bearer token for a bridge that requires one (`ws://`, `wss://`): sent as the
   * WebSocket protocol `bearer.<token>` (letters, digits and `-._~` only).
   */
  bearer?: string;
}

/**
 * Options of `LockClient.acquire`. Durations here are seconds.
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
  /**
   * Bind the lock to this client's session: the server releases it once every connection
   * of the client has been gone for its grace period (a crashed process frees it in
   * seconds, not at the end of the lease). Default: the client's `sessionLocks`.
   */
  session?: boolean;
}

/**
 * Options of `LockClient.tryAcquire`: those of an acquire, without `wait`.
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

/** Every option with its value or default. */
export interface ResolvedOptions extends
  Required<
    Omit<LockClientOptions, "name" | "auth" | "caCerts" | "bearer">
  > {
  /** The client's name, if given. */
  name: string | undefined;
  /** Its credential, if given. */
  auth: Credential | undefined;
  /** CA certificates for `tls://`, if given. */
  caCerts: string[] | undefined;
  /** A bridge's bearer token, if given. */
  bearer: string | undefined;
}

/**
 * Checks `options` and fills in the defaults for a client of `addresses` addresses.
 *
 * @throws {TypeError} For a duration that is not a positive number of milliseconds, or a
 * `connectionsPerAddress` that is not a whole number above 0.
 */
export function resolveOptions(options: LockClientOptions, addresses: number): ResolvedOptions {
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
  const perAddress = options.connectionsPerAddress ?? (addresses === 1 ? 2 : 1);
  if (!Number.isInteger(perAddress) || perAddress < 1) {
    throw new TypeError(`connectionsPerAddress must be a whole number above 0, got ${perAddress}`);
  }
  if (options.name !== undefined) {
    const problem = clientNameError(options.name);
    if (problem !== undefined) throw new TypeError(`Invalid name: ${problem}`);
  }
  if (options.bearer !== undefined && !/^[A-Za-z0-9._~-]+$/.test(options.bearer)) {
    throw new TypeError("bearer must be letters, digits and '-._~' only");
  }
  return {
    reconnectIntervalMs: options.reconnectIntervalMs ?? 3000,
    connectTimeoutMs: options.connectTimeoutMs ?? 3000,
    retryTimeoutMs: options.retryTimeoutMs ?? 10_000,
    releaseRetryMs: options.releaseRetryMs ?? 5000,
    releaseRetryIntervalMs: options.releaseRetryIntervalMs ?? 200,
    staleConnectionMs: options.staleConnectionMs ?? 2000,
    autoExtend: options.autoExtend ?? false,
    connect: options.connect ?? connectTransport,
    connectionsPerAddress: perAddress,
    name: options.name,
    auth: options.auth,
    sessionLocks: options.sessionLocks ?? false,
    caCerts: options.caCerts,
    bearer: options.bearer,
  };
}

/**
 * Checks a key before anything is sent (docs/protocol.md, "Fields").
 *
 * @throws {TypeError} For a key that is not a string or not a valid key.
 */
export function checkKey(key: string): void {
  if (typeof key === "string" && plainKey(key)) return;
  if (typeof key !== "string") throw new TypeError(`key must be a string, got ${typeof key}`);
  const problem = keyError(key);
  if (problem !== undefined) throw new TypeError(`Invalid key ${JSON.stringify(key)}: ${problem}`);
}

/**
 * Whether `key` is 1 to 250 characters of printable ASCII (no space): a valid key, known
 * without the thorough check's regular expression.
 */
function plainKey(key: string): boolean {
  if (key.length === 0 || key.length > MAX_KEY_BYTES) return false;
  for (let i = 0; i < key.length; i++) {
    const c = key.charCodeAt(i);
    if (c <= 32 || c >= 127) return false;
  }
  return true;
}

/** Seconds the protocol can carry exactly (10^12 s, about 31,700 years). */
const MAX_SECONDS = 1e12;

/**
 * A lease or wait in seconds, as whole milliseconds: exact when the number, written as the
 * decimal JavaScript prints for it, has at most three decimals (`2.007` is 2007 ms, though
 * `2.007 * 1000` is 2007.0000000000002), else rounded up (`0.0001` is 1 ms), as the server
 * reads the decimal (docs/protocol.md, "Fields"). A wait too long to write is no limit at
 * all, which the protocol spells 0.
 *
 * @throws {TypeError} For a lease that is not a positive number of seconds below 10^12, or
 * a wait that is not 0 or more.
 */
export function toMs(seconds: number, what: "lease" | "wait"): number {
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
  if (!isLease && seconds >= MAX_SECONDS) return 0;
  if (Number.isInteger(seconds)) return seconds * 1000;
  // Below 10^-6 String() switches to exponent form; such a value is a fraction of 1 ms.
  if (seconds < 1e-6) return 1;
  // The shortest decimal that reads back as this number, not the binary product: that
  // would turn many whole milliseconds into the next one (Math.ceil(2.007 * 1000) is 2008).
  return parseSeconds(String(seconds));
}

/**
 * Checks a key and a fencing token before anything is sent.
 *
 * @throws {TypeError} For an invalid key, or a token that is not a bigint from 1 to 2^64-1.
 */
export function checkGrant(key: string, token: bigint): void {
  checkKey(key);
  if (typeof token !== "bigint" || token < 1n || token > MAX_TOKEN) {
    throw new TypeError(`token must be a bigint from 1 to ${MAX_TOKEN}, got ${String(token)}`);
  }
}
