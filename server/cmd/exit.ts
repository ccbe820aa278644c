/**
 * The exit statuses of the `lockd` subcommands (docs/cli.md, "Exit status"), after BSD's
 * sysexits.h, and the decisions that map what happened to one of them: a client error, a
 * child's end, a failed spawn. Pure: no I/O.
 *
 * @module
 */

import {
  AUTH_FAILED,
  AUTH_REQUIRED,
  CREDENTIAL_REVOKED,
  OUTSIDE_PREFIX,
} from "../../client/codec.ts";
import { LockRejectedError, LockTimeoutError, LockUnavailableError } from "../../client/errors.ts";

/** The exit statuses of the subcommands (docs/cli.md). */
export const EXIT = {
  /** Done. */
  ok: 0,
  /** The answer was no: a release or extend answered `N`, or some node did not answer. */
  failure: 1,
  /** A bad command line (EX_USAGE), or a request the server refused as invalid. */
  usage: 64,
  /** A file named by an option cannot be read (EX_NOINPUT). */
  noInput: 66,
  /** No lockd node could be reached (EX_UNAVAILABLE). */
  unavailable: 69,
  /** `lockd run` lost its lock while the command ran, or an internal error (EX_SOFTWARE). */
  software: 70,
  /** The wait ran out (EX_TEMPFAIL). */
  tempFail: 75,
  /** The credential or its key prefix was refused (EX_NOPERM). */
  noPerm: 77,
  /** The command of `lockd run` exists but cannot be executed. */
  cannotExecute: 126,
  /** The command of `lockd run` was not found. */
  notFound: 127,
} as const;

/**
 * A subcommand that cannot go on: a message (one line, without the `lockd <cmd>:` prefix)
 * and the exit status to end with.
 */
export class CommandError extends Error {
  /** The exit status. */
  readonly code: number;
  /**
   * @param message What is wrong, in one line.
   * @param code The exit status (default {@linkcode EXIT}.usage).
   */
  constructor(message: string, code: number = EXIT.usage) {
    super(message);
    this.name = "CommandError";
    this.code = code;
  }
}

/** The server messages that mean "this credential may not do that". */
const REFUSALS = new Set([AUTH_FAILED, AUTH_REQUIRED, CREDENTIAL_REVOKED, OUTSIDE_PREFIX]);

/** Whether a message (a `LockRejectedError`'s, or a status error) is a refused credential. */
export function isRefusal(message: string): boolean {
  for (const refusal of REFUSALS) if (message.includes(refusal)) return true;
  return false;
}

/**
 * The exit status a subcommand ends with after `error`.
 *
 * @example
 * ```ts
 * exitCodeOf(new LockTimeoutError("k", 5)); // 75
 * ```
 */
export function exitCodeOf(error: unknown): number {
  if (error instanceof CommandError) return error.code;
  if (error instanceof LockTimeoutError) return EXIT.tempFail;
  if (error instanceof LockUnavailableError) return EXIT.unavailable;
  if (error instanceof LockRejectedError) {
    return REFUSALS.has(error.serverMessage) ? EXIT.noPerm : EXIT.usage;
  }
  if (error instanceof TypeError) return EXIT.usage; // the client refused an argument
  return EXIT.software;
}

/** The one-line message for `error` (a stack trace is never shown). */
export function messageOf(error: unknown): string {
  const text = error instanceof Error ? error.message : String(error);
  return text.split("\n")[0];
}

/** Signal numbers of Linux (and the common ones of macOS and the BSDs). */
const SIGNALS: Record<string, number> = {
  SIGHUP: 1,
  SIGINT: 2,
  SIGQUIT: 3,
  SIGILL: 4,
  SIGTRAP: 5,
  SIGABRT: 6,
  SIGBUS: 7,
  SIGFPE: 8,
  SIGKILL: 9,
  SIGUSR1: 10,
  SIGSEGV: 11,
  SIGUSR2: 12,
  SIGPIPE: 13,
  SIGALRM: 14,
  SIGTERM: 15,
};

/** The BSD numbers where they differ from Linux's. */
const BSD_SIGNALS: Record<string, number> = { SIGBUS: 10, SIGUSR1: 30, SIGUSR2: 31 };

/**
 * The number of a signal on `os` (`Deno.build.os`), or `undefined` when not known.
 *
 * @example
 * ```ts
 * signalNumber("SIGTERM", "linux"); // 15
 * ```
 */
export function signalNumber(signal: string, os: string): number | undefined {
  if (os !== "linux" && os !== "android" && os !== "windows") {
    return BSD_SIGNALS[signal] ?? SIGNALS[signal];
  }
  return SIGNALS[signal];
}

/** How a child process ended, as `Deno.CommandStatus` reports it. */
export interface ChildEnd {
  /** Its exit code (the runtime reports 128+N for a death by signal N). */
  code: number;
  /** The signal that killed it, if one did. */
  signal: string | null;
}

/**
 * The exit status that passes a child's end on, as a shell does: its own code, or 128 plus
 * the number of the signal that killed it.
 *
 * @example
 * ```ts
 * childExitCode({ code: 3, signal: null }, "linux"); // 3
 * childExitCode({ code: 143, signal: "SIGTERM" }, "linux"); // 143
 * ```
 */
export function childExitCode(end: ChildEnd, os: string): number {
  if (end.signal === null) return end.code;
  const number = signalNumber(end.signal, os);
  return number === undefined ? end.code : 128 + number;
}

/** Why a command could not be spawned, from the runtime's error. */
export interface SpawnFailure {
  /** 127 (not found) or 126 (found, not executable). */
  code: number;
  /** The message to show. */
  message: string;
}

/**
 * What a failed spawn of `command` means: 127 when it does not exist, 126 when it cannot be
 * executed (no permission, a directory, a bad binary).
 *
 * @param kind The error's class name (`NotFound`, `PermissionDenied`, ...).
 */
export function spawnFailure(command: string, kind: string, detail: string): SpawnFailure {
  if (kind === "NotFound") {
    return { code: EXIT.notFound, message: `${JSON.stringify(command)}: command not found` };
  }
  const why = kind === "PermissionDenied" ? "permission denied" : detail.split("\n")[0];
  return {
    code: EXIT.cannotExecute,
    message: `${JSON.stringify(command)}: cannot execute: ${why}`,
  };
}

/**
 * What to add to the message of a refusal (exit 77) when no credential was given: how to
 * give one. Empty otherwise.
 */
export function credentialHint(code: number, hasCredential: boolean): string {
  if (code !== EXIT.noPerm || hasCredential) return "";
  return " (no credential was given: --auth-name with --auth-secret-file, or LOCKD_AUTH_NAME " +
    "with LOCKD_AUTH_SECRET)";
}
