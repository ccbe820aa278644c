/**
 * The lockd wire protocol, version 1 (SPEC §2): parsing and formatting of request and reply
 * lines. Shared by the client, the WebSocket bridge and the server, so it does no I/O and
 * touches no runtime-specific API.
 *
 * Lines are handled here without their line ending (`\n`, or `\r\n` on input).
 *
 * @module
 */

/** Largest fencing token: 2^64 - 1 (tokens are u64, SPEC §1). */
export const MAX_TOKEN = 18446744073709551615n;

/** Longest key, in UTF-8 bytes (SPEC §2). */
export const MAX_KEY_BYTES = 250;

/** Longest line, in bytes, without its line ending (SPEC §2). */
export const MAX_LINE_BYTES = 4096;

/** Default `--max-lease` of the server, in milliseconds (86400 s, SPEC §6). */
export const DEFAULT_MAX_LEASE_MS = 86_400_000;

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

/** Status letters of a reply (SPEC §2). */
export type Status = "A" | "T" | "R" | "X" | "N" | "M" | "E";

/** A reply line, split into its parts. */
export interface Reply {
  /** The echoed op (`A`, `R`, `X`, or whatever the request carried; `-` if it had none). */
  op: string;
  /** The echoed key (`-` if the request had none). */
  key: string;
  /** The one-letter status. */
  status: Status;
  /** The fencing token of an `A` status. */
  token?: bigint;
  /** The address of an `M` status or the message of an `E` status. */
  text?: string;
}

const SECONDS = /^[0-9]+(?:\.[0-9]+)?$/;
const TOKEN = /^[1-9][0-9]{0,19}$/;
// Whitespace (Unicode-aware) or a control character (C0, DEL, C1).
const BAD_KEY_CHAR = /[\s\p{Cc}]/u;

function echo(field: string | undefined): string {
  return field === undefined || field === "" ? "-" : field;
}

function fail(op: string | undefined, key: string | undefined, message: string): RequestError {
  return { kind: "E", op: echo(op), key: echo(key), message };
}

/**
 * Number of bytes of `text` in UTF-8, without allocating.
 *
 * @example Counting bytes
 * ```ts
 * import { utf8Length } from "./codec.ts";
 * utf8Length("é"); // 2
 * ```
 */
export function utf8Length(text: string): number {
  let bytes = text.length;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) continue;
    if (c < 0x800) bytes += 1;
    else if (c < 0xd800 || c > 0xdfff) bytes += 2;
    else {
      // A surrogate pair (2 units) is 4 bytes; a lone surrogate is sent as U+FFFD (3 bytes).
      bytes += 2;
      const d = text.charCodeAt(i + 1);
      if (c <= 0xdbff && d >= 0xdc00 && d <= 0xdfff) i++;
    }
  }
  return bytes;
}

/**
 * Why `key` is not a valid key (SPEC §2: 1–250 bytes of UTF-8, no whitespace or control
 * characters), or `undefined` when it is valid.
 *
 * @example Checking a key
 * ```ts
 * import { keyError } from "./codec.ts";
 * keyError("orders:17"); // undefined
 * keyError("a\tb"); // "key must not contain whitespace or control characters"
 * ```
 */
export function keyError(key: string): string | undefined {
  if (key.length === 0) return "missing key";
  if (
    key.length > MAX_KEY_BYTES ||
    (key.length * 3 > MAX_KEY_BYTES && utf8Length(key) > MAX_KEY_BYTES)
  ) {
    return `key must be at most ${MAX_KEY_BYTES} bytes`;
  }
  if (BAD_KEY_CHAR.test(key)) return "key must not contain whitespace or control characters";
  if (!key.isWellFormed()) return "key must be valid Unicode (no lone surrogates)";
  return undefined;
}

/**
 * Parses decimal seconds (`[0-9]+(\.[0-9]+)?`) into whole milliseconds, rounding up.
 * Returns `NaN` for text of any other form, and `Infinity` for 10^12 seconds (about 31,700
 * years) or more, which cannot be counted in milliseconds exactly.
 *
 * @example Seconds to milliseconds
 * ```ts
 * import { parseSeconds } from "./codec.ts";
 * parseSeconds("0.25"); // 250
 * parseSeconds("0.0001"); // 1 (rounded up)
 * parseSeconds("1e3"); // NaN
 * ```
 */
