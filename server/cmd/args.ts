/**
 * The command line shared by the `lockd` subcommands (docs/cli.md, "Connection options"):
 * flags and positionals through `node:util` parseArgs, with one-line errors; `--servers`,
 * `--ca-file`, the credential and `--name` with their `LOCKD_*` variables; seconds, tokens
 * and keys. Pure: arguments and an environment in, values or a {@linkcode CommandError} out.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { parseAddress } from "../../client/address.ts";
import { clientNameError, keyError, parseSeconds, parseToken } from "../../client/codec.ts";
import { CommandError } from "./exit.ts";

/** An environment lookup, e.g. `(name) => Deno.env.get(name)`. */
export type Env = (name: string) => string | undefined;

/** The default server when neither `--servers` nor `LOCKD_SERVERS` is given. */
export const DEFAULT_SERVER = "127.0.0.1:7321";

/**
 * Where a secret comes from: a file, or a variable (`LOCKD_AUTH_SECRET` for a credential's,
 * `LOCKD_BEARER` for a bridge's token).
 */
export type SecretSource = { file: string } | { value: string };

/** How a subcommand reaches lockd: the connection options after flags and environment. */
export interface Connection {
  /** The addresses, as `LockClient` takes them (`host:port`, `tls://...`, `ws://...`). */
  servers: string[];
  /** A PEM file of CA certificates for `tls://` addresses. */
  caFile: string | undefined;
  /** The credential's name and where its secret is, when one is given. */
  auth: { name: string; secret: SecretSource } | undefined;
  /** Where the bearer token a bridge requires is (`ws://`, `wss://` servers), when given. */
  bearer: SecretSource | undefined;
  /** The client name shown by inspection (`undefined`: the default, `lockd-<cmd>@host:pid`). */
  name: string | undefined;
}

/** One flag of a subcommand: a value (`string`) or a switch (`boolean`). */
export interface FlagSpec {
  /** `string` takes a value, `boolean` does not. */
  type: "string" | "boolean";
  /** A one-letter alias. */
  short?: string;
}

/** The flags every subcommand takes. */
export const CONNECTION_FLAGS: Record<string, FlagSpec> = {
  help: { type: "boolean", short: "h" },
  servers: { type: "string" },
  "ca-file": { type: "string" },
  "auth-name": { type: "string" },
  "auth-secret-file": { type: "string" },
  "bearer-file": { type: "string" },
  name: { type: "string" },
};

/** Flags people may try for a secret, answered with where a secret goes instead. */
const SECRET_FLAGS = /^--(secret|auth-secret|password|bearer|token|bridge-token)(=|$)/;

/** What {@linkcode parseFlags} found. */
export interface Parsed {
  /** Flag values by name (`undefined`: not given). */
  values: Record<string, string | boolean | undefined>;
  /** The positional arguments, in order. */
  positionals: string[];
}

/**
 * Parses `args` with `flags` (strict: an unknown flag is an error), keeping positionals.
 *
 * @throws {CommandError} On an unknown flag, a missing value, or an empty value.
 */
export function parseFlags(args: string[], flags: Record<string, FlagSpec>): Parsed {
  const secret = args.find((arg) => SECRET_FLAGS.test(arg));
  if (secret !== undefined) {
    throw new CommandError(
      `${secret.split("=")[0]}: a secret is never taken from the command line; ` +
        "use --auth-secret-file FILE or LOCKD_AUTH_SECRET (a bridge's token: --bearer-file " +
        "FILE or LOCKD_BEARER)",
    );
  }
  let parsed;
  try {
    parsed = parseArgs({ args, options: flags, strict: true, allowPositionals: true });
  } catch (error) {
    const message = error instanceof Error ? error.message.split("\n")[0] : String(error);
    // parseArgs takes "--lease -1" for a flag without its value: say what to write.
    const ambiguous = /^Option '(--[a-z-]+)[^']*' argument is ambiguous/.exec(message);
    if (ambiguous !== null) {
      const flag = ambiguous[1];
      throw new CommandError(`${flag} got a value starting with "-": write it as ${flag}=VALUE`);
    }
    throw new CommandError(message.replace(/\. To specify .*$/, "").replace(/\.$/, ""));
  }
  for (const [name, value] of Object.entries(parsed.values)) {
    if (value === "") throw new CommandError(`--${name} needs a value`);
  }
  return { values: parsed.values, positionals: parsed.positionals };
}

/**
 * The connection options from parsed flags and the environment: `--servers` (then
 * `LOCKD_SERVERS`, then {@linkcode DEFAULT_SERVER}), `--ca-file` (`LOCKD_CA_FILE`),
 * `--auth-name` (`LOCKD_AUTH_NAME`) with `--auth-secret-file` (`LOCKD_AUTH_SECRET_FILE`, or
 * the secret itself in `LOCKD_AUTH_SECRET`), `--bearer-file` (`LOCKD_BEARER_FILE`, or the
 * token itself in `LOCKD_BEARER`), and `--name`.
 *
 * @throws {CommandError} For a bad address or client name, or half a credential.
 */
