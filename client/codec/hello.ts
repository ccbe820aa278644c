/**
 * The hello line (docs/protocol.md, "Sessions and authentication"): the optional first line
 * of a connection, naming the client and its session and, when the server requires it,
 * presenting a credential. Part of the codec (`@lockd/client/codec`).
 *
 * `HELLO 1 <session> <name> [<credential> <secret>]`, answered `HELLO <session> OK` or
 * `HELLO <session> E <message>`.
 *
 * @module
 */

import { keyError, utf8Length } from "./fields.ts";
import type { RequestError } from "./request.ts";

/** The protocol version a hello announces. */
export const HELLO_VERSION = 1;

/** Longest client name, in UTF-8 bytes. */
export const MAX_CLIENT_NAME_BYTES = 128;

/** A credential: its name in the server's auth file and its secret. */
export interface Credential {
  /** The credential's name (letters, digits, `.`, `_`, `@`, `-`; at most 64). */
  name: string;
  /** Its secret (printable ASCII without spaces, 1–256 characters). */
  secret: string;
}

/** A parsed hello. */
export interface Hello {
  /** The session id (16–64 letters, digits, `-`, `_`), or `undefined` for none (`-`). */
  session: string | undefined;
  /** The client's name, shown to whoever inspects a key it holds. */
  name: string;
  /** The credential, when given. */
  credential: Credential | undefined;
}

/** A session id: 16–64 letters, digits, `-` or `_` (32 hex digits, a UUID, base64url...). */
const SESSION = /^[A-Za-z0-9_-]{16,64}$/;
const CREDENTIAL_NAME = /^[A-Za-z0-9._@-]{1,64}$/;
const SECRET = /^[\x21-\x7e]{1,256}$/;

function fail(key: string | undefined, message: string): RequestError {
  return { kind: "E", op: "HELLO", key: key || "-", message };
}

/**
 * Why `name` is not a valid client name (1–128 bytes of UTF-8 without whitespace or control
 * characters), or `undefined` when it is valid.
 */
export function clientNameError(name: string): string | undefined {
  if (name.length === 0) return "missing client name";
  // Checked before keyError(), whose own (larger) limit must not be the one named.
  if (utf8Length(name) > MAX_CLIENT_NAME_BYTES) {
    return `client name must be at most ${MAX_CLIENT_NAME_BYTES} bytes`;
  }
  return keyError(name)?.replace(/^key/, "client name");
}

/**
 * Whether `text` is a valid session id (docs/protocol.md, "Sessions and authentication"):
 * 16–64 letters, digits, `-` or `_`. `LockClient` makes 32 lowercase hex digits; a UUID or
 * base64url text is fine too. Hellos and the peers' replication of sessions use this one rule.
 *
 * @example
 * ```ts
 * import { isSessionId } from "@lockd/client/codec";
 * isSessionId("3f2504e0-4f89-41d3-9a0c-0305e82c3301"); // true
 * isSessionId("short"); // false
 * ```
 */
export function isSessionId(text: string): boolean {
  return SESSION.test(text);
}

/**
 * Whether `line` is a hello: its op is `HELLO` (well formed or not; {@linkcode parseHello}
 * says which). A server answers a hello after other lines, or a second one,
 * `HELLO - E hello must be the first line` ({@linkcode HELLO_NOT_FIRST}).
 *
 * @example
 * ```ts
 * import { isHello } from "@lockd/client/codec";
 * isHello("HELLO 1 - billing-7@host:4242"); // true
 * isHello("HELLOX 1"); // false
 * ```
 */
export function isHello(line: string): boolean {
  return line.startsWith("HELLO") && (line.length === 5 || line.charCodeAt(5) === 32);
}

/**
 * Longest delay before a node answers a refused hello, in ms (docs/protocol.md, "Sessions and
 * authentication": 100 ms doubling to 5 s per failure from one address). Nothing else on
 * that connection is answered meanwhile, so a client waits this long beyond its usual bound
 * before it takes the silence for a frozen node.
 */
