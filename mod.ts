/**
 * `@lockd/client`: talk to lockd, the lock service with fencing tokens.
 *
 * This entry exports the wire protocol (SPEC §2) as plain functions; the `LockClient`
 * class joins it in the next release.
 *
 * @example Parse a reply
 * ```ts
 * import { parseReply } from "@lockd/client";
 * const reply = parseReply("A orders:17 A 1042");
 * console.log(reply?.token); // 1042n
 * ```
 *
 * @module
 */

export * from "./client/codec.ts";
