/**
 * Peer authentication (docs/security.md, "Peers"): both ends of a peer link prove they know
 * the cluster secret, and the secret never crosses the wire. The dialer opens with a nonce
 * (`PEER 5 <address> <nonce>`); the acceptor answers with a nonce of its own and its proof
 * (`PEERAUTH <nonce> <proof>`); the dialer checks it and sends its proof (`PEERPROOF
 * <proof>`). A proof is an HMAC-SHA256 under the secret of both nonces, the dialer's
 * address, the acceptor's address (the one the dialer dialled) and the prover's side, so it
 * cannot be replayed on another link, reflected back, made for another address, or relayed:
 * a process listening at one peer's address cannot pass a handshake on to another peer, since
 * each end signs and checks the acceptor it means. Pure.
 *
 * @module
 */

import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import type { LineHandler } from "../line_socket.ts";
import { decodePeer, encodePeer } from "./peer_codec.ts";

/** A fresh 128-bit nonce, as 32 lowercase hex digits. */
export function newNonce(): string {
  return randomBytes(16).toString("hex");
}

/** Who a link is between: the dialer's address and the acceptor's, as listed in `--peers`. */
export interface LinkEnds {
  /** The dialer's address (its `PEER` line). */
  dialer: string;
  /** The acceptor's address: the one the dialer dialled, the acceptor's own. */
  acceptor: string;
}

function proof(
  secret: string,
  side: "acceptor" | "dialer",
  dialerNonce: string,
  acceptorNonce: string,
  ends: LinkEnds,
): string {
  return createHmac("sha256", secret)
    .update(
      `lockd peer ${side} ${dialerNonce} ${acceptorNonce} ${ends.dialer} ${ends.acceptor}`,
    )
    .digest("hex");
}

/** The acceptor's proof for the link `ends`. */
export function acceptorProof(
  secret: string,
  dialerNonce: string,
  acceptorNonce: string,
  ends: LinkEnds,
): string {
  return proof(secret, "acceptor", dialerNonce, acceptorNonce, ends);
}

/** The dialer's proof for the link `ends`. */
export function dialerProof(
  secret: string,
  dialerNonce: string,
  acceptorNonce: string,
  ends: LinkEnds,
): string {
  return proof(secret, "dialer", dialerNonce, acceptorNonce, ends);
}

/** Whether `given` is `expected`, compared in constant time. */
export function sameProof(expected: string, given: string): boolean {
  const a = new TextEncoder().encode(expected);
  const b = new TextEncoder().encode(given);
  return a.length === b.length && timingSafeEqual(a, b);
}

/**
 * Reads the cluster secret from its file: the first line, trimmed.
 *
 * @throws {Error} If it is missing or shorter than 16 characters.
 */
export function parsePeerSecret(text: string): string {
  const secret = text.split("\n")[0].trim();
  if (secret.length < 16) {
    throw new Error("the peer secret must be at least 16 characters, on the file's first line");
  }
  return secret;
}

/** What the acceptor's side of the handshake needs. */
export interface AcceptorOptions {
  /** The cluster secret. */
  secret: string;
  /** The address the dialer claims (its `PEER` line). */
  dialer: string;
  /** This node's own address in `--peers` (the one a genuine dialer dialled). */
  self: string;
  /** The dialer's nonce (its `PEER` line). */
  dialerNonce: string;
  /** Where the connection came from (for logs). */
  remote: string;
  /** Sends a line back to the dialer. */
  send(line: string): void;
  /** Closes the connection. */
  close(): void;
  /** A refused proof, for the log (the server limits repeats). */
  refused(why: string): void;
  /** The handler of the peer's lines once it proved the secret. */
  accepted(): LineHandler;
}

/**
 * The acceptor's side of the handshake: sends `PEERAUTH` at once, then takes the first line
 * as the dialer's `PEERPROOF`; a wrong or missing proof is logged and closes the link, a
 * right one hands every later line to the peer's handler.
 */
export class AcceptorHandshake implements LineHandler {
  #options: AcceptorOptions;
  #nonce = newNonce();
  #peer: LineHandler | undefined;
  #refused = false;

  /** @param options The secret, the dialer's claim and nonce, the socket's send and close. */
  constructor(options: AcceptorOptions) {
    this.#options = options;
    const { secret, dialerNonce, dialer, self } = options;
    const proof = acceptorProof(secret, dialerNonce, this.#nonce, { dialer, acceptor: self });
    options.send(encodePeer({ type: "PEERAUTH", nonce: this.#nonce, proof }));
  }

  /** One line from the peer. */
  line(text: string): void {
    if (this.#peer !== undefined) {
      this.#peer.line(text);
      return;
    }
    if (this.#refused) return;
    const o = this.#options;
    const message = decodePeer(text);
    const ends = { dialer: o.dialer, acceptor: o.self };
    const expected = dialerProof(o.secret, o.dialerNonce, this.#nonce, ends);
    if (message.type === "PEERPROOF" && sameProof(expected, message.proof)) {
      this.#peer = o.accepted();
      return;
    }
    this.#refused = true;
    o.refused(`${o.dialer} did not prove the cluster secret`);
    o.close();
  }

  /** The connection closed. */
  closed(): void {
    this.#peer?.closed();
  }
}
