/**
 * The answer to a hello (docs/protocol.md, "Sessions and authentication"): who the
 * connection is, and, when the server requires credentials, whether it may go on. With
 * auth on, anything but a valid hello as the first line gets `E authentication required`
 * and the connection closes; a wrong credential gets one `E authentication failed`, after a
 * delay that grows with the failures from that address, and the connection closes (a hello
 * with no credential gets the same answer at once: it guesses nothing). The
 * message never says which part was wrong, and nothing here logs a secret.
 *
 * @module
 */

import {
  AUTH_FAILED,
  errorReply,
  HELLO_NOT_FIRST,
  helloOkReply,
  NOT_UTF8,
  parseHello,
} from "../client/codec.ts";
import { type Credentials, type Grant, hostOf, type Throttle } from "./auth.ts";
import type { Logger } from "./log.ts";

/** Who a connection is, after its hello. */
export interface Identity {
  /** The client's name. */
  name: string;
  /** Its session, if any. */
  session: string | undefined;
  /** Every key it uses must start with this (`""`: any). */
  prefix: string;
  /**
   * With auth on, the credential it signed in with and the credentials that checked it:
   * requests recheck it once the auth file was reloaded ({@linkcode Credentials.recheck}).
   */
  credential?: { grant: Grant; by: Credentials };
}

/** What answering a hello needs. */
export interface HelloContext {
  /** The credentials in force, or `undefined` when the server requires none. */
  credentials?(): Credentials | undefined;
  /** Slows down failures per address. */
  throttle?: Throttle;
  /** Monotonic clock, ms. */
  clock(): number;
  /** Where refused credentials are reported (by name and address, never the secret). */
  log?: Logger;
}

/** What to do with a hello. */
export type HelloOutcome =
  /** Accepted: the connection is `identity`; send `reply`. */
  | { kind: "ok"; identity: Identity; reply: string }
  /** Refused, the connection stays (auth off, or a hello that came too late): send `reply`. */
  | { kind: "error"; reply: string }
  /** Refused, the connection closes: send `reply` after `delayMs`, then close. */
  | { kind: "close"; reply: string; delayMs: number };

/**
 * A refused credential's answer. It never echoes the session field: it might be a secret
 * sent in the wrong place.
 */
const FAILED = errorReply("HELLO", "-", AUTH_FAILED);

/** A hello after other lines, or a second one: refused, the connection stays. */
const LATE: HelloOutcome = {
  kind: "error",
  reply: errorReply("HELLO", "-", HELLO_NOT_FIRST),
};

/**
 * A hello that is not one (`why`, which quotes none of its fields): answered `reply`; with
 * auth on, logged as a refused authentication and the connection then closes.
 */
function malformed(
  ctx: HelloContext,
  credentials: Credentials | undefined,
  remote: string,
  why: string,
  reply: string,
): HelloOutcome {
  if (credentials === undefined) return { kind: "error", reply };
  return refused(ctx, remote, why, reply, 0);
}

/** Logs a refused hello from `remote` (`why`, never a secret); `reply` after `delayMs`, then close. */
function refused(
  ctx: HelloContext,
  remote: string,
  why: string,
  reply: string,
  delayMs: number,
): HelloOutcome {
  ctx.log?.warn(`refused a hello from ${remote}: ${why}`, { event: "auth-refused", remote });
  return { kind: "close", reply, delayMs };
}

/**
 * Answers a hello line that is not valid UTF-8 as a malformed hello:
 * `HELLO - E line is not valid UTF-8`, echoing none of its fields (the session field might
 * be a secret); with auth on, it is logged and the connection closes. `late`: as for
 * {@linkcode answerHello}.
 */
export function answerInvalidHello(ctx: HelloContext, remote: string, late: boolean): HelloOutcome {
  if (late) return LATE;
  return malformed(ctx, ctx.credentials?.(), remote, NOT_UTF8, errorReply("HELLO", "-", NOT_UTF8));
}

/**
 * Answers the hello `line` of a connection from `remote` (`host:port`). `late`: other lines
 * came first (a hello must be the first line), or it already said hello.
 */
export function answerHello(
  ctx: HelloContext,
  line: string,
  remote: string,
  late: boolean,
): HelloOutcome {
  const credentials = ctx.credentials?.();
  const hello = parseHello(line);
  if (late) return LATE;
  if ("kind" in hello) {
    const reply = errorReply(hello.op, hello.key, hello.message);
    return malformed(ctx, credentials, remote, `malformed hello (${hello.message})`, reply);
  }
  let prefix = "";
  let credential: Identity["credential"];
  if (credentials !== undefined) {
    const given = hello.credential;
    if (given === undefined) {
      // Nothing to guess with, so nothing to slow down or count against the address: a
      // client that was not given a credential learns so at once (docs/security.md).
      return refused(ctx, remote, "no credential", FAILED, 0);
    }
    const lockedMs = ctx.throttle?.lockedFor(hostOf(remote), ctx.clock()) ?? 0;
    if (lockedMs > 0) {
      // Too many failures from this address: not checked, so parallel guesses gain nothing.
      return refused(ctx, remote, "too many failures, not checked", FAILED, lockedMs);
    }
    const grant = credentials.verify(given.name, given.secret);
    const host = hostOf(remote);
    if (grant === undefined) {
      const delayMs = ctx.throttle?.failed(host, ctx.clock()) ?? 0;
      // An unknown name is not quoted: it may be a secret sent in the name's place.
      const why = credentials.has(given.name)
        ? `wrong credential for ${given.name}`
        : "unknown credential name";
      return refused(ctx, remote, why, FAILED, delayMs);
    }
    ctx.throttle?.succeeded(host);
    prefix = grant.prefix;
    credential = { grant, by: credentials };
  }
  const identity: Identity = { name: hello.name, session: hello.session, prefix };
  if (credential !== undefined) identity.credential = credential;
  return {
    kind: "ok",
    identity,
    reply: helloOkReply(hello.session),
  };
}
