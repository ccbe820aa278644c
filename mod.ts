/**
 * `@lockd/client`: locks with fencing tokens from lockd, over TCP and TLS (Deno, Node.js,
 * Bun) or through the WebSocket bridge (browsers, edge runtimes), with the connection
 * behaviour of every official client: two connections to a single node, round-robin,
 * pipelining, reconnection every 3 s, acquires that move to the next connection, releases
 * retried for 5 s, `M` redirects followed to the active node of a cluster.
 *
 * Units: `lease` and `wait` are seconds (fractions allowed); options ending in `Ms` are
 * milliseconds. Fencing tokens are `bigint`.
 *
 * @example Take a lock and protect a write with its fencing token
 * ```ts
 * import { LockClient, LockTimeoutError } from "@lockd/client";
 *
 * const client = new LockClient("127.0.0.1:7321");
 * try {
 *   await using lock = await client.acquire("orders:17", { lease: 30, wait: 5 });
 *   // Give the token to the resource: it must refuse tokens not above the last it saw.
 *   console.log(`holding ${lock.key}, token ${lock.token}`);
 * } catch (error) {
 *   if (error instanceof LockTimeoutError) console.log("someone else held it for 5 s");
 *   else throw error;
 * } finally {
 *   await client.close();
 * }
 * ```
 *
 * @module
 */

export { type AcquireOptions, LockClient, type TryAcquireOptions } from "./client/client.ts";
export type { LockClientOptions } from "./client/options.ts";
export type {
  Credential,
  KeyState,
  NodeCounts,
  NodeRole,
  NodeStatus,
  PeerStatus,
  RejectionReason,
} from "./client/codec.ts";
export type { LocksOptions, NodeStatusResult } from "./client/inspect.ts";
export type { Lock } from "./client/lock.ts";
export {
  LockAbortedError,
  LockError,
  LockLostError,
  LockRejectedError,
  LockTimeoutError,
  LockUnavailableError,
} from "./client/errors.ts";
export { type Address, DEFAULT_PORT, parseAddress } from "./client/address.ts";
export { connectTransport } from "./client/dial.ts";
export type { Connect, Transport, TransportHandlers } from "./client/transport.ts";
