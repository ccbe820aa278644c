/**
 * Reply lines (docs/protocol.md, "Requests and replies"): parsing, as clients do it, and
 * building, as the server and the bridge do it, with the messages both sides must spell
 * alike and what a client does with each reply. Part of the codec (`@lockd/client/codec`).
 *
 * @module
 */

import { parseToken } from "./fields.ts";

/**
 * Status letters of a reply (docs/protocol.md); `OK` answers a hello; `I` (held) and `F`
 * (free) answer `I`, `S` answers `S` and `L` answers `L` (docs/protocol.md, "Inspection").
 */
export type Status = "A" | "T" | "R" | "X" | "N" | "M" | "E" | "OK" | "I" | "F" | "S" | "L";

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
  /**
   * The address of an `M` status, the message of an `E` status, or what follows the status
   * of an `I`, `S` or `L` reply (see `keyStateOf`, `nodeStatusOf`, `locksPageOf`).
   */
  text?: string;
}

/** The statuses followed by a value (`text`). */
const TEXT_STATUSES: ReadonlySet<Status> = new Set(["M", "E", "I", "S", "L"]);

/**
 * Formats a reply line (without line ending): `<op> <key> <status> [<value>]`.
 *
 * @example Formatting replies
 * ```ts
 * import { formatReply } from "@lockd/client/codec";
 * formatReply({ op: "A", key: "k", status: "A", token: 42n }); // "A k A 42"
 * formatReply({ op: "A", key: "k", status: "T" }); // "A k T"
 * ```
 */
export function formatReply(reply: Reply): string {
  const head = `${reply.op} ${reply.key} ${reply.status}`;
  if (reply.status === "A") return `${head} ${reply.token}`;
  if (reply.text !== undefined && TEXT_STATUSES.has(reply.status)) {
    return `${head} ${reply.text}`;
  }
  return head;
}

/**
 * Parses a reply line (without line ending). Returns `undefined` for a line that is not a
 * reply of docs/protocol.md, so a client can treat it as a protocol error.
 *
 * @example Parsing replies
 * ```ts
 * import { parseReply } from "@lockd/client/codec";
 * parseReply("A orders:17 A 1042"); // { op: "A", key: "orders:17", status: "A", token: 1042n }
 * parseReply("A orders:17 M 10.0.0.2:7321"); // { ..., status: "M", text: "10.0.0.2:7321" }
 * ```
 */
export function parseReply(line: string): Reply | undefined {
  return parseCommonReply(line) ?? parseAnyReply(line);
}

/**
 * The common replies of {@linkcode parseReply} without slicing op and status: `A <key> A
 * <token>` (up to 15 digits), `A <key> T`, `R <key> R|N`, `X <key> X|N`. `undefined` for
 * anything else, which the thorough parser then handles.
 */
function parseCommonReply(line: string): Reply | undefined {
  const op = line.charCodeAt(0);
  if ((op !== 65 && op !== 82 && op !== 88) || line.charCodeAt(1) !== 32) return undefined;
  const keyEnd = line.indexOf(" ", 2);
  if (keyEnd <= 2) return undefined;
  const status = line.charCodeAt(keyEnd + 1);
  const end = keyEnd + 2;
  if (line.length === end) {
    if (op === 65) {
      return status === 84 ? { op: "A", key: line.slice(2, keyEnd), status: "T" } : undefined;
    }
    if (status === 78) {
      return { op: op === 82 ? "R" : "X", key: line.slice(2, keyEnd), status: "N" };
    }
    if (status !== op) return undefined;
    return op === 82
      ? { op: "R", key: line.slice(2, keyEnd), status: "R" }
      : { op: "X", key: line.slice(2, keyEnd), status: "X" };
  }
  if (op !== 65 || status !== 65 || line.charCodeAt(end) !== 32) return undefined;
  // A token of 1 to 15 digits without a leading zero is exact as a double.
  const from = end + 1;
  const digits = line.length - from;
  if (digits < 1 || digits > 15 || line.charCodeAt(from) === 48) return undefined;
  let token = 0;
  for (let i = from; i < line.length; i++) {
    const c = line.charCodeAt(i) - 48;
    if (c < 0 || c > 9) return undefined;
    token = token * 10 + c;
  }
  return { op: "A", key: line.slice(2, keyEnd), status: "A", token: BigInt(token) };
}

/** {@linkcode parseReply} for any line. */
function parseAnyReply(line: string): Reply | undefined {
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
    (op === "HELLO" && status === "OK") ||
    (op === "A" && (status === "A" || status === "T")) ||
    (op === "R" && (status === "R" || status === "N")) ||
    (op === "X" && (status === "X" || status === "N")) ||
    (op === "I" && (status === "I" || status === "F")) ||
    (op === "S" && status === "S") || (op === "L" && status === "L");
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
    case "OK":
    case "F":
      return value === undefined ? { op, key, status } : undefined;
    case "M":
    case "I":
    case "S":
    case "L":
      return value ? { op, key, status, text: value } : undefined;
    default:
      return { op, key, status: "E", text: value ?? "" };
  }
}

