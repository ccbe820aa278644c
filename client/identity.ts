/**
 * A client's random identity: the session id its hellos carry, and the name it gives
 * itself when the caller gave none (docs/protocol.md, "Sessions and authentication").
 *
 * @module
 */

/**
 * A new session id: 128 random bits as 32 lowercase hex digits. It is a bearer handle (it
 * keeps the session's bound locks alive), so it is shown nowhere.
 */
export function newSessionId(): string {
  return randomHex(16);
}

/**
 * A default client name, `client-` and 8 random hex digits: drawn apart from the session id,
 * since names are shown to anyone who may inspect locks.
 */
export function defaultClientName(): string {
  return `client-${randomHex(4)}`;
}

function randomHex(bytes: number): string {
  let text = "";
  for (const b of crypto.getRandomValues(new Uint8Array(bytes))) {
    text += b.toString(16).padStart(2, "0");
  }
  return text;
}
