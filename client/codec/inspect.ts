/**
 * Inspection lines (docs/protocol.md, "Inspection"): `I <key>` (one key, read-only),
 * `S -` (this node's status as JSON) and `L <prefix> <limit> [<after>]` (held keys, a page
 * of JSON), their replies, and the JSON shapes both sides share. Part of the codec
 * (`@lockd/client/codec`).
 *
 * @module
 */

import { formatSeconds, keyError, parseSeconds, parseToken, utf8Length } from "./fields.ts";
import type { Reply } from "./reply.ts";
import type { RequestError } from "./request.ts";
import type { KeyInfo, KeyState, LocksPage, NodeStatus } from "./inspect_shapes.ts";

/** Most keys one `L` request may ask for. */
export const MAX_LOCKS_LIMIT = 1000;

/**
 * Longest `L` or `S` reply line the server builds, in UTF-8 bytes: safely under the
 * client's 8192-byte reply limit. An `L` page stops before it would pass it (`more: true`).
 */
export const INSPECT_REPLY_BUDGET = 7500;

/** `I <key>`: read-only inspection of one key. */
export interface InspectKeyRequest {
  /** The operation. */
  op: "I";
  /** The key. */
  key: string;
}

/** `S -`: this node's status. */
export interface StatusRequest {
  /** The operation. */
  op: "S";
  /** Always `-`. */
  key: "-";
}

/** `L <prefix> <limit> [<after>]`: a page of held keys, in key order. */
export interface LocksRequest {
  /** The operation. */
  op: "L";
  /** The prefix field as sent (`-`: every key); echoed in the reply. */
  key: string;
  /** Keys must start with this; `undefined` for `-` (every key). */
  prefix: string | undefined;
  /** Most keys in the page, 1–1000. */
  limit: number;
  /** Only keys after this one (strictly), for the next page. */
  after: string | undefined;
}

/** A well-formed inspection request. */
export type InspectRequest = InspectKeyRequest | StatusRequest | LocksRequest;

const LIMIT = /^[1-9][0-9]{0,3}$/;

function fail(op: string, key: string | undefined, message: string): RequestError {
  return { kind: "E", op, key: key === undefined || key === "" ? "-" : key, message };
}

/**
 * Whether `line`'s op is an inspection op (`I`, `S` or `L`): cheap, for the server's hot path.
 *
 * @example
 * ```ts
 * import { isInspection } from "@lockd/client/codec";
 * isInspection("I orders:17"); // true
 * isInspection("A orders:17 30 0"); // false
 * ```
 */
export function isInspection(line: string): boolean {
  const c = line.charCodeAt(0);
  return (c === 73 || c === 76 || c === 83) && (line.length === 1 || line.charCodeAt(1) === 32);
}

/**
 * Parses an inspection line (its op is `I`, `S` or `L`). Never throws: a malformed line yields
 * a {@linkcode RequestError} with the fields to echo.
 *
 * @example
 * ```ts
 * import { parseInspection } from "@lockd/client/codec";
 * parseInspection("L orders: 100"); // { op: "L", key: "orders:", prefix: "orders:", limit: 100, after: undefined }
 * parseInspection("L - 0"); // { kind: "E", op: "L", key: "-", message: "limit must be ..." }
 * ```
 */
export function parseInspection(line: string): InspectRequest | RequestError {
  const fields = line.split(" ");
  const [op, key] = fields;
  const usage = op === "I"
    ? "usage: I <key>"
    : op === "S"
    ? "usage: S -"
    : "usage: L <prefix or -> <limit> [<after>]";
  if (op !== "I" && op !== "S" && op !== "L") return fail(op || "-", key, "unknown op");
  if (key === undefined || key === "") return fail(op, key, `missing key; ${usage}`);
  if (fields.some((field, i) => i > 1 && field === "")) {
    return fail(op, key, `empty field; fields are separated by single spaces; ${usage}`);
  }
  if (op === "S") {
    return key === "-" && fields.length === 2 ? { op, key } : fail(op, key, usage);
  }
  const badKey = key === "-" && op === "L" ? undefined : keyError(key);
  if (badKey !== undefined) return fail(op, key, badKey);
  if (op === "I") {
    return fields.length === 2 ? { op, key } : fail(op, key, `too many fields; ${usage}`);
  }
  if (fields.length < 3) return fail(op, key, `missing field; ${usage}`);
  if (fields.length > 4) return fail(op, key, `too many fields; ${usage}`);
  const limit = LIMIT.test(fields[2]) ? Number(fields[2]) : NaN;
  if (!(limit <= MAX_LOCKS_LIMIT)) {
    return fail(op, key, `limit must be a whole number from 1 to ${MAX_LOCKS_LIMIT}`);
  }
  const after = fields[3];
  const badAfter = after === undefined ? undefined : keyError(after);
  if (badAfter !== undefined) return fail(op, key, `after: ${badAfter}`);
  return { op, key, prefix: key === "-" ? undefined : key, limit, after };
}

