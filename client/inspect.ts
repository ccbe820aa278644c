/**
 * The client's inspection requests (docs/client.md, "Inspection"; docs/protocol.md,
 * "Inspection"): one key (`I`), held keys page by page (`L`), and the status of every node
 * the client was given (`S`, asked of each node directly). Read-only: nothing here takes,
 * extends or releases a lock.
 *
 * @module
 */

import {
  inspectLine,
  keyError,
  type KeyState,
  keyStateOf,
  keyStateOfInfo,
  locksLine,
  locksPageOf,
  MAX_KEY_BYTES,
  MAX_LOCKS_LIMIT,
  type NodeStatus,
  nodeStatusOf,
  type Reply,
  statusLine,
} from "./codec.ts";
import { type Address, addressText } from "./address.ts";
import { LockError } from "./errors.ts";
import { unexpected } from "./requests.ts";
import type { Router } from "./router.ts";

/**
 * Options of `LockClient.locks`.
 *
 * @example The first 50 held keys under `orders:`
 * ```ts
 * import { LockClient, type LocksOptions } from "@lockd/client";
 * const client = new LockClient("127.0.0.1:7321");
 * const options: LocksOptions = { prefix: "orders:", limit: 50 };
 * for (const lock of await client.locks(options)) console.log(lock.key, lock.token);
 * await client.close();
 * ```
 */
export interface LocksOptions {
  /**
   * Only keys starting with this. Default (or `""`): every key, or with authentication every
   * key under the credential's prefix. `"-"` lists the keys starting with `-` (the protocol
   * spells "every key" `L -`, so the client asks for every key from `-` on and stops at the
   * first that does not start with it).
   */
  prefix?: string;
  /** Most keys returned, a whole number above 0. Default 1000. */
  limit?: number;
}

/**
 * What one node answered to `LockClient.status`: its status, or why there is none.
 *
 * @example Print each node's role
 * ```ts
 * import { LockClient, type NodeStatusResult } from "@lockd/client";
 * const client = new LockClient(["10.0.0.1:7321", "10.0.0.2:7321"]);
 * const results: NodeStatusResult[] = await client.status();
 * for (const r of results) console.log(r.address, r.status?.role ?? r.error);
 * await client.close();
 * ```
 */
export interface NodeStatusResult {
  /**
   * The node's address, as the client was given it, in canonical form: `host:port`,
   * `tls://host:port` or a URL.
   */
  address: string;
  /** Its status, when it answered. */
  status?: NodeStatus;
  /** Why it did not (unreachable, refused, an old server), when it did not. */
  error?: string;
}

/** The key state of `reply` to `I`, or the error it means. */
function keyStateFrom(reply: Reply): KeyState {
  if (reply.status !== "I" && reply.status !== "F") throw unexpected(reply);
  const state = keyStateOf(reply);
  if (state === undefined) throw new LockError(`Malformed reply to I "${reply.key}"`);
  return state;
}

/** `I <key>` through the router: what holds `key` now. */
export async function inspectKey(router: Router, key: string): Promise<KeyState> {
  return keyStateFrom(await router.exchange("I", key, () => inspectLine(key)));
}

/**
 * Checks the options of {@linkcode listLocks}.
 *
 * @throws {TypeError} For a prefix that is not the start of a valid key, or a limit that is
 * not a whole number above 0.
 */
export function locksOptions(options: LocksOptions): { prefix: string | undefined; limit: number } {
  const prefix = options.prefix || undefined;
  if (prefix !== undefined) {
    const problem = typeof prefix === "string" ? keyError(prefix) : "it is not a string";
    if (problem !== undefined) {
      throw new TypeError(`Invalid prefix ${JSON.stringify(prefix)}: ${problem}`);
    }
  }
  const limit = options.limit ?? MAX_LOCKS_LIMIT;
  if (!Number.isInteger(limit) || limit < 1) {
    throw new TypeError(`limit must be a whole number above 0, got ${limit}`);
  }
  return { prefix, limit };
}

/**
 * The greatest key that sorts before `-` (UTF-16 code units): `,` and then U+FFFF, the
 * greatest code unit a key may hold, as often as 250 bytes allow. No key lies between it
 * and `-`, so listing after it starts at `-`.
 */
const LAST_KEY_BEFORE_DASH = "," + "\uffff".repeat(Math.floor((MAX_KEY_BYTES - 1) / 3));

/** Held keys (`L`), page by page with `after`, until there are no more or `limit` is reached. */
export async function listLocks(
  router: Router,
  { prefix, limit }: { prefix: string | undefined; limit: number },
): Promise<KeyState[]> {
  const field = prefix ?? "-";
  // `L -` is every key: a prefix of exactly "-" cannot be written. Ask for every key from
  // "-" on instead, and stop at the first that no longer starts with "-" (keys are in order).
  const dash = prefix === "-";
  const sent = dash ? undefined : prefix;
  const out: KeyState[] = [];
  let after: string | undefined = dash ? LAST_KEY_BEFORE_DASH : undefined;
  for (;;) {
    const want = Math.min(MAX_LOCKS_LIMIT, limit - out.length);
    const reply = await router.exchange("L", field, () => locksLine(sent, want, after));
    if (reply.status !== "L") throw unexpected(reply);
    const page = locksPageOf(reply);
    if (page === undefined) throw new LockError(`Malformed reply to L "${field}"`);
    for (const info of page.locks.slice(0, want)) {
      const state = keyStateOfInfo(info);
      if (state === undefined) throw new LockError(`Malformed entry in a reply to L "${field}"`);
      if (dash && !state.key.startsWith("-")) return out;
      out.push(state);
    }
    if (!page.more || out.length >= limit || page.locks.length === 0) return out;
    after = out[out.length - 1].key;
  }
}

/** `S -` asked of each of `addresses` directly (no redirect), at once. Never rejects. */
export function nodeStatuses(
  router: Router,
  addresses: readonly Address[],
): Promise<NodeStatusResult[]> {
  return Promise.all(addresses.map(async (to): Promise<NodeStatusResult> => {
    const address = addressText(to);
    try {
      const reply = await router.direct(to.key, "S", "-", statusLine());
      const status = nodeStatusOf(reply);
      if (status !== undefined) return { address, status };
      if (reply.status === "E") return { address, error: reply.text ?? "refused" };
      return { address, error: `unexpected reply ${reply.status}` };
    } catch (error) {
      return { address, error: error instanceof Error ? error.message : String(error) };
    }
  }));
}
