/**
 * Request lines (docs/protocol.md, "Requests and replies"): parsing, as the server and the
 * bridge do it, and formatting, as clients do it. Part of the codec (`@lockd/client/codec`).
 *
 * @module
 */

import {
  DEFAULT_MAX_LEASE_MS,
  formatSeconds,
  keyError,
  MAX_KEY_BYTES,
  MAX_TOKEN,
  parseSeconds,
  parseToken,
  scanSeconds,
  scanToken,
} from "./fields.ts";
import { NOT_UTF8 } from "./reply.ts";

/** The three request operations: acquire, release, extend. */
export type Op = "A" | "R" | "X";

/** `A <key> <lease> <wait>`: acquire `key` for `leaseMs`, queueing at most `waitMs` (0 = no limit). */
export interface AcquireRequest {
  /** The operation. */
  op: "A";
  /** The lock's key. */
  key: string;
  /** Lease in milliseconds (the seconds on the wire, rounded up). */
  leaseMs: number;
  /** Longest time to queue, in milliseconds; 0 means no limit. */
  waitMs: number;
  /**
   * Bound to the connection's session (`s`): released when every connection of the session
   * has been gone for the server's grace period (docs/protocol.md, "Sessions").
   */
  session?: boolean;
}

/** `R <key> <token>`: release the grant of `key` that carries `token`. */
export interface ReleaseRequest {
  /** The operation. */
  op: "R";
  /** The lock's key. */
  key: string;
  /** The fencing token of the grant being released. */
  token: bigint;
}

/** `X <key> <token> <lease>`: reset the lease of the grant to `leaseMs` from now. */
export interface ExtendRequest {
  /** The operation. */
  op: "X";
  /** The lock's key. */
  key: string;
  /** The fencing token of the grant being extended. */
  token: bigint;
  /** New lease in milliseconds, counted from when the server handles the request. */
  leaseMs: number;
}

/** A well-formed request. */
export type Request = AcquireRequest | ReleaseRequest | ExtendRequest;

/**
 * A line that is not a valid request. `op` and `key` are the fields to echo in the
 * `E` reply: the line's own fields, or `-` where the field is missing.
 */
export interface RequestError {
  /** Always `"E"`: tells an error from a request. */
  kind: "E";
  /** The op field to echo, or `-`. */
  op: string;
  /** The key field to echo, or `-`. */
  key: string;
  /** Readable reason, sent after `E`. */
  message: string;
}

/** Limits applied while parsing requests. */
export interface ParseRequestOptions {
  /** Longest lease accepted, in milliseconds. Defaults to {@linkcode DEFAULT_MAX_LEASE_MS}. */
  maxLeaseMs?: number;
}

function echo(field: string | undefined): string {
  return field === undefined || field === "" ? "-" : field;
}

function fail(op: string | undefined, key: string | undefined, message: string): RequestError {
  return { kind: "E", op: echo(op), key: echo(key), message };
}

/**
 * The common case of {@linkcode parseRequest} without splitting or regular expressions:
 * an ASCII key and plain numbers. Returns `undefined` for anything else, which the thorough
 * parser then handles (and explains, if it is an error).
 */
function parseCommon(line: string, maxLeaseMs: number): Request | undefined {
  const op = line.charCodeAt(0);
  if (line.charCodeAt(1) !== 32) return undefined;
  const keyEnd = line.indexOf(" ", 2);
  if (keyEnd <= 2 || keyEnd - 2 > MAX_KEY_BYTES) return undefined;
  for (let i = 2; i < keyEnd; i++) {
    const c = line.charCodeAt(i);
    if (c <= 32 || c >= 127) return undefined; // Not printable ASCII: the thorough path.
  }
  const key = line.slice(2, keyEnd);
  if (op === 82) { // R <key> <token>
    const token = scanToken(line, keyEnd + 1, line.length);
    return token === undefined ? undefined : { op: "R", key, token };
  }
  const next = line.indexOf(" ", keyEnd + 1);
  if (next < 0) return undefined;
  if (op === 65) { // A <key> <lease> <wait>
    const leaseMs = scanSeconds(line, keyEnd + 1, next);
    const waitMs = scanSeconds(line, next + 1, line.length);
    if (!(leaseMs > 0 && leaseMs <= maxLeaseMs) || Number.isNaN(waitMs)) return undefined;
    return { op: "A", key, leaseMs, waitMs };
  }
  if (op === 88) { // X <key> <token> <lease>
    const token = scanToken(line, keyEnd + 1, next);
    const leaseMs = scanSeconds(line, next + 1, line.length);
    if (token === undefined || !(leaseMs > 0 && leaseMs <= maxLeaseMs)) return undefined;
    return { op: "X", key, token, leaseMs };
  }
  return undefined;
}

