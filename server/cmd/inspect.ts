/**
 * `lockd status` and `lockd locks` (docs/cli.md): every node's status, asked of each node
 * directly, and the held keys, as tables or JSON; the exit status says how many nodes
 * answered and whether more than one is active (`statusExit`, pure).
 *
 * @module
 */

import type { NodeStatusResult } from "../../client/inspect.ts";
import type { Connection } from "./args.ts";
import { credentialHint, EXIT, isRefusal } from "./exit.ts";
import { locksJson, locksTable, statusJson, statusTable } from "./format.ts";
import type { LocksArgs, StatusArgs } from "./parse.ts";
import { type Output, withClient } from "./scripts.ts";

/** The nodes that answered as active: more than one is a split brain (docs/cluster.md). */
export function activesOf(results: NodeStatusResult[]): string[] {
  return results.filter((r) => r.status?.role === "active").map((r) => r.address);
}

/**
 * The exit status of `lockd status`: 0 when every node answered and at most one is active,
 * 1 when some did not answer or more than one is active, 69 when none answered (77 when
 * every one refused the credential).
 */
export function statusExit(results: NodeStatusResult[]): number {
  const failed = results.filter((r) => r.status === undefined);
  if (failed.length === 0) return activesOf(results).length > 1 ? EXIT.failure : EXIT.ok;
  if (failed.length < results.length) return EXIT.failure;
  return failed.every((r) => isRefusal(r.error ?? "")) ? EXIT.noPerm : EXIT.unavailable;
}

/** `lockd status [--json]`. */
export function statusCommand(
  args: StatusArgs & { connection: Connection },
  io: Output,
): Promise<number> {
  return withClient(args.connection, "status", io, async (client) => {
    const results = await client.status();
    for (const r of results) if (r.error !== undefined) io.err(`${r.address}: ${r.error}`);
    const code = statusExit(results);
    const actives = activesOf(results);
    if (actives.length > 1) {
      io.err(`${actives.length} nodes are active (${actives.join(", ")}): a split brain`);
    }
    const hint = credentialHint(code, args.connection.auth !== undefined);
    if (hint !== "") io.err(hint.trim().replace(/^\((.*)\)$/, "$1"));
    if (args.json) io.out(statusJson(results));
    else if (code === EXIT.ok || code === EXIT.failure) io.out(statusTable(results));
    return code;
  });
}

/** `lockd locks [--prefix P] [--limit N] [--json]`. */
export function locksCommand(
  args: LocksArgs & { connection: Connection },
  io: Output,
): Promise<number> {
  return withClient(args.connection, "locks", io, async (client) => {
    // One more than asked for tells whether the list stops short.
    const found = await client.locks({ prefix: args.prefix, limit: args.limit + 1 });
    const locks = found.slice(0, args.limit);
    io.out(args.json ? locksJson(locks) : locksTable(locks));
    if (found.length > args.limit) {
      io.err(`more keys are held: these are the first ${args.limit} (raise --limit for more)`);
    }
    return EXIT.ok;
  });
}
