/**
 * The peer protocol's codec (docs/cluster.md, "Peer protocol"): every message between
 * cluster nodes as a typed value, encoded to and decoded from its line. Pure, and the only
 * place peer lines are built or parsed. Decoding validates every field: a malformed line
 * yields a {@linkcode PeerDecodeError}, never an exception.
 *
 * @module
 */

import { clientNameError, isSessionId, keyError, MAX_TOKEN } from "../../client/codec.ts";
import type { Role } from "./election.ts";
import type { HeldMessage, PeerDecodeError, PeerHello, PeerMessage } from "./peer_messages.ts";

export type * from "./peer_messages.ts";

/** Version of the peer protocol sent in the handshake. */
export const PEER_PROTOCOL_VERSION = 5;

const ROLES: readonly Role[] = ["starting", "standby", "active", "handing-off", "leaving"];
const DECIMAL = /^(?:0|[1-9][0-9]{0,19})$/;
const ACTIVATION = /^[0-9A-Za-z_-]{1,64}$/;
const ADDRESS = /^\S{1,300}$/;
const FIELDS: Record<string, number> = {
  PEER: 3,
  PEERAUTH: 3,
  PEERPROOF: 2,
  HB: 10,
  SYNC: 1,
  SNAP: 5,
  H: 4,
  O: 5,
  OGONE: 2,
  F: 3,
  W: 2,
  SNAPEND: 1,
  HANDOFF: 8,
  HANDOFFEND: 1,
  SEQ: 2,
  ACK: 2,
  TAKEN: 3,
  COMMIT: 2,
  ABORT: 2,
};

/** `H <key> <token> <remaining ms> [<owner>]`: the replication hot path's builder. */
export function heldLine(key: string, token: bigint, remainingMs: number, owner = 0): string {
  return owner > 0
    ? `H ${key} ${token} ${remainingMs} ${owner}`
    : `H ${key} ${token} ${remainingMs}`;
}

/** `F <key> <token>`: the replication hot path's builder. */
export function freedLine(key: string, token: bigint): string {
  return `F ${key} ${token}`;
}

/** The line of `message` (without line ending). */
export function encodePeer(message: PeerMessage): string {
  switch (message.type) {
    case "PEER":
      return message.nonce === undefined
        ? `PEER ${PEER_PROTOCOL_VERSION} ${message.address}`
        : `PEER ${PEER_PROTOCOL_VERSION} ${message.address} ${message.nonce}`;
    case "PEERAUTH":
      return `PEERAUTH ${message.nonce} ${message.proof}`;
    case "PEERPROOF":
      return `PEERPROOF ${message.proof}`;
    case "HB":
      return `HB ${message.role} ${message.active ?? "-"} ${
        message.synced ? 1 : 0
      } ${message.mark} ${message.activation ?? "-"} ${
        message.replica ? 1 : 0
      } ${message.floor} ${message.position} ${message.own}`;
    case "SNAP":
      return `SNAP ${message.activation} ${message.lastToken} ${message.floor} ${message.position}`;
    case "H":
      return heldLine(message.key, message.token, message.remainingMs, message.owner);
    case "O":
      return `O ${message.id} ${message.bound ? 1 : 0} ${message.session ?? "-"} ${message.name}`;
    case "OGONE":
      return `OGONE ${message.id}`;
    case "F":
      return freedLine(message.key, message.token);
    case "W":
      return `W ${message.mark}`;
    case "HANDOFF":
      return `HANDOFF ${message.activation} ${message.lastToken} ${message.mark} ${message.mode} ${
        message.predecessor ?? "-"
      } ${message.predecessorToken} ${message.attempt}`;
    case "TAKEN":
      return `TAKEN ${message.activation} ${message.attempt}`;
    case "COMMIT":
    case "ABORT":
      return `${message.type} ${message.activation}`;
    case "SEQ":
    case "ACK":
      return `${message.type} ${message.seq}`;
    default:
      return message.type;
  }
}

/** Thrown inside {@linkcode decodePeer} only, turned into a {@linkcode PeerDecodeError}. */
class Malformed extends Error {}

function decimal(text: string, what: string): bigint {
  if (!DECIMAL.test(text)) throw new Malformed(`${what} must be a decimal number`);
  const value = BigInt(text);
  if (value > MAX_TOKEN) throw new Malformed(`${what} is above 2^64-1`);
  return value;
}

function token(text: string, what: string): bigint {
  const value = decimal(text, what);
  if (value === 0n) throw new Malformed(`${what} must be at least 1`);
  return value;
}

function flag(text: string, what: string): boolean {
  if (text !== "0" && text !== "1") throw new Malformed(`${what} must be 0 or 1`);
  return text === "1";
}

function activation(text: string): string {
  if (!ACTIVATION.test(text)) throw new Malformed("bad activation id");
  return text;
}

function optional<T>(text: string, parse: (text: string) => T): T | undefined {
  return text === "-" ? undefined : parse(text);
}

function address(text: string): string {
  if (!ADDRESS.test(text)) throw new Malformed("bad address");
  return text;
}

function key(text: string): string {
  const problem = keyError(text);
  if (problem !== undefined) throw new Malformed(problem);
  return text;
}

function hex(text: string, digits: number, what: string): string {
  if (text.length !== digits || !/^[0-9a-f]+$/.test(text)) {
    throw new Malformed(`${what} must be ${digits} lowercase hex digits`);
  }
  return text;
}