export function connectionOf(values: Parsed["values"], env: Env): Connection {
  const flag = (name: string) => values[name] as string | undefined;
  const variable = (name: string) => env(name) || undefined; // empty counts as unset
  const serversText = flag("servers") ?? variable("LOCKD_SERVERS") ?? DEFAULT_SERVER;
  const from = flag("servers") !== undefined
    ? "--servers"
    : variable("LOCKD_SERVERS") !== undefined
    ? "LOCKD_SERVERS"
    : "the default";
  const servers = serversText.split(",").map((s) => s.trim()).filter((s) => s !== "");
  if (servers.length === 0) throw new CommandError(`${from} names no server`);
  for (const server of servers) {
    try {
      parseAddress(server);
    } catch {
      throw new CommandError(
        `${from}: "${server}" is not an address (host:port, tls://host:port, ws:// or wss://)`,
      );
    }
  }
  const authName = flag("auth-name") ?? variable("LOCKD_AUTH_NAME");
  // A file wins over the secret itself in the environment.
  const sourceOf = (file: string | undefined, value: string | undefined) =>
    file !== undefined ? { file } : value !== undefined ? { value } : undefined;
  const secret: SecretSource | undefined = sourceOf(
    flag("auth-secret-file") ?? variable("LOCKD_AUTH_SECRET_FILE"),
    variable("LOCKD_AUTH_SECRET"),
  );
  if (authName === undefined && secret !== undefined) {
    throw new CommandError("a secret needs its credential's name: --auth-name or LOCKD_AUTH_NAME");
  }
  if (authName !== undefined && secret === undefined) {
    throw new CommandError(
      "--auth-name needs a secret: --auth-secret-file FILE, or LOCKD_AUTH_SECRET",
    );
  }
  const bearer: SecretSource | undefined = sourceOf(
    flag("bearer-file") ?? variable("LOCKD_BEARER_FILE"),
    variable("LOCKD_BEARER"),
  );
  const name = flag("name");
  if (name !== undefined) {
    const problem = clientNameError(name);
    if (problem !== undefined) throw new CommandError(`--name: ${problem}`);
  }
  return {
    servers,
    caFile: flag("ca-file") ?? variable("LOCKD_CA_FILE"),
    auth: authName === undefined ? undefined : { name: authName, secret: secret! },
    bearer,
    name,
  };
}

/**
 * The default client name of subcommand `command`: `lockd-<command>@<hostname>:<pid>`,
 * shortened to the 128 bytes a name may have, with anything a name may not hold replaced.
 */
export function defaultClientName(command: string, hostname: string, pid: number): string {
  const host = hostname.replace(/[^\x21-\x7e]/g, "_").slice(0, 96) || "localhost";
  return `lockd-${command}@${host}:${pid}`;
}

/**
 * Seconds as a number, from `text` (decimal, like the protocol's: `30`, `0.25`).
 *
 * @param what The flag, for the message.
 * @param zero Whether 0 is allowed (a wait: no limit; a grace: none).
 * @throws {CommandError} For anything else, or a value past 10^12 seconds.
 */
export function secondsOf(text: string, what: string, zero: boolean): number {
  const ms = parseSeconds(text);
  if (ms === Infinity) {
    throw new CommandError(`${what} must be at most 999999999999 seconds, got "${text}"`);
  }
  if (Number.isNaN(ms) || (!zero && ms === 0)) {
    const kind = zero ? "a number of seconds (0 or more)" : "a positive number of seconds";
    throw new CommandError(`${what} must be ${kind}, got "${text}"`);
  }
  return ms / 1000;
}

/**
 * A key, checked as the protocol checks it.
 *
 * @throws {CommandError} For a key that is not valid.
 */
export function keyOf(text: string): string {
  const problem = keyError(text);
  if (problem !== undefined) throw new CommandError(`${problem}: ${JSON.stringify(text)}`);
  return text;
}

/**
 * A fencing token: decimal, 1 to 2^64-1.
 *
 * @throws {CommandError} For anything else.
 */
export function tokenOf(text: string): bigint {
  const token = parseToken(text);
  if (token === undefined) {
    throw new CommandError(`TOKEN must be a whole number from 1 to 2^64-1, got "${text}"`);
  }
  return token;
}

/**
 * Checks the number of positionals of a subcommand.
 *
 * @param names Their names, for the message (`["KEY", "TOKEN"]`).
 * @throws {CommandError} When there are fewer or more.
 */
export function expectPositionals(positionals: string[], names: string[]): void {
  if (positionals.length < names.length) {
    const missing = names.slice(positionals.length).join(" ");
    throw new CommandError(`missing ${missing}`);
  }
  if (positionals.length > names.length) {
    throw new CommandError(`unexpected argument "${positionals[names.length]}"`);
  }
}
