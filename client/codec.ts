/**
 * The lockd wire protocol, version 1 (docs/protocol.md): the one place where protocol text
 * is parsed or built. Requests, replies, their fields, the messages both sides spell alike
 * and what a client does with each reply. Shared by the client, the WebSocket bridge and
 * the server, so it does no I/O and touches no runtime-specific API.
 *
 * Lines are handled here without their line ending (`\n`, or `\r\n` on input).
 *
 * @example Parse a request the way a server does, and answer it
 * ```ts
 * import { grantReply, parseRequest } from "@lockd/client/codec";
 * const request = parseRequest("A orders:17 30 5");
 * if (!("kind" in request) && request.op === "A") {
 *   console.log(grantReply(request.key, 1042n)); // "A orders:17 A 1042"
 * }
 * ```
 *
 * @module
 */

export {
  DEFAULT_MAX_LEASE_MS,
  formatSeconds,
  keyError,
  MAX_KEY_BYTES,
  MAX_LINE_BYTES,
  MAX_TOKEN,
  parseSeconds,
  parseToken,
  utf8Length,
} from "./codec/fields.ts";
export {
  acquireLine,
  type AcquireRequest,
  extendLine,
  type ExtendRequest,
  formatRequest,
  invalidLineError,
  type Op,
  parseRequest,
  type ParseRequestOptions,
  releaseLine,
  type ReleaseRequest,
  type Request,
  type RequestError,
} from "./codec/request.ts";
export {
  AUTH_FAILED,
  AUTH_REQUIRED,
  CREDENTIAL_REVOKED,
  echoId,
  errorReply,
  extendReply,
  formatReply,
  grantReply,
  LINE_TOO_LONG,
  NO_ACTIVE_NODE,
  NOT_UTF8,
  OUTSIDE_PREFIX,
  parseReply,
  PROBE,
  type Refusal,
  refusalReply,
  releaseReply,
  type Reply,
  type ReplyAction,
  replyAction,
  SHUTTING_DOWN,
  type Status,
  timeoutReply,
  TOO_MANY_CONNECTIONS,
} from "./codec/reply.ts";
export {
  freeReply,
  heldReply,
  INSPECT_REPLY_BUDGET,
  type InspectKeyRequest,
  inspectLine,
  type InspectRequest,
  isInspection,
  keyStateOf,
  keyStateOfInfo,
  locksLine,
  locksPageOf,
  locksReply,
  type LocksRequest,
  MAX_LOCKS_LIMIT,
  nodeStatusOf,
  parseInspection,
  statusLine,
  statusReply,
  type StatusRequest,
} from "./codec/inspect.ts";
export {
  type KeyInfo,
  type KeyState,
  type LocksPage,
  type NodeCounts,
  type NodeRole,
  type NodeStatus,
  type PeerStatus,
  REJECTION_REASONS,
  type RejectionReason,
} from "./codec/inspect_shapes.ts";
export {
  clientNameError,
  type Credential,
  type Hello,
  HELLO_NOT_FIRST,
  HELLO_VERSION,
  helloLine,
  helloOkReply,
  isHello,
  isSessionId,
  MAX_CLIENT_NAME_BYTES,
  MAX_REFUSAL_DELAY_MS,
  parseHello,
} from "./codec/hello.ts";
