/**
 * Each subcommand's command line (docs/cli.md): `run`, `acquire`, `release`, `extend`,
 * `status` and `locks`, from arguments and an environment to what the command needs. Pure;
 * a bad command line is a {@linkcode CommandError} with exit status 64.
 *
 * @module
 */

import { keyError } from "../../client/codec.ts";
import {
  type Connection,
  CONNECTION_FLAGS,
  connectionOf,
  type Env,
  expectPositionals,
  type FlagSpec,
  keyOf,
  parseFlags,
  secondsOf,
  tokenOf,
} from "./args.ts";
import { CommandError } from "./exit.ts";

/** What a subcommand was asked: its help page, or to run with `T`. */
export type Invocation<T> = { help: true } | ({ help: false; connection: Connection } & T);

/** What `lockd run` needs. */
export interface RunArgs {
  /** The key to hold while the command runs. */
  key: string;
  /** The lease in seconds, renewed at a third of it while the command runs. */
  lease: number;
  /** The longest wait in seconds; 0: no limit. */
  wait: number;
  /** Seconds between SIGTERM and SIGKILL after a lost lock. */
  killGrace: number;
  /** The command and its arguments (never through a shell). */
  command: string[];
}

/** What `lockd acquire` needs. */
export interface AcquireArgs {
  /** The key. */
  key: string;
  /** The lease in seconds. */
  lease: number;
  /** The longest wait in seconds; 0: no limit. */
  wait: number;
}

/** What `lockd release` needs. */
export interface ReleaseArgs {
  /** The key. */
  key: string;
  /** The grant's fencing token. */
  token: bigint;
}

/** What `lockd extend` needs. */
export interface ExtendArgs extends ReleaseArgs {
  /** The new lease in seconds, from now. */
  lease: number;
}

/** What `lockd status` needs. */
export interface StatusArgs {
  /** Print the JSON array instead of the table. */
  json: boolean;
}

/** What `lockd locks` needs. */
export interface LocksArgs {
  /** Only keys starting with this (`undefined`: every key the credential may see). */
  prefix: string | undefined;
  /** Most keys listed. */
  limit: number;
  /** Print JSON instead of the table. */
  json: boolean;
}

const LEASE_WAIT: Record<string, FlagSpec> = {
  lease: { type: "string" },
  wait: { type: "string" },
};

const RUN_FLAGS: Record<string, FlagSpec> = { ...LEASE_WAIT, "kill-grace": { type: "string" } };

/** Whether `args` ask for the help page (`--help` or `-h`). */
function wantsHelp(args: string[]): boolean {
  return args.some((arg) => arg === "--help" || arg === "-h");
}

/**
 * Splits `lockd run`'s arguments into its own and the command's: the command starts after
 * `--`, or at the second positional (the first is the key), so that the command's own
 * flags are never read as lockd's.
 */
export function splitRun(args: string[]): { own: string[]; command: string[] | undefined } {
  const flags = { ...CONNECTION_FLAGS, ...RUN_FLAGS };
  const own: string[] = [];
  let key = false;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (arg === "--") return { own, command: args.slice(i + 1) };
    if (arg.startsWith("-") && arg !== "-") {
      own.push(arg);
      const name = arg.replace(/^--?/, "").split("=")[0];
      const spec = flags[name] ?? Object.values(flags).find((f) => f.short === name);
      if (spec?.type === "string" && !arg.includes("=") && i + 1 < args.length) {
        own.push(args[++i]);
      }
      continue;
    }
    if (key) return { own, command: args.slice(i) };
    own.push(arg);
    key = true;
  }
  return { own, command: undefined };
}

/**
 * `lockd run KEY [--lease S] [--wait S] [--kill-grace S] -- CMD [ARGS...]`.
 *
 * @throws {CommandError} For a bad command line.
 */