const TOKEN_RULE = `token must be a decimal integer from 1 to ${MAX_TOKEN} without leading zeros`;
const LEASE_RULE = "lease must be a positive number of seconds";
const WAIT_RULE = "wait must be a number of seconds, 0 or more";

/**
 * Parses one request line (without its line ending) per docs/protocol.md. Never throws: a line that
 * is not a valid request yields a {@linkcode RequestError} with the fields to echo and the
 * reason. Empty lines are the caller's to skip.
 *
 * @param line The line, without `\n` or `\r\n`.
 * @param options Limits, such as the server's longest lease.
 * @returns The request, or the error to answer with `E`.
 *
 * @example Parsing requests
 * ```ts
 * import { parseRequest } from "@lockd/client/codec";
 * parseRequest("A orders:17 30 5"); // { op: "A", key: "orders:17", leaseMs: 30000, waitMs: 5000 }
 * parseRequest("A orders:17 -1 5"); // { kind: "E", op: "A", key: "orders:17", message: "lease must be ..." }
 * ```
 */
export function parseRequest(line: string, options?: ParseRequestOptions): Request | RequestError {
  const maxLeaseMs = options?.maxLeaseMs ?? DEFAULT_MAX_LEASE_MS;
  const common = parseCommon(line, maxLeaseMs);
  if (common !== undefined) return common;
  const fields = line.split(" ");
  const op = fields[0];
  const key = fields[1];
  if (op === "") return fail(op, key, "missing op");
  if (op !== "A" && op !== "R" && op !== "X") return fail(op, key, "unknown op");
  if (key === undefined || key === "") return fail(op, key, "missing key");
  const badKey = keyError(key);
  if (badKey !== undefined) return fail(op, key, badKey);
  // An acquire may carry a fifth field, `s`: bound to the connection's session. Any other
  // fifth field is one too many, as in protocol v1.
  const bound = op === "A" && fields.length === 5 && fields[4] === "s";
  const expected = op === "A" ? (bound ? 5 : 4) : op === "R" ? 3 : 4;
  const usage = op === "A"
    ? "usage: A <key> <lease> <wait> [s]"
    : op === "R"
    ? "usage: R <key> <token>"
    : "usage: X <key> <token> <lease>";
  // An empty field is a doubled or trailing space: say so rather than count fields.
  for (let i = 2; i < fields.length; i++) {
    if (fields[i] === "") {
      return fail(op, key, `empty field; fields are separated by single spaces; ${usage}`);
    }
  }
  if (fields.length !== expected) {
    const problem = fields.length < expected ? "missing field" : "too many fields";
    return fail(op, key, `${problem}; ${usage}`);
  }
  if (op === "A") {
    const leaseMs = parseSeconds(fields[2]);
    if (!(leaseMs > 0)) return fail(op, key, LEASE_RULE);
    if (leaseMs > maxLeaseMs) {
      return fail(op, key, `lease must be at most ${maxLeaseMs / 1000} seconds`);
    }
    const waitMs = parseSeconds(fields[3]);
    if (Number.isNaN(waitMs)) return fail(op, key, WAIT_RULE);
    // A wait beyond 31,700 years is no limit at all, which the protocol spells 0.
    const request: AcquireRequest = {
      op,
      key,
      leaseMs,
      waitMs: Number.isFinite(waitMs) ? waitMs : 0,
    };
    if (bound) request.session = true;
    return request;
  }
  const token = parseToken(fields[2]);
  if (token === undefined) return fail(op, key, TOKEN_RULE);
  if (op === "R") return { op, key, token };
  const leaseMs = parseSeconds(fields[3]);
  if (!(leaseMs > 0)) return fail(op, key, LEASE_RULE);
  if (leaseMs > maxLeaseMs) {
    return fail(op, key, `lease must be at most ${maxLeaseMs / 1000} seconds`);
  }
  return { op, key, token, leaseMs };
}