/**
 * `I <key>`.
 *
 * @example
 * ```ts
 * import { inspectLine } from "@lockd/client/codec";
 * inspectLine("orders:17"); // "I orders:17"
 * ```
 */
export function inspectLine(key: string): string {
  return `I ${key}`;
}

/**
 * `S -`.
 *
 * @example
 * ```ts
 * import { statusLine } from "@lockd/client/codec";
 * statusLine(); // "S -"
 * ```
 */
export function statusLine(): string {
  return "S -";
}

/**
 * `L <prefix> <limit> [<after>]`; an `undefined` or empty prefix is sent as `-` (every key).
 *
 * @example
 * ```ts
 * import { locksLine } from "@lockd/client/codec";
 * locksLine("orders:", 100); // "L orders: 100"
 * locksLine(undefined, 50, "orders:17"); // "L - 50 orders:17"
 * ```
 */
export function locksLine(prefix: string | undefined, limit: number, after?: string): string {
  const head = `L ${prefix || "-"} ${limit}`;
  return after === undefined ? head : `${head} ${after}`;
}

/**
 * `I <key> I <token> <lease-left> <waiters> <holder>`: `key` is held. The lease left is in
 * milliseconds, written as seconds rounded up; a holder without a name is `-`.
 *
 * @example
 * ```ts
 * import { heldReply } from "@lockd/client/codec";
 * heldReply("k", 42n, 29_500, 2, "billing-7"); // "I k I 42 29.5 2 billing-7"
 * ```
 */
export function heldReply(
  key: string,
  token: bigint,
  leaseLeftMs: number,
  waiters: number,
  holder: string | undefined,
): string {
  return `I ${key} I ${token} ${formatSeconds(Math.max(0, leaseLeftMs))} ${waiters} ${
    holder || "-"
  }`;
}

/**
 * `I <key> F`: `key` is free.
 *
 * @example
 * ```ts
 * import { freeReply } from "@lockd/client/codec";
 * freeReply("k"); // "I k F"
 * ```
 */
export function freeReply(key: string): string {
  return `I ${key} F`;
}

/**
 * `S - S <json>`. Should the line pass {@linkcode INSPECT_REPLY_BUDGET} bytes, the oldest
 * `grantsPerSecond` entries are left out until it fits.
 *
 * @example
 * ```ts ignore
 * import { statusReply } from "@lockd/client/codec";
 * statusReply(status); // 'S - S {"address":"10.0.0.1:7321",...}'
 * ```
 */
export function statusReply(status: NodeStatus): string {
  let line = `S - S ${JSON.stringify(status)}`;
  let rates = status.grantsPerSecond;
  for (;;) {
    const excess = utf8Length(line) - INSPECT_REPLY_BUDGET;
    if (excess <= 0 || rates.length === 0) return line;
    // Drop about as many of the oldest entries as make up the excess.
    const perEntry = JSON.stringify(rates).length / rates.length;
    rates = rates.slice(Math.max(1, Math.ceil(excess / perEntry)));
    line = `S - S ${JSON.stringify({ ...status, grantsPerSecond: rates })}`;
  }
}

/**
 * `L <prefix> L <json>`: the page of `locks` (in key order) with `more`, stopping early (and
 * then with `more: true`) before the line would pass `budget` bytes.
 *
 * @param prefixField The request's prefix field, echoed (`-` for every key).
 * @param budget Longest line in UTF-8 bytes. Default {@linkcode INSPECT_REPLY_BUDGET}.
 *
 * @example
 * ```ts
 * import { locksReply } from "@lockd/client/codec";
 * locksReply("-", [{ key: "k", token: "7", holder: null, leaseLeftSeconds: 3, waiters: 0 }], false);
 * // 'L - L {"locks":[{"key":"k","token":"7","holder":null,"leaseLeftSeconds":3,"waiters":0}],"more":false}'
 * ```
 */