export function parseRun(args: string[], env: Env): Invocation<RunArgs> {
  const { own, command } = splitRun(args);
  if (wantsHelp(own)) return { help: true };
  const { values, positionals } = parseFlags(own, { ...CONNECTION_FLAGS, ...RUN_FLAGS });
  if (positionals.length === 0) throw new CommandError("missing KEY");
  if (command === undefined || command.length === 0) {
    throw new CommandError("missing the command to run (lockd run KEY [OPTIONS] -- CMD [ARGS...])");
  }
  if (command[0] === "") throw new CommandError("the command to run is empty");
  return {
    help: false,
    connection: connectionOf(values, env),
    key: keyOf(positionals[0]),
    lease: secondsOf((values.lease as string | undefined) ?? "30", "--lease", false),
    wait: secondsOf((values.wait as string | undefined) ?? "0", "--wait", true),
    killGrace: secondsOf((values["kill-grace"] as string | undefined) ?? "5", "--kill-grace", true),
    command,
  };
}

/**
 * `lockd acquire KEY [--lease S] [--wait S]`.
 *
 * @throws {CommandError} For a bad command line.
 */
export function parseAcquire(args: string[], env: Env): Invocation<AcquireArgs> {
  if (wantsHelp(args)) return { help: true };
  const { values, positionals } = parseFlags(args, { ...CONNECTION_FLAGS, ...LEASE_WAIT });
  expectPositionals(positionals, ["KEY"]);
  return {
    help: false,
    connection: connectionOf(values, env),
    key: keyOf(positionals[0]),
    lease: secondsOf((values.lease as string | undefined) ?? "30", "--lease", false),
    wait: secondsOf((values.wait as string | undefined) ?? "0", "--wait", true),
  };
}

/**
 * `lockd release KEY TOKEN`.
 *
 * @throws {CommandError} For a bad command line.
 */
export function parseRelease(args: string[], env: Env): Invocation<ReleaseArgs> {
  if (wantsHelp(args)) return { help: true };
  const { values, positionals } = parseFlags(args, CONNECTION_FLAGS);
  expectPositionals(positionals, ["KEY", "TOKEN"]);
  return {
    help: false,
    connection: connectionOf(values, env),
    key: keyOf(positionals[0]),
    token: tokenOf(positionals[1]),
  };
}

/**
 * `lockd extend KEY TOKEN S`.
 *
 * @throws {CommandError} For a bad command line.
 */
export function parseExtend(args: string[], env: Env): Invocation<ExtendArgs> {
  if (wantsHelp(args)) return { help: true };
  const { values, positionals } = parseFlags(args, CONNECTION_FLAGS);
  expectPositionals(positionals, ["KEY", "TOKEN", "S"]);
  return {
    help: false,
    connection: connectionOf(values, env),
    key: keyOf(positionals[0]),
    token: tokenOf(positionals[1]),
    lease: secondsOf(positionals[2], "S (the lease)", false),
  };
}

/**
 * `lockd status [--json]`.
 *
 * @throws {CommandError} For a bad command line.
 */
export function parseStatus(args: string[], env: Env): Invocation<StatusArgs> {
  if (wantsHelp(args)) return { help: true };
  const { values, positionals } = parseFlags(args, {
    ...CONNECTION_FLAGS,
    json: { type: "boolean" },
  });
  expectPositionals(positionals, []);
  return { help: false, connection: connectionOf(values, env), json: values.json === true };
}

/**
 * `lockd locks [--prefix P] [--limit N] [--json]`.
 *
 * @throws {CommandError} For a bad command line.
 */
export function parseLocks(args: string[], env: Env): Invocation<LocksArgs> {
  if (wantsHelp(args)) return { help: true };
  const { values, positionals } = parseFlags(args, {
    ...CONNECTION_FLAGS,
    prefix: { type: "string" },
    limit: { type: "string" },
    json: { type: "boolean" },
  });
  expectPositionals(positionals, []);
  const prefix = values.prefix as string | undefined;
  if (prefix !== undefined) {
    const problem = keyError(prefix);
    if (problem !== undefined) {
      throw new CommandError(`--prefix: ${problem.replace(/^key/, "prefix")}`);
    }
  }
  const limitText = (values.limit as string | undefined) ?? "1000";
  if (!/^[1-9][0-9]{0,8}$/.test(limitText)) {
    throw new CommandError(
      `--limit must be a whole number from 1 to 999999999, got "${limitText}"`,
    );
  }
  return {
    help: false,
    connection: connectionOf(values, env),
    prefix,
    limit: Number(limitText),
    json: values.json === true,
  };
}
