/**
 * Credentials (docs/security.md, "Credentials"): the auth file's format, checking a
 * presented secret in constant time, and slowing down repeated failures from one address.
 * Pure: reading and watching the file is `auth_file.ts`'s job.
 *
 * The file has one credential per line: `<name> <secret> <prefix>`, where the secret is the
 * secret itself or `sha256:<64 hex digits>` of it, and the prefix is what every key the
 * credential locks must start with (`*` for any key). Blank lines and lines starting with
 * `#` are ignored.
 *
 * @module
 */

import { createHash, timingSafeEqual } from "node:crypto";
import { keyError, MAX_REFUSAL_DELAY_MS } from "../client/codec.ts";

/** What a valid credential lets its connections do. */
export interface Grant {
  /** The credential's name (for logs; never its secret). */
  name: string;
  /** Every key must start with this; `""` for any key. */
  prefix: string;
}

/** A bad auth file: its message names the line, never a secret. */
export class AuthFileError extends Error {
  /** @param message What is wrong and where. */
  constructor(message: string) {
    super(message);
    this.name = "AuthFileError";
  }
}

interface Entry {
  grant: Grant;
  /** SHA-256 of the secret. */
  digest: Uint8Array;
}

const NAME = /^[A-Za-z0-9._@-]{1,64}$/;
const SECRET = /^[\x21-\x7e]{1,256}$/;
const HASHED = /^sha256:([0-9a-f]{64})$/;

/** The digest of the secret each grant was made for: what {@linkcode Credentials.recheck} compares. */
const ISSUED = new WeakMap<Grant, Uint8Array>();

/** An entry of `name` with `digest`, its grant remembered as issued for that digest. */
function entryOf(name: string, prefix: string, digest: Uint8Array): Entry {
  const grant = { name, prefix: prefix === "*" ? "" : prefix };
  ISSUED.set(grant, digest);
  return { grant, digest };
}

function sha256(text: string): Uint8Array {
  return createHash("sha256").update(text, "utf8").digest();
}

/** The parsed credentials of an auth file. */
export class Credentials {
  #entries: Map<string, Entry>;
  /** Compared against when the name is unknown, so timing does not tell names apart. */
  #decoy = sha256("lockd decoy credential");

  private constructor(entries: Map<string, Entry>) {
    this.#entries = entries;
  }

  /** Number of credentials. */
  get size(): number {
    return this.#entries.size;
  }