export function locksReply(
  prefixField: string,
  locks: readonly KeyInfo[],
  more: boolean,
  budget: number = INSPECT_REPLY_BUDGET,
): string {
  const head = `L ${prefixField} L {"locks":[`;
  // The tail is at most `],"more":false}`.
  let used = utf8Length(head) + 15;
  const parts: string[] = [];
  for (const info of locks) {
    const part = JSON.stringify(info);
    const cost = utf8Length(part) + (parts.length > 0 ? 1 : 0);
    if (used + cost > budget) {
      more = true;
      break;
    }
    used += cost;
    parts.push(part);
  }
  return `${head}${parts.join(",")}],"more":${more}}`;
}

/**
 * The {@linkcode KeyState} of an `I` reply (status `I` or `F`), or `undefined` for any other
 * reply or a malformed one.
 *
 * @example
 * ```ts
 * import { keyStateOf, parseReply } from "@lockd/client/codec";
 * keyStateOf(parseReply("I k I 42 29.5 2 billing-7")!);
 * // { key: "k", held: true, token: 42n, leaseLeft: 29.5, waiters: 2, holder: "billing-7" }
 * ```
 */
export function keyStateOf(reply: Reply): KeyState | undefined {
  if (reply.op !== "I") return undefined;
  if (reply.status === "F") return { key: reply.key, held: false, waiters: 0 };
  if (reply.status !== "I" || reply.text === undefined) return undefined;
  const f = reply.text.split(" ");
  if (f.length !== 4) return undefined;
  const token = parseToken(f[0]);
  const leaseMs = parseSeconds(f[1]);
  if (token === undefined || !Number.isFinite(leaseMs) || !/^(0|[1-9][0-9]*)$/.test(f[2])) {
    return undefined;
  }
  const state: KeyState = {
    key: reply.key,
    held: true,
    token,
    leaseLeft: leaseMs / 1000,
    waiters: Number(f[2]),
  };
  if (f[3] !== "-") state.holder = f[3];
  return state;
}

/**
 * The {@linkcode KeyState} of one `L` page entry, or `undefined` if it is malformed.
 *
 * @example
 * ```ts
 * import { keyStateOfInfo } from "@lockd/client/codec";
 * keyStateOfInfo({ key: "k", token: "7", holder: null, leaseLeftSeconds: 3, waiters: 0 });
 * // { key: "k", held: true, token: 7n, leaseLeft: 3, waiters: 0 }
 * ```
 */
export function keyStateOfInfo(info: unknown): KeyState | undefined {
  if (typeof info !== "object" || info === null) return undefined;
  const { key, token, holder, leaseLeftSeconds, waiters } = info as Record<string, unknown>;
  if (typeof key !== "string" || typeof token !== "string") return undefined;
  const parsed = parseToken(token);
  if (
    parsed === undefined || (holder !== null && typeof holder !== "string") ||
    typeof leaseLeftSeconds !== "number" || !(leaseLeftSeconds >= 0) ||
    !Number.isInteger(waiters) || (waiters as number) < 0
  ) {
    return undefined;
  }
  const state: KeyState = {
    key,
    held: true,
    token: parsed,
    leaseLeft: leaseLeftSeconds,
    waiters: waiters as number,
  };
  if (typeof holder === "string") state.holder = holder;
  return state;
}

/**
 * The page of an `L` reply (status `L`), or `undefined` if it is not one or is malformed.
 *
 * @example
 * ```ts
 * import { locksPageOf, parseReply } from "@lockd/client/codec";
 * locksPageOf(parseReply('L - L {"locks":[],"more":false}')!); // { locks: [], more: false }
 * ```
 */
export function locksPageOf(reply: Reply): LocksPage | undefined {
  if (reply.op !== "L" || reply.status !== "L" || reply.text === undefined) return undefined;
  const page = parseJson(reply.text) as Partial<LocksPage> | undefined;
  if (!Array.isArray(page?.locks) || typeof page.more !== "boolean") return undefined;
  return { locks: page.locks, more: page.more };
}

/**
 * The status of an `S` reply (status `S`), or `undefined` if it is not one or is malformed
 * (checked: a JSON object with a string `address`, `role` and `version`).
 *
 * @example
 * ```ts ignore
 * import { nodeStatusOf, parseReply } from "@lockd/client/codec";
 * nodeStatusOf(parseReply(line)!)?.role; // "active"
 * ```
 */
export function nodeStatusOf(reply: Reply): NodeStatus | undefined {
  if (reply.op !== "S" || reply.status !== "S" || reply.text === undefined) return undefined;
  const status = parseJson(reply.text) as Partial<NodeStatus> | undefined;
  if (
    typeof status?.address !== "string" || typeof status.role !== "string" ||
    typeof status.version !== "string"
  ) {
    return undefined;
  }
  return status as NodeStatus;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
