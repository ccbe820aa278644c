/**
 * `lockd acquire`, `lockd release` and `lockd extend` (docs/cli.md): the two halves of a lock
 * for shell scripts. `acquire` prints the token and leaves the lock held (detached, not
 * session-bound, so it outlives the process); `release` and `extend` act on it by key and
 * token from any process.
 *
 * @module
 */

import { parseAddress } from "../../client/address.ts";
import type { LockClient } from "../../mod.ts";
import type { Connection } from "./args.ts";
import { openClient } from "./connect.ts";
import { CommandError, credentialHint, EXIT, exitCodeOf, messageOf } from "./exit.ts";
import type { AcquireArgs, ExtendArgs, ReleaseArgs } from "./parse.ts";

/** Where a command writes: `out` is standard output, `err` standard error (one line each). */
export interface Output {
  /** Writes a line on standard output. */
  out(line: string): void;
  /** Writes a line of diagnostics on standard error (prefixed by the caller). */
  err(line: string): void;
}

/** Opens a client for `command`, runs `fn` with it, closes it; errors become exit statuses. */
export async function withClient(
  connection: Connection,
  command: string,
  io: Output,
  fn: (client: LockClient) => Promise<number>,
): Promise<number> {
  let client: LockClient | undefined;
  try {
    if (command in THROUGH_BRIDGE) refuseBridge(connection, command);
    client = await openClient(connection, command);
    return await fn(client);
  } catch (error) {
    const code = exitCodeOf(error);
    io.err(messageOf(error) + credentialHint(code, connection.auth !== undefined));
    return code;
  } finally {
    await client?.close();
  }
}

/**
 * Why `command` cannot go through a bridge (`ws://`, `wss://`): the bridge releases what a
 * connection took when it closes, and relays a release or an extend only for the grants of
 * that same connection (docs/security.md, "The bridge"), so a lock cannot outlive
 * the command or pass between processes there.
 */
const THROUGH_BRIDGE: Record<string, string> = {
  acquire: "its lock would be released when the command's connection closes",
  release: "it relays a release only for the grants of the same connection",
  extend: "it relays an extend only for the grants of the same connection",
};

/** Refuses (64) `command` when `connection` names a bridge address; see {@linkcode THROUGH_BRIDGE}. */
function refuseBridge(connection: Connection, command: string): void {
  // An address it cannot parse is left for the client to refuse, with its reason.
  const bridge = connection.servers.find((server) => {
    try {
      return parseAddress(server).url !== undefined;
    } catch {
      return false;
    }
  });
  if (bridge === undefined) return;
  throw new CommandError(
    `needs lockd's own addresses (host:port, tls://), not the bridge ` +
      `${JSON.stringify(bridge)}: ${THROUGH_BRIDGE[command]}; use lockd run to hold a lock ` +
      "through a bridge",
  );
}

/** `lockd acquire KEY`: prints the token; the lock stays held after the exit. */
export function acquireCommand(
  args: AcquireArgs & { connection: Connection },
  io: Output,
): Promise<number> {
  return withClient(args.connection, "acquire", io, async (client) => {
    const lock = await client.acquire(args.key, {
      lease: args.lease,
      wait: args.wait,
      session: false,
      autoExtend: false,
    });
    lock.detach(); // close() must not release it
    io.out(String(lock.token));
    return EXIT.ok;
  });
}

/** `lockd release KEY TOKEN`: 0 when released, 1 when that token did not hold the key. */
export function releaseCommand(
  args: ReleaseArgs & { connection: Connection },
  io: Output,
): Promise<number> {
  return withClient(args.connection, "release", io, async (client) => {
    if (await client.release(args.key, args.token)) return EXIT.ok;
    io.err(`${JSON.stringify(args.key)} is not held with token ${args.token}`);
    return EXIT.failure;
  });
}

/** `lockd extend KEY TOKEN S`: 0 when extended, 1 when that token does not hold the key. */
export function extendCommand(
  args: ExtendArgs & { connection: Connection },
  io: Output,
): Promise<number> {
  return withClient(args.connection, "extend", io, async (client) => {
    if (await client.extend(args.key, args.token, args.lease)) return EXIT.ok;
    io.err(`${JSON.stringify(args.key)} is not held with token ${args.token}: the lock is lost`);
    return EXIT.failure;
  });
}
