/**
 * The auth file on disk (docs/security.md, "Credentials"): read at start, then re-read when
 * it changes (polled every second: modification time and size), with no restart. A bad new
 * file is logged and the credentials in force stay; nothing logged ever quotes the file.
 *
 * @module
 */

import { AuthFileError, Credentials } from "./auth.ts";
import type { Logger } from "./log.ts";

/** How often the file is checked for changes, ms. */
const POLL_MS = 1000;

function describe(error: unknown): string {
  if (error instanceof AuthFileError) return error.message;
  if (error instanceof Deno.errors.NotFound) return "no such file";
  if (error instanceof Deno.errors.PermissionDenied) return "permission denied";
  return error instanceof Error ? error.name : "unreadable";
}

/** An auth file kept current. */
export class AuthFile {
  #path: string;
  #log: Logger;
  #credentials: Credentials;
  #stamp: string;
  /** The stamp seen at the last poll, applied once it holds for another. */
  #seen = "";
  #timer: ReturnType<typeof setInterval> | undefined;

  private constructor(path: string, log: Logger, credentials: Credentials, stamp: string) {
    this.#path = path;
    this.#log = log;
    this.#credentials = credentials;
    this.#stamp = stamp;
  }

  /**
   * Reads `path` and starts watching it.
   *
   * @throws {Error} If it cannot be read or parsed (the message names the line, never a
   * secret).
   */
  static open(path: string, log: Logger): AuthFile {
    let credentials: Credentials;
    let stamp: string;
    try {
      stamp = AuthFile.#stampOf(path);
      credentials = Credentials.parse(Deno.readTextFileSync(path));
    } catch (error) {
      throw new Error(`Cannot use the auth file "${path}": ${describe(error)}`);
    }
    const file = new AuthFile(path, log, credentials, stamp);
    file.#timer = setInterval(() => file.#check(), POLL_MS);
    log.info(`auth: ${credentials.size} credential(s) from ${path}`, { event: "auth-loaded" });
    return file;
  }

  /** The credentials in force. */
  get credentials(): Credentials {
    return this.#credentials;
  }

  /**
   * Re-reads the file now if it changed. The poll every second does it too, once a change
   * has held for one poll.
   */
  reload(): void {
    this.#check(false);
  }

  /** Stops watching. */
  close(): void {
    clearInterval(this.#timer);
  }

  static #stampOf(path: string): string {
    const info = Deno.statSync(path);
    return `${info.mtime?.getTime() ?? 0}:${info.size}:${info.ino ?? 0}`;
  }

  #check(settle = true): void {
    let stamp: string;
    try {
      stamp = AuthFile.#stampOf(this.#path);
    } catch (error) {
      if (this.#stamp !== "gone") {
        this.#log.error(
          `auth file ${this.#path}: ${describe(error)}; the credentials in force stay`,
          { event: "auth-failed", path: this.#path },
        );
      }
      this.#stamp = "gone";
      return;
    }
    if (stamp === this.#stamp) return;
    // A change is applied once the file has stayed the same for one poll: an editor that
    // rewrites it in place is not caught halfway (unless asked to reload now).
    if (settle && stamp !== this.#seen) {
      this.#seen = stamp;
      return;
    }
    this.#stamp = stamp;
    try {
      this.#credentials = Credentials.parse(Deno.readTextFileSync(this.#path));
      this.#log.info(`auth: reloaded ${this.#credentials.size} credential(s) from ${this.#path}`, {
        event: "auth-reloaded",
      });
    } catch (error) {
      this.#log.error(
        `auth file ${this.#path} not reloaded: ${describe(error)}; the credentials in force stay`,
        { event: "auth-failed", path: this.#path },
      );
    }
  }
}
