/**
 * `lockd status` and `lockd locks` (docs/cli.md): every node's status, asked of each node
 * directly, and the held keys, as tables or JSON; the exit status says how many nodes
 * answered (`statusExit`, pure).
 *
 * @module
 */

import type { NodeStatusResult } from "../../client/inspect.ts";
import type { Connection } from "./args.ts";
import { credentialHint, EXIT, isRefusal } from "./exit.ts";
import { locksJson, locksTable, statusJson, statusTable } from "./format.ts";
import type { LocksArgs, StatusArgs } from "./parse.ts";
import { type Output, withClient } from "./scripts.ts";

/**
 * The exit status of `lockd status`: 0 when every node answered, 1 when some did not, 69
 * when none did (77 when every one refused the credential).
 */
export function statusExit(results: NodeStatusResult[]): number {
  const failed = results.filter((r) => r.status === undefined);
  if (failed.length === 0) return EXIT.ok;
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
    const locks = await client.locks({ prefix: args.prefix, limit: args.limit });
    io.out(args.json ? locksJson(locks) : locksTable(locks));
    return EXIT.ok;
  });
}