function ownerId(text: string): number {
  if (!/^[1-9][0-9]{0,9}$/.test(text) || Number(text) > 2 ** 31 - 1) {
    throw new Malformed("owner id must be a positive 31-bit integer");
  }
  return Number(text);
}

function counter(text: string, what: string): number {
  const value = Number(text);
  if (!/^[1-9][0-9]{0,15}$/.test(text) || !Number.isSafeInteger(value)) {
    throw new Malformed(`${what} must be a positive integer below 2^53`);
  }
  return value;
}

function batch(text: string): number {
  return counter(text, "batch number");
}

function milliseconds(text: string): number {
  const value = Number(text);
  // Above 2^53-1 a number cannot hold every integer: the value would be silently rounded.
  if (!/^[1-9][0-9]{0,15}$/.test(text) || !Number.isSafeInteger(value)) {
    throw new Malformed("remaining ms must be a positive integer below 2^53");
  }
  return value;
}

/**
 * Parses one peer line. Never throws: a line that is not a valid message of the peer
 * protocol (unknown type, wrong field count, a bad field) yields a
 * {@linkcode PeerDecodeError} saying what is wrong.
 */
export function decodePeer(line: string): PeerMessage | PeerDecodeError {
  const f = line.split(" ");
  const type = f[0];
  const count = FIELDS[type];
  if (count === undefined) {
    return { type: "error", message: `unknown peer message ${JSON.stringify(type.slice(0, 20))}` };
  }
  // H may carry a fifth field (the owner), PEER a fourth (the nonce).
  const extra = (type === "H" && f.length === 5) || (type === "PEER" && f.length === 4);
  if (f.length !== count && !extra) {
    return { type: "error", message: `${type} takes ${count - 1} fields, got ${f.length - 1}` };
  }
  try {
    switch (type) {
      case "PEER": {
        if (f[1] !== String(PEER_PROTOCOL_VERSION)) {
          throw new Malformed(
            `unsupported peer protocol ${JSON.stringify(f[1].slice(0, 16))} ` +
              `(this node speaks ${PEER_PROTOCOL_VERSION})`,
          );
        }
        const hello: PeerHello = { type, address: address(f[2]) };
        if (f.length === 4) hello.nonce = hex(f[3], 32, "nonce");
        return hello;
      }
      case "PEERAUTH":
        return { type, nonce: hex(f[1], 32, "nonce"), proof: hex(f[2], 64, "proof") };
      case "PEERPROOF":
        return { type, proof: hex(f[1], 64, "proof") };
      case "HB": {
        const role = f[1] as Role;
        if (!ROLES.includes(role)) throw new Malformed("unknown role");
        return {
          type,
          role,
          active: optional(f[2], address),
          synced: flag(f[3], "synced"),
          mark: decimal(f[4], "mark"),
          activation: optional(f[5], activation),
          replica: flag(f[6], "replica"),
          floor: decimal(f[7], "floor"),
          position: f[8] === "0" ? 0 : batch(f[8]),
          own: decimal(f[9], "own mark"),
        };
      }
      case "SNAP":
        return {
          type,
          activation: activation(f[1]),
          lastToken: decimal(f[2], "last token"),
          floor: decimal(f[3], "floor"),
          position: f[4] === "0" ? 0 : batch(f[4]),
        };
      case "H": {
        const held: HeldMessage = {
          type,
          key: key(f[1]),
          token: token(f[2], "token"),
          remainingMs: milliseconds(f[3]),
        };
        if (f.length === 5) held.owner = ownerId(f[4]);
        return held;
      }
      case "OGONE":
        return { type, id: ownerId(f[1]) };
      case "O": {
        if (f[2] !== "0" && f[2] !== "1") throw new Malformed("bound must be 0 or 1");
        if (f[3] !== "-" && !isSessionId(f[3])) throw new Malformed("bad session id");
        const problem = clientNameError(f[4]);
        if (problem !== undefined) throw new Malformed(problem);
        return {
          type,
          id: ownerId(f[1]),
          bound: f[2] === "1",
          session: f[3] === "-" ? undefined : f[3],
          name: f[4],
        };
      }
      case "F":
        return { type, key: key(f[1]), token: token(f[2], "token") };
      case "W":
        return { type, mark: decimal(f[1], "mark") };
      case "HANDOFF": {
        if (f[4] !== "sync" && f[4] !== "full") throw new Malformed("mode must be sync or full");
        return {
          type,
          activation: activation(f[1]),
          lastToken: decimal(f[2], "last token"),
          mark: decimal(f[3], "mark"),
          mode: f[4],
          predecessor: optional(f[5], activation),
          predecessorToken: decimal(f[6], "predecessor token"),
          attempt: counter(f[7], "attempt"),
        };
      }
      case "TAKEN":
        return { type, activation: activation(f[1]), attempt: counter(f[2], "attempt") };
      case "COMMIT":
      case "ABORT":
        return { type, activation: activation(f[1]) };
      case "SEQ":
      case "ACK":
        return { type, seq: batch(f[1]) };
      default:
        return { type } as PeerMessage;
    }
  } catch (error) {
    if (!(error instanceof Malformed)) throw error;
    return { type: "error", message: `${type}: ${error.message}` };
  }
}