/** `E` message of a node that is not active and knows no live active node. */
export const NO_ACTIVE_NODE = "no active node";
/** `E` message of a node that is stopping and hands nothing over. */
export const SHUTTING_DOWN = "shutting down";
/** `E` message of a line over 4096 bytes (`- - E line too long`); the connection closes. */
export const LINE_TOO_LONG = "line too long";
/** `E` message of a connection over the server's `--max-connections`; it closes. */
export const TOO_MANY_CONNECTIONS = "too many connections";
/** `E` message of a first line that is not a hello on a server that requires one. */
export const AUTH_REQUIRED = "authentication required";
/** `E` message of a hello whose credential is wrong (which part, it does not say). */
export const AUTH_FAILED = "authentication failed";
/**
 * `E` message of a request on a connection whose credential an auth file reload removed or
 * changed; the connection closes.
 */
export const CREDENTIAL_REVOKED = "credential revoked";
/** `E` message of a request for a key outside the connection's credential prefix. */
export const OUTSIDE_PREFIX = "key outside this credential's prefix";
/** `E` message of a line that is not valid UTF-8. */
export const NOT_UTF8 = "line is not valid UTF-8";

/**
 * The liveness probe a client sends (docs/protocol.md, "Liveness probe"): a request with an
 * unknown op that every node answers at once with `? - E unknown op`, changing nothing.
 */
export const PROBE = "?";

/** What a client does with a reply: `done` (final), `redirect` (`M`: ask that node), `retry` soon. */
export type ReplyAction = "done" | "redirect" | "retry";

/**
 * What a client does with `reply` (docs/client.md, "Retries"): `M` is followed, `E no active
 * node` and `E shutting down` are retried shortly (a cluster failing over or handing off),
 * everything else is final.
 *
 * @example Classifying replies
 * ```ts
 * import { parseReply, replyAction } from "@lockd/client/codec";
 * replyAction(parseReply("A k M 10.0.0.2:7321")!); // "redirect"
 * replyAction(parseReply("A k E no active node")!); // "retry"
 * replyAction(parseReply("A k T")!); // "done"
 * ```
 */
export function replyAction(reply: Reply): ReplyAction {
  if (reply.status === "M") return "redirect";
  if (reply.status === "E" && (reply.text === NO_ACTIVE_NODE || reply.text === SHUTTING_DOWN)) {
    return "retry";
  }
  return "done";
}

/**
 * `A <key> A <token>`: the fast builder of a grant, for the server's hot path.
 *
 * @example
 * ```ts
 * import { grantReply } from "@lockd/client/codec";
 * grantReply("k", 42n); // "A k A 42"
 * ```
 */
export function grantReply(key: string, token: bigint): string {
  return `A ${key} A ${token}`;
}

/**
 * `A <key> T`: the wait ran out.
 *
 * @example
 * ```ts
 * import { timeoutReply } from "@lockd/client/codec";
 * timeoutReply("k"); // "A k T"
 * ```
 */
export function timeoutReply(key: string): string {
  return `A ${key} T`;
}

/**
 * `R <key> R` when `released`, else `R <key> N`.
 *
 * @example
 * ```ts
 * import { releaseReply } from "@lockd/client/codec";
 * releaseReply("k", false); // "R k N"
 * ```
 */
export function releaseReply(key: string, released: boolean): string {
  return released ? `R ${key} R` : `R ${key} N`;
}

/**
 * `X <key> X` when `extended`, else `X <key> N`.
 *
 * @example
 * ```ts
 * import { extendReply } from "@lockd/client/codec";
 * extendReply("k", true); // "X k X"
 * ```
 */
export function extendReply(key: string, extended: boolean): string {
  return extended ? `X ${key} X` : `X ${key} N`;
}

/**
 * `<op> <key> E <message>`: a refused request (`-` for a missing op or key).
 *
 * @example
 * ```ts
 * import { errorReply, LINE_TOO_LONG } from "@lockd/client/codec";
 * errorReply("-", "-", LINE_TOO_LONG); // "- - E line too long"
 * ```
 */
export function errorReply(op: string, key: string, message: string): string {
  return `${op} ${key} E ${message}`;
}

/**
 * A refusal that is the same for every request it answers (`M <address>` or `E <message>`),
 * given op and key: what a standby or a stopping node answers.
 */
export interface Refusal {
  /** `M` (ask the node at `text`) or `E` (rejected, `text` says why). */
  status: "M" | "E";
  /** The active node's address, or the message. */
  text: string;
}

/**
 * The reply line of `refusal` to the request (op, key).
 *
 * @example
 * ```ts
 * import { refusalReply } from "@lockd/client/codec";
 * refusalReply("A", "k", { status: "M", text: "10.0.0.2:7321" }); // "A k M 10.0.0.2:7321"
 * ```
 */
export function refusalReply(op: string, key: string, refusal: Refusal): string {
  return `${op} ${key} ${refusal.status} ${refusal.text}`;
}

/**
 * The (op, key) a reply echoes, as one string: what replies are matched to requests by
 * (docs/protocol.md, "Ordering and pipelining").
 *
 * @example
 * ```ts
 * import { echoId, parseReply } from "@lockd/client/codec";
 * const reply = parseReply("A k A 7")!;
 * echoId(reply.op, reply.key) === echoId("A", "k"); // true
 * ```
 */
export function echoId(op: string, key: string): string {
  return `${op} ${key}`;
}
