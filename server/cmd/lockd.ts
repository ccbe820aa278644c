/**
 * The `lockd` command (docs/cli.md): picks the subcommand from the first argument and runs
 * it. No argument, or a flag first, is `serve` (the server, exactly as
 * `deno run -A server/main.ts [flags]` always was); `lockd serve [flags]` is the same.
 * `commandOf` is the pure decision; `lockd` does the rest.
 *
 * @module
 */

import type { Env } from "./args.ts";
import { CommandError, EXIT, exitCodeOf, messageOf } from "./exit.ts";
import { HELP_PAGES, OVERVIEW } from "./help.ts";
import { locksCommand, statusCommand } from "./inspect.ts";
import {
  parseAcquire,
  parseExtend,
  parseLocks,
  parseRelease,
  parseRun,
  parseStatus,
} from "./parse.ts";
import { runUnderLock } from "./run.ts";
import { acquireCommand, extendCommand, type Output, releaseCommand } from "./scripts.ts";

/** The server's entry: runs `lockd serve` with its flags, resolves with the exit status. */
export type Serve = (args: string[]) => Promise<number>;

/** The subcommands besides `serve` and `help`. */
export const COMMANDS = ["run", "acquire", "release", "extend", "status", "locks"] as const;

/** One of {@linkcode COMMANDS}. */
export type CommandName = typeof COMMANDS[number];

/** What the arguments ask for. */
export type Choice =
  | { kind: "serve"; args: string[] }
  | { kind: "help"; topic: string | undefined }
  | { kind: "command"; name: CommandName; args: string[] }
  | { kind: "unknown"; name: string };

/**
 * Which command `args` (the arguments after the program) ask for.
 *
 * @example
 * ```ts
 * commandOf([]); // { kind: "serve", args: [] }
 * commandOf(["--listen", "127.0.0.1:0"]); // serve, with those flags
 * commandOf(["run", "k", "--", "true"]); // { kind: "command", name: "run", args: [...] }
 * ```
 */
export function commandOf(args: string[]): Choice {
  const [first, ...rest] = args;
  if (first === undefined || first.startsWith("-")) return { kind: "serve", args };
  if (first === "serve") return { kind: "serve", args: rest };
  if (first === "help") return { kind: "help", topic: rest[0] };
  if ((COMMANDS as readonly string[]).includes(first)) {
    return { kind: "command", name: first as CommandName, args: rest };
  }
  return { kind: "unknown", name: first };
}

/** Runs subcommand `name` with `args`; resolves with its exit status. */
async function runCommand(
  name: CommandName,
  args: string[],
  env: Env,
  io: Output,
): Promise<number> {
  const help = () => {
    io.out(HELP_PAGES[name].trimEnd());
    return EXIT.ok;
  };
  switch (name) {
    case "run": {
      const run = parseRun(args, env);
      return run.help ? help() : await runUnderLock(run, io.err);
    }
    case "acquire": {
      const acquire = parseAcquire(args, env);
      return acquire.help ? help() : await acquireCommand(acquire, io);
    }
    case "release": {
      const release = parseRelease(args, env);
      return release.help ? help() : await releaseCommand(release, io);
    }
    case "extend": {
      const extend = parseExtend(args, env);
      return extend.help ? help() : await extendCommand(extend, io);
    }
    case "status": {
      const status = parseStatus(args, env);
      return status.help ? help() : await statusCommand(status, io);
    }
    case "locks": {
      const locks = parseLocks(args, env);
      return locks.help ? help() : await locksCommand(locks, io);
    }
  }
}

/** The line that names the commands, for an unknown one. */
const KNOWN = `commands: serve, ${COMMANDS.join(", ")}`;

/**
 * Runs the `lockd` command line `args`: the server (`serve`, through `serve`) or a
 * subcommand. Resolves with the exit status (docs/cli.md, "Exit status").
 *
 * @param env Environment lookup (default: the process's).
 */
export async function lockd(
  args: string[],
  serve: Serve,
  env: Env = (name) => Deno.env.get(name),
): Promise<number> {
  const choice = commandOf(args);
  switch (choice.kind) {
    case "serve":
      return await serve(choice.args);
    case "unknown":
      // Exit 2, as any bad server command line (`lockd start` always was one).
      console.error(
        `lockd: unknown command ${JSON.stringify(choice.name)} (${KNOWN}); ` +
          "see 'lockd help', or 'lockd --help' for the server's options",
      );
      return 2;
    case "help":
      if (choice.topic === undefined) console.log(OVERVIEW.trimEnd());
      else if (choice.topic === "serve") return await serve(["--help"]);
      else if (Object.hasOwn(HELP_PAGES, choice.topic)) {
        console.log(HELP_PAGES[choice.topic].trimEnd());
      } else {
        console.error(`lockd help: unknown command ${JSON.stringify(choice.topic)} (${KNOWN})`);
        return EXIT.usage;
      }
      return EXIT.ok;
  }
  const prefix = `lockd ${choice.name}: `;
  const io: Output = {
    out: (line) => console.log(line),
    err: (line) => console.error(prefix + line),
  };
  try {
    return await runCommand(choice.name, choice.args, env, io);
  } catch (error) {
    const hint = error instanceof CommandError && error.code === EXIT.usage
      ? ` (see 'lockd ${choice.name} --help')`
      : "";
    io.err(messageOf(error) + hint);
    return exitCodeOf(error);
  }
}
