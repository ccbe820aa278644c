/**
 * The peer protocol's messages (docs/cluster.md, "Peer protocol") as typed values:
 * `peer_codec.ts` encodes them to lines and decodes lines into them.
 *
 * @module
 */

import type { Role } from "./election.ts";

/**
 * `PEER 5 <address> [<nonce>]`: the first line of a connection a node dials to a peer; the
 * nonce when the cluster authenticates peers (see `peer_auth.ts`).
 */
export interface PeerHello {
  /** Message type. */
  type: "PEER";
  /** The sender's `--peers` address. */
  address: string;
  /** The dialer's nonce (32 hex digits), when peers authenticate. */
  nonce?: string;
}

/** `PEERAUTH <nonce> <proof>`: the acceptor's nonce and its proof of the cluster secret. */
export interface PeerAuth {
  /** Message type. */
  type: "PEERAUTH";
  /** The acceptor's nonce (32 hex digits). */
  nonce: string;
  /** Its proof (64 hex digits). */
  proof: string;
}

/** `PEERPROOF <proof>`: the dialer's proof of the cluster secret. */
export interface PeerProof {
  /** Message type. */
  type: "PEERPROOF";
  /** The proof (64 hex digits). */
  proof: string;
}

/** `HB ...`: a heartbeat, sent by every node to every peer at each interval. */
export interface Heartbeat {
  /** Message type. */
  type: "HB";
  /** The sender's role. */
  role: Role;
  /** The active it follows, named only while that one is live and active where it stands. */
  active: string | undefined;
  /** Whether it is in sync (streaming from the active). */
  synced: boolean;
  /** Its token mark: an active's reserved block, anyone else's highest known token or mark. */
  mark: bigint;
  /** Its own mark: an active's reserved block, anyone else's last token or starting mark. */
  own: bigint;
  /** The activation it is in sync with, or its own while active. */
  activation: string | undefined;
  /** Whether it holds a complete replica of some activation's state. */
  replica: boolean;
  /** That activation's first-token floor. */
  floor: bigint;
  /**
   * How far it applied that activation's stream: the last batch (`SEQ n`) it acknowledged,
   * 0 for none. Among replicas of one activation the furthest wins an election.
   */
  position: number;
}

/**
 * `SNAP <activation> <last token> <floor> <position>`: a snapshot begins (the standby clears
 * its table).
 */
export interface SnapshotBegin {
  /** Message type. */
  type: "SNAP";
  /** The sender's activation. */
  activation: string;
  /** The last token it issued. */
  lastToken: bigint;
  /** Its activation's first-token floor. */
  floor: bigint;
  /** The last batch it numbered: the snapshot holds every change up to it (0 for none). */
  position: number;
}

/** `H <key> <token> <remaining ms>`: `key` is held by `token` for that long. */
export interface HeldMessage {
  /** Message type. */
  type: "H";
  /** The key. */
  key: string;
  /** Its grant's token. */
  token: bigint;
  /** Lease left, in whole milliseconds (at least 1). */
  remainingMs: number;
  /** Who holds it: an owner id announced by `O` (0 or absent: unknown). */
  owner?: number;
}

/** `O <id> <bound 0/1> <session or -> <name>`: the owner with id `id` (see `server/owners.ts`). */
export interface OwnerMessage {
  /** Message type. */
  type: "O";
  /** The owner's id (1 and up). */
  id: number;
  /** Whether its grants are bound to its session. */
  bound: boolean;
  /** Its session id (32 hex digits), if any. */
  session: string | undefined;
  /** The client's name. */
  name: string;
}

/** `OGONE <id>`: the active forgot the owner `id` (it holds nothing; its id is never reused). */
export interface OwnerGone {
  /** Message type. */
  type: "OGONE";
  /** The owner's id. */
  id: number;
}

/** `F <key> <token>`: `key` is free (released or expired with nobody waiting). */
export interface FreedMessage {
  /** Message type. */
  type: "F";
  /** The key. */
  key: string;
  /** The token of the grant that ended. */
  token: bigint;
}

/** `W <mark>`: the active reserved tokens up to `mark`. */
export interface MarkMessage {
  /** Message type. */
  type: "W";
  /** Never issue a token at or below this. */
  mark: bigint;
}

/** `HANDOFF ...`: take over the active role (ended by `HANDOFFEND`). */
export interface HandoffBegin {
  /** Message type. */
  type: "HANDOFF";
  /** The sender's activation. */
  activation: string;
  /** The last token it issued. */
  lastToken: bigint;
  /** Its reserved mark. */
  mark: bigint;
  /** `full`: every holder follows as `H` lines; `sync`: rely on the receiver's replica. */
  mode: "sync" | "full";
  /** The activation the sender replicated before it became active, if any. */
  predecessor: string | undefined;
  /** The highest token the sender saw from that predecessor. */
  predecessorToken: bigint;
  /**
   * The sender's handover attempt (a positive integer, new for every `HANDOFF` it sends):
   * `TAKEN` echoes it, so an answer to an attempt the sender gave up on is not taken for
   * the answer to the next one.
   */
  attempt: number;
}

/**
 * `SEQ <n>`: everything the active streamed before this line is its batch `n` (batches are
 * numbered from 1 in each activation). Sent in sync replication (docs/cluster.md,
 * "Replication modes").
 */
export interface SeqMessage {
  /** Message type. */
  type: "SEQ";
  /** The batch number. */
  seq: number;
}

/** `ACK <n>`: a standby applied every batch of the stream up to `n`. */
export interface AckMessage {
  /** Message type. */
  type: "ACK";
  /** The highest batch applied. */
  seq: number;
}

/**
 * `COMMIT <activation>`: the sender of a handover confirms the successor that answered
 * `TAKEN <activation>`, which may serve from now on. `ABORT <activation>`: it had given up
 * on that successor (it answered too late), which stays a standby.
 */
export interface HandoffOutcome {
  /** Message type. */
  type: "COMMIT" | "ABORT";
  /** The successor's activation, from its `TAKEN`. */
  activation: string;
}

/** `TAKEN <activation> <attempt>`: the successor merged the `HANDOFF` of that attempt. */
export interface Taken {
  /** Message type. */
  type: "TAKEN";
  /** The successor's new activation. */
  activation: string;
  /** The handover attempt it answers, from the `HANDOFF`. */
  attempt: number;
}

/** Every peer message. */
export type PeerMessage =
  | PeerHello
  | PeerAuth
  | PeerProof
  | Heartbeat
  | { type: "SYNC" }
  | SnapshotBegin
  | HeldMessage
  | OwnerMessage
  | OwnerGone
  | FreedMessage
  | MarkMessage
  | { type: "SNAPEND" }
  | HandoffBegin
  | { type: "HANDOFFEND" }
  | SeqMessage
  | AckMessage
  | HandoffOutcome
  | Taken;

/** A peer line that is not a valid message. */
export interface PeerDecodeError {
  /** Marks an error. */
  type: "error";
  /** What is wrong. */
  message: string;
}
