/**
 * A `LockClient` for a subcommand, from its connection options (docs/cli.md, "Connection
 * options"): reads the CA file, the credential's secret and a bridge's token, and names the
 * client.
 *
 * @module
 */

import { LockClient } from "../../mod.ts";
import { type Connection, defaultClientName, type SecretSource } from "./args.ts";
import { CommandError, EXIT } from "./exit.ts";

/**
 * Reads a file named by an option, or says which option named what could not be read. The
 * path of a secret's file is not quoted (`secret`): a secret given there by mistake would be.
 */
async function readOption(path: string, option: string, secret = false): Promise<string> {
  try {
    return await Deno.readTextFile(path);
  } catch (error) {
    const why = error instanceof Deno.errors.NotFound
      ? "no such file"
      : error instanceof Deno.errors.PermissionDenied
      ? "permission denied"
      : error instanceof Error
      ? error.message.split("\n")[0]
      : String(error);
    const what = secret ? "the file it names" : JSON.stringify(path);
    throw new CommandError(`${option}: cannot read ${what}: ${why}`, EXIT.noInput);
  }
}

/**
 * A secret from its variable, or from the first line of the file `option` named.
 *
 * @throws {CommandError} The file cannot be read (66), or the secret is empty (64).
 */
async function secretOf(source: SecretSource, option: string, variable: string): Promise<string> {
  const secret = "value" in source
    ? source.value
    : (await readOption(source.file, option, true)).split("\n")[0].trim();
  if (secret === "") {
    throw new CommandError(
      "value" in source ? `${variable} is empty` : `${option}: the file's first line is empty`,
    );
  }
  return secret;
}

/** This machine's name, or `localhost` when it cannot be read. */
function hostname(): string {
  try {
    return Deno.hostname();
  } catch {
    return "localhost";
  }
}

/**
 * Opens a client of `connection.servers` for subcommand `command` (its default name is
 * `lockd-<command>@<hostname>:<pid>`). Close it when done.
 *
 * @throws {CommandError} A file cannot be read (66), or a credential or name is not valid
 * (64; the message never holds the secret).
 */
export async function openClient(connection: Connection, command: string): Promise<LockClient> {
  const caCerts = connection.caFile === undefined
    ? undefined
    : [await readOption(connection.caFile, "--ca-file")];
  let auth: { name: string; secret: string } | undefined;
  if (connection.auth !== undefined) {
    const secret = await secretOf(
      connection.auth.secret,
      "--auth-secret-file",
      "LOCKD_AUTH_SECRET",
    );
    auth = { name: connection.auth.name, secret };
  }
  const bearer = connection.bearer === undefined
    ? undefined
    : await secretOf(connection.bearer, "--bearer-file", "LOCKD_BEARER");
  const name = connection.name ?? defaultClientName(command, hostname(), Deno.pid);
  try {
    return new LockClient(connection.servers, { name, auth, caCerts, bearer });
  } catch (error) {
    // helloLine() says what is wrong with a credential without quoting it.
    throw new CommandError(error instanceof Error ? error.message : String(error));
  }
}