  /**
   * Parses an auth file's text.
   *
   * @throws {AuthFileError} On a malformed line (its number and what is wrong) or a name
   * given twice.
   */
  static parse(text: string): Credentials {
    const entries = new Map<string, Entry>();
    const lines = text.split("\n");
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i].replace(/\r$/, "").trim();
      if (line === "" || line.startsWith("#")) continue;
      const where = `line ${i + 1}`;
      const fields = line.split(/[ \t]+/);
      if (fields.length !== 3) {
        throw new AuthFileError(`${where}: expected <name> <secret> <prefix>`);
      }
      const [name, secret, prefix] = fields;
      if (!NAME.test(name)) {
        throw new AuthFileError(
          `${where}: a name is 1-64 letters, digits, '.', '_', '@' or '-'`,
        );
      }
      if (entries.has(name)) throw new AuthFileError(`${where}: ${name} is given twice`);
      const hashed = HASHED.exec(secret);
      // Not taken as a secret itself: reading the file would give it away.
      if (hashed === null && secret.startsWith("sha256:")) {
        throw new AuthFileError(
          `${where}: sha256: must be followed by the secret's SHA-256 in 64 lowercase hex digits`,
        );
      }
      if (hashed === null && !SECRET.test(secret)) {
        throw new AuthFileError(
          `${where}: a secret is 1-256 printable characters without spaces, or sha256:<hex>`,
        );
      }
      if (prefix !== "*" && keyError(prefix) !== undefined) {
        throw new AuthFileError(`${where}: the prefix must be * or the start of a valid key`);
      }
      const digest = hashed !== null
        ? Uint8Array.from(hashed[1].match(/../g)!, (h) => parseInt(h, 16))
        : sha256(secret);
      entries.set(name, entryOf(name, prefix, digest));
    }
    return new Credentials(entries);
  }

  /**
   * These credentials plus one more (e.g. the in-process bridge's own, made at start);
   * `name` replaces one of the file's with the same name.
   */
  with(name: string, secret: string, prefix: string): Credentials {
    const entries = new Map(this.#entries);
    entries.set(name, entryOf(name, prefix, sha256(secret)));
    return new Credentials(entries);
  }

  /**
   * Whether a credential is named `name`. For logs only (an unknown name is not quoted: it
   * may be a misplaced secret); a hello's answer must not depend on it.
   */
  has(name: string): boolean {
    return this.#entries.has(name);
  }

  /**
   * Checks a presented credential in constant time (the secret's digest is compared with
   * `timingSafeEqual`, and an unknown name costs the same as a known one).
   *
   * @returns What it may do, or `undefined` when the name or the secret is wrong.
   */
  verify(name: string, secret: string): Grant | undefined {
    const entry = this.#entries.get(name);
    const presented = sha256(secret);
    const ok = timingSafeEqual(presented, entry?.digest ?? this.#decoy);
    return ok && entry !== undefined ? entry.grant : undefined;
  }

  /**
   * What `grant` (made by an earlier {@linkcode verify}, maybe of other credentials: an auth
   * file reloaded since) may do under these credentials: the grant of the same name if its
   * secret is unchanged (its prefix may be new), or `undefined` if that credential is gone
   * or has another secret, so that a revoked or rotated credential stops working.
   */
  recheck(grant: Grant): Grant | undefined {
    const entry = this.#entries.get(grant.name);
    const issued = ISSUED.get(grant);
    if (entry === undefined || issued === undefined) return undefined;
    return timingSafeEqual(entry.digest, issued) ? entry.grant : undefined;
  }
}

/** Failures in a row from one address after which its hellos are checked one per delay. */
export const LOCKOUT_AFTER = 3;

/** Options of {@linkcode Throttle}. */
export interface ThrottleOptions {
  /** Delay after the first failure, ms (doubling with each one after). Default 100. */
  baseMs?: number;
  /**
   * Longest delay, ms. Default {@linkcode MAX_REFUSAL_DELAY_MS} (5000), the bound clients
   * wait for a refusal: a longer one would be taken for a frozen node.
   */
  maxMs?: number;
  /** A clean record after this long without failures, ms. Default 60,000. */
  forgetMs?: number;
  /** Addresses tracked at most (the oldest are forgotten first). Default 10,000. */
  maxAddresses?: number;
}

/**
 * Slows down failed authentications per source address: the answer to a failure comes
 * after a delay that doubles with each failure from that address (100 ms, 200 ms, ... up
 * to 5 s), and after three in a row its next hello is not even checked until that delay has
 * passed ({@linkcode Throttle.lockedFor}), so guessing secrets is slow on one connection or
 * many; a success or a quiet minute clears the record.
 */
export class Throttle {
  #failures = new Map<string, { count: number; last: number }>();
  #baseMs: number;
  #maxMs: number;
  #forgetMs: number;
  #max: number;

  /** @param options Delays and limits. */
  constructor(options: ThrottleOptions = {}) {
    this.#baseMs = options.baseMs ?? 100;
    this.#maxMs = options.maxMs ?? MAX_REFUSAL_DELAY_MS;
    this.#forgetMs = options.forgetMs ?? 60_000;
    this.#max = options.maxAddresses ?? 10_000;
  }

  /** Records a failure from `address` at `now`; returns how long to wait before answering (ms). */
  failed(address: string, now: number): number {
    const previous = this.#failures.get(address);
    const count = previous !== undefined && now - previous.last < this.#forgetMs
      ? previous.count + 1
      : 1;
    this.#failures.delete(address); // Re-inserted last: the map stays in age order.
    this.#failures.set(address, { count, last: now });
    if (this.#failures.size > this.#max) {
      this.#failures.delete(this.#failures.keys().next().value!);
    }
    return this.#delayOf(count);
  }

  #delayOf(count: number): number {
    return Math.min(this.#maxMs, this.#baseMs * 2 ** Math.min(count - 1, 20));
  }

  /**
   * How long `address` must wait before its next hello is checked at all, ms (0: now).
   * After {@linkcode LOCKOUT_AFTER} failures in a row, no hello from it is checked until the
   * delay of its last failure has passed, so guesses sent on many connections at once are
   * checked one per delay, not in parallel. Its record is left unchanged.
   */
  lockedFor(address: string, now: number): number {
    const record = this.#failures.get(address);
    if (record === undefined || record.count < LOCKOUT_AFTER) return 0;
    if (now - record.last >= this.#forgetMs) return 0;
    return Math.max(0, record.last + this.#delayOf(record.count) - now);
  }

  /** A success from `address`: its record is cleared. */
  succeeded(address: string): void {
    this.#failures.delete(address);
  }
}

/** The host part of `host:port` (what a throttle counts by). */
export function hostOf(remote: string): string {
  const colon = remote.lastIndexOf(":");
  return colon < 0 ? remote : remote.slice(0, colon);
}