/**
 * Formats a request line (without line ending). Seconds are given in milliseconds and
 * written rounded up to whole milliseconds.
 *
 * @example Formatting requests
 * ```ts
 * import { formatRequest } from "@lockd/client/codec";
 * formatRequest({ op: "A", key: "k", leaseMs: 30000, waitMs: 500 }); // "A k 30 0.5"
 * formatRequest({ op: "R", key: "k", token: 7n }); // "R k 7"
 * ```
 */
export function formatRequest(request: Request): string {
  switch (request.op) {
    case "A":
      return acquireLine(request.key, request.leaseMs, request.waitMs, request.session);
    case "R":
      return releaseLine(request.key, request.token);
    case "X":
      return extendLine(request.key, request.token, request.leaseMs);
  }
}

/**
 * `A <key> <lease> <wait>`: the fast builder of an acquire, milliseconds written as seconds
 * (rounded up to whole milliseconds).
 *
 * @example
 * ```ts
 * import { acquireLine } from "@lockd/client/codec";
 * acquireLine("k", 30_000, 0); // "A k 30 0"
 * ```
 */
export function acquireLine(
  key: string,
  leaseMs: number,
  waitMs: number,
  session = false,
): string {
  const line = `A ${key} ${formatSeconds(leaseMs)} ${formatSeconds(waitMs)}`;
  return session ? `${line} s` : line;
}

/**
 * `R <key> <token>`.
 *
 * @example
 * ```ts
 * import { releaseLine } from "@lockd/client/codec";
 * releaseLine("k", 7n); // "R k 7"
 * ```
 */
export function releaseLine(key: string, token: bigint): string {
  return `R ${key} ${token}`;
}

/**
 * `X <key> <token> <lease>`, the lease in milliseconds written as seconds.
 *
 * @example
 * ```ts
 * import { extendLine } from "@lockd/client/codec";
 * extendLine("k", 7n, 1500); // "X k 7 1.5"
 * ```
 */
export function extendLine(key: string, token: bigint, leaseMs: number): string {
  return `X ${key} ${token} ${formatSeconds(leaseMs)}`;
}

/**
 * The error for a line that is not valid UTF-8, given that line decoded with replacement
 * characters: it echoes the op and key where they are intact, `-` where they are missing or
 * hold a U+FFFD (docs/protocol.md, "Framing"). A hello's second field is never echoed, as in
 * every hello error: it might be a secret sent in the wrong place.
 *
 * @example
 * ```ts
 * import { invalidLineError } from "@lockd/client/codec";
 * invalidLineError("A k\uFFFD 30 0"); // { kind: "E", op: "A", key: "-", message: "line is not valid UTF-8" }
 * invalidLineError("HELLO s3cret n\uFFFD"); // { kind: "E", op: "HELLO", key: "-", ... }
 * ```
 */
export function invalidLineError(decoded: string): RequestError {
  if (decoded.endsWith("\r")) decoded = decoded.slice(0, -1);
  const [op, key] = decoded.split(" ");
  const intact = (field: string | undefined) =>
    field === undefined || field === "" || field.includes("\uFFFD") ? "-" : field;
  const echo = op === "HELLO" ? "-" : intact(key);
  return { kind: "E", op: intact(op), key: echo, message: NOT_UTF8 };
}