export function parseSeconds(text: string): number {
  if (!SECONDS.test(text)) return NaN;
  const dot = text.indexOf(".");
  const whole = dot < 0 ? text : text.slice(0, dot);
  const fraction = dot < 0 ? "" : text.slice(dot + 1);
  // Up to 12 digits of seconds the milliseconds stay exact in a double (below 2^53).
  const digits = whole.replace(/^0+/, "");
  if (digits.length > 12) return Infinity;
  let ms = Number(digits || "0") * 1000;
  if (fraction.length > 0) {
    ms += Number((fraction + "00").slice(0, 3));
    if (/[1-9]/.test(fraction.slice(3))) ms += 1;
  }
  return ms;
}

/**
 * Parses a fencing token: decimal, 1 to 2^64-1, no sign, no leading zeros. Returns
 * `undefined` for anything else.
 *
 * @example Parsing a token
 * ```ts
 * import { parseToken } from "./codec.ts";
 * parseToken("1042"); // 1042n
 * parseToken("01"); // undefined
 * ```
 */
export function parseToken(text: string): bigint | undefined {
  if (!TOKEN.test(text)) return undefined;
  const token = BigInt(text);
  return token <= MAX_TOKEN ? token : undefined;
}

/**
 * Milliseconds of plain decimal seconds in `text[from, to)`, rounding up: the fast path of
 * {@linkcode parseSeconds} for up to 12 integer digits. `NaN` for anything else (the caller
 * then takes the thorough path, which also explains the error).
 */
function scanSeconds(text: string, from: number, to: number): number {
  let i = from;
  let ms = 0;
  let c = 0;
  while (i < to && (c = text.charCodeAt(i)) >= 48 && c <= 57) {
    ms = ms * 10 + (c - 48);
    i++;
  }
  if (i === from || i - from > 12) return NaN;
  ms *= 1000;
  if (i === to) return ms;
  if (c !== 46) return NaN; // "."
  const start = ++i;
  let fraction = 0;
  let scale = 100;
  let rest = false;
  while (i < to && (c = text.charCodeAt(i)) >= 48 && c <= 57) {
    if (scale >= 1) fraction += (c - 48) * scale;
    else if (c !== 48) rest = true;
    scale /= 10;
    i++;
  }
  if (i === start || i !== to) return NaN;
  return ms + fraction + (rest ? 1 : 0);
}