export const MAX_REFUSAL_DELAY_MS = 5000;

/** `E` message of a hello after other lines, or of a second hello; the connection stays. */
export const HELLO_NOT_FIRST = "hello must be the first line";

/**
 * Parses a hello line. Never throws: a line that is not a valid hello yields a
 * {@linkcode RequestError} (echoing `HELLO` and the session field, or `-` when that field is
 * not a session) that never repeats the secret.
 *
 * @example
 * ```ts
 * import { parseHello } from "@lockd/client/codec";
 * parseHello("HELLO 1 0123456789abcdef0123456789abcdef billing-7@host:4242");
 * // { session: "0123456789abcdef0123456789abcdef", name: "billing-7@host:4242", credential: undefined }
 * ```
 */
export function parseHello(line: string): Hello | RequestError {
  const f = line.split(" ");
  const session = f[2];
  // An error never echoes the session field: it might be a secret sent in the wrong place.
  const echo = "-";
  if (f[0] !== "HELLO") return fail(echo, "not a hello");
  if (f.some((field, i) => i > 0 && field === "")) {
    return fail(echo, "empty field; fields are separated by single spaces");
  }
  if (f.length !== 4 && f.length !== 6) {
    return fail(echo, "usage: HELLO 1 <session> <name> [<credential> <secret>]");
  }
  if (f[1] !== String(HELLO_VERSION)) return fail(echo, "unsupported hello version");
  if (session !== "-" && !SESSION.test(session)) {
    return fail("-", "session must be 16-64 letters, digits, '-' or '_', or -");
  }
  const nameProblem = clientNameError(f[3]);
  if (nameProblem !== undefined) return fail(echo, nameProblem);
  let credential: Credential | undefined;
  if (f.length === 6) {
    // The same message for a bad name and a bad secret: it must not tell which.
    if (!CREDENTIAL_NAME.test(f[4]) || !SECRET.test(f[5])) {
      return fail(echo, "malformed credential");
    }
    credential = { name: f[4], secret: f[5] };
  }
  return { session: session === "-" ? undefined : session, name: f[3], credential };
}

/**
 * The hello line of `hello`.
 *
 * @throws {TypeError} For an invalid session id, client name or credential.
 *
 * @example
 * ```ts
 * import { helloLine } from "@lockd/client/codec";
 * helloLine({ session: undefined, name: "worker-1", credential: undefined }); // "HELLO 1 - worker-1"
 * ```
 */
export function helloLine(hello: Hello): string {
  const session = hello.session ?? "-";
  if (session !== "-" && !SESSION.test(session)) {
    throw new TypeError("session must be 16-64 letters, digits, '-' or '_'");
  }
  const nameProblem = clientNameError(hello.name);
  if (nameProblem !== undefined) throw new TypeError(`Invalid client name: ${nameProblem}`);
  const head = `HELLO ${HELLO_VERSION} ${session} ${hello.name}`;
  const c = hello.credential;
  if (c === undefined) return head;
  // RegExp.test() would turn a missing value into the string "undefined" and pass it.
  if (typeof c.name !== "string" || typeof c.secret !== "string") {
    throw new TypeError(
      `credential name and secret must be strings, got ${typeof c.name} and ${typeof c.secret}`,
    );
  }
  if (!CREDENTIAL_NAME.test(c.name)) {
    throw new TypeError("credential name must be 1-64 letters, digits, '.', '_', '@' or '-'");
  }
  if (!SECRET.test(c.secret)) {
    throw new TypeError("secret must be 1-256 printable ASCII characters without spaces");
  }
  return `${head} ${c.name} ${c.secret}`;
}

/**
 * `HELLO <session> OK`: the hello is accepted (`-` for no session).
 *
 * @example
 * ```ts
 * import { helloOkReply } from "@lockd/client/codec";
 * helloOkReply(undefined); // "HELLO - OK"
 * ```
 */
export function helloOkReply(session: string | undefined): string {
  return `HELLO ${session ?? "-"} OK`;
}
