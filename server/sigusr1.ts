/**
 * SIGUSR1 and the Deno runtime: since Deno 2.9.2 (denoland/deno#35738) a Deno process that
 * receives SIGUSR1 opens its V8 inspector on 127.0.0.1:9229, without a password, and a JS
 * listener does not stop it. Any local user can then run code as this process's user. lockd
 * cannot turn that off, so it says so loudly when one arrives (docs/security.md, "SIGUSR1").
 *
 * @module
 */

/** The warning written when this process got SIGUSR1 (one line, no secret). */
export const SIGUSR1_WARNING = "got SIGUSR1: the Deno runtime opens its inspector on " +
  "127.0.0.1:9229 on SIGUSR1 (Deno 2.9.2 and later), where any local user can run code as " +
  "this process's user";