/** A token of 1 to 19 digits in `text[from, to)` (always below 2^64), else `undefined`. */
function scanToken(text: string, from: number, to: number): bigint | undefined {
  if (to - from > 19 || to === from || text.charCodeAt(from) === 48) return undefined;
  for (let i = from; i < to; i++) {
    const c = text.charCodeAt(i);
    if (c < 48 || c > 57) return undefined;
  }
  return BigInt(text.slice(from, to));
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
 * Parses one request line (without its line ending) per SPEC §2. Never throws: a line that
 * is not a valid request yields a {@linkcode RequestError} with the fields to echo and the
 * reason. Empty lines are the caller's to skip.
 *
 * @param line The line, without `\n` or `\r\n`.
 * @param options Limits, such as the server's longest lease.
 * @returns The request, or the error to answer with `E`.
 *
 * @example Parsing requests
 * ```ts
 * import { parseRequest } from "./codec.ts";
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
  const expected = op === "A" ? 4 : op === "R" ? 3 : 4;
  const usage = op === "A"
    ? "usage: A <key> <lease> <wait>"
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
    return { op, key, leaseMs, waitMs: Number.isFinite(waitMs) ? waitMs : 0 };
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
 * Formats milliseconds as the shortest decimal seconds that parse back to the same
 * milliseconds (`250` → `"0.25"`).
 *
 * @throws {RangeError} For a negative or non-finite number.
 *
 * @example Milliseconds to seconds
 * ```ts
 * import { formatSeconds } from "./codec.ts";
 * formatSeconds(30000); // "30"
 * formatSeconds(1); // "0.001"
 * ```
 */
export function formatSeconds(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) throw new RangeError(`Cannot send ${ms} ms as seconds`);
  const whole = Math.floor(ms / 1000);
  const rest = Math.ceil(ms - whole * 1000);
  // BigInt prints every digit: String() would switch to exponent form from 10^21.
  if (rest === 0) return BigInt(whole).toString();
  if (rest === 1000) return (BigInt(whole) + 1n).toString();
  return `${BigInt(whole)}.${String(rest).padStart(3, "0").replace(/0+$/, "")}`;
}

/**
 * Formats a request line (without line ending). Seconds are given in milliseconds and
 * written rounded up to whole milliseconds.
 *
 * @example Formatting requests
 * ```ts
 * import { formatRequest } from "./codec.ts";
 * formatRequest({ op: "A", key: "k", leaseMs: 30000, waitMs: 500 }); // "A k 30 0.5"
 * formatRequest({ op: "R", key: "k", token: 7n }); // "R k 7"
 * ```
 */
export function formatRequest(request: Request): string {
  switch (request.op) {
    case "A":
      return `A ${request.key} ${formatSeconds(request.leaseMs)} ${formatSeconds(request.waitMs)}`;
    case "R":
      return `R ${request.key} ${request.token}`;
    case "X":
      return `X ${request.key} ${request.token} ${formatSeconds(request.leaseMs)}`;
  }
}

/**
 * Formats a reply line (without line ending): `<op> <key> <status> [<value>]`.
 *
 * @example Formatting replies
 * ```ts
 * import { formatReply } from "./codec.ts";
 * formatReply({ op: "A", key: "k", status: "A", token: 42n }); // "A k A 42"
 * formatReply({ op: "A", key: "k", status: "T" }); // "A k T"
 * ```
 */
export function formatReply(reply: Reply): string {
  const head = `${reply.op} ${reply.key} ${reply.status}`;
  if (reply.status === "A") return `${head} ${reply.token}`;
  if (reply.text !== undefined && (reply.status === "M" || reply.status === "E")) {
    return `${head} ${reply.text}`;
  }
  return head;
}

/**
 * Parses a reply line (without line ending). Returns `undefined` for a line that is not a
 * reply of SPEC §2, so a client can treat it as a protocol error.
 *
 * @example Parsing replies
 * ```ts
 * import { parseReply } from "./codec.ts";
 * parseReply("A orders:17 A 1042"); // { op: "A", key: "orders:17", status: "A", token: 1042n }
 * parseReply("A orders:17 M 10.0.0.2:7321"); // { ..., status: "M", text: "10.0.0.2:7321" }
 * ```
 */
export function parseReply(line: string): Reply | undefined {
  const first = line.indexOf(" ");
  const second = first < 0 ? -1 : line.indexOf(" ", first + 1);
  if (second < 0) return undefined;
  const op = line.slice(0, first);
  const key = line.slice(first + 1, second);
  const third = line.indexOf(" ", second + 1);
  const status = line.slice(second + 1, third < 0 ? line.length : third);
  const value = third < 0 ? undefined : line.slice(third + 1);
  if (op === "" || key === "") return undefined;
  // Which statuses answer which op (M and E answer any request, `-` only E).
  const fits = status === "E" || (status === "M" && op !== "-") ||
    (op === "A" && (status === "A" || status === "T")) ||
    (op === "R" && (status === "R" || status === "N")) ||
    (op === "X" && (status === "X" || status === "N"));
  if (!fits) return undefined;
  switch (status) {
    case "A": {
      const token = value === undefined ? undefined : parseToken(value);
      return token === undefined ? undefined : { op, key, status, token };
    }
    case "T":
    case "R":
    case "X":
    case "N":
      return value === undefined ? { op, key, status } : undefined;
    case "M":
      return value ? { op, key, status, text: value } : undefined;
    default:
      return { op, key, status: "E", text: value ?? "" };
  }
}
