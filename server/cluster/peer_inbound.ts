/**
 * The receiving half of a peer connection: the lines a peer sends on the connection it
 * dialled to this node, decoded by the peer codec and delivered to a {@linkcode
 * PeerReceiver} (the role machine). It tracks the framing of multi-line messages (a
 * snapshot, a handover with its holders). A malformed line is logged and closes the link:
 * the peer redials, and its stream starts over with a fresh snapshot.
 *
 * @module
 */

import type { Logger } from "../log.ts";
import type { Owner } from "../owners.ts";
import type { LineHandler } from "../line_socket.ts";
import type { Carried } from "./handoff.ts";
import type { Replica } from "./replica.ts";
import { decodePeer, type HandoffBegin, type Heartbeat } from "./peer_codec.ts";

/** What a peer's messages drive: the role machine, keyed by the peer's address. */
export interface PeerReceiver {
  /** Since when this node knows it was frozen, if it was; `undefined` otherwise. */
  frozenSince(): number | undefined;
  /** Any message from `peer`: it is alive. */
  heardFrom(peer: string): void;
  /** A heartbeat. */
  heartbeat(peer: string, heartbeat: Heartbeat): void;
  /** `SYNC`: a standby asks this (active) node for a snapshot and the stream. */
  syncRequested(peer: string): void;
  /** Whether `peer` is the active this node follows (its stream is to be applied). */
  follows(peer: string): boolean;
  /** Where the followed active's snapshot and stream go. */
  readonly replica: Replica;
  /** `HANDOFFEND` after `HANDOFF`: take over from `peer` (`owners`: of the carried holders). */
  takeOver(
    peer: string,
    header: HandoffBegin,
    carried: Carried[] | undefined,
    owners: Owner[],
  ): void;
  /** `TAKEN <activation> <attempt>`: the successor merged that handover attempt. */
  handedOver(peer: string, activation: string, attempt: number): void;
  /** `COMMIT` (`committed` true) or `ABORT` of the takeover this node answered with `TAKEN`. */
  handoffOutcome(peer: string, activation: string, committed: boolean): void;
  /** `ACK n`: `peer` applied this node's stream up to batch `n`. */
  acked(peer: string, n: number): void;
  /** The connection from `peer` closed: the stream it carried stopped. */
  streamLost(peer: string): void;
}

/** Options of {@linkcode PeerInbound}. */
export interface PeerInboundOptions {
  /** When the connection was accepted (ms, the node's clock). */
  openedAt: number;
  /** Closes the connection. */
  close: () => void;
  /** Where errors (and, with `trace`, every message) go. */
  log: Logger;
  /** Log every message but heartbeats (`LOCKD_TRACE=1`). */
  trace?: boolean;
  /** Log heartbeats too (`LOCKD_TRACE_HB=1`). */
  traceHeartbeats?: boolean;
}

/** Handles the lines of one inbound peer connection. */
export class PeerInbound implements LineHandler {
  #receiver: PeerReceiver;
  #peer: string;
  #options: PeerInboundOptions;
  /** Inside `HANDOFF` ... `HANDOFFEND`: the header, the holders and owners carried (full mode). */
  #handoff: { header: HandoffBegin; carried: Carried[] | undefined; owners: Owner[] } | undefined;
  /** Inside `SNAP` ... `SNAPEND` from the followed active: its activation. */
  #snapshot: string | undefined;
  #closed = false;

  /** @param receiver The role machine. @param peer The peer's address. @param options Settings. */
  constructor(receiver: PeerReceiver, peer: string, options: PeerInboundOptions) {
    this.#receiver = receiver;
    this.#peer = peer;
    this.#options = options;
  }

  /** One line from the peer. */
  line(text: string): void {
    if (this.#closed) return;
    const node = this.#receiver;
    const frozen = node.frozenSince();
    if (frozen !== undefined && this.#options.openedAt < frozen) {
      // This node was frozen: what waited in this socket is old news (a handover to us from
      // a node that has left since, heartbeats of the past). Drop it; the peer redials.
      this.#drop();
      return;
    }
    const message = decodePeer(text);
    if (message.type === "error") {
      this.#options.log.warn(
        `closing the link from ${this.#peer}: malformed peer line (${message.message})`,
        { event: "drop", peer: this.#peer, reason: "malformed" },
      );
      this.#drop();
      return;
    }
    node.heardFrom(this.#peer);
    if (this.#options.trace && (message.type !== "HB" || this.#options.traceHeartbeats)) {
      this.#options.log.debug(`${this.#peer} > ${text}`);
    }
    switch (message.type) {
      case "HB":
        node.heartbeat(this.#peer, message);
        return;
      case "SYNC":
        node.syncRequested(this.#peer);
        return;
      case "SNAP":
        if (!node.follows(this.#peer)) return;
        this.#snapshot = message.activation;
        node.replica.begin(message.activation, message.lastToken, message.floor, message.position);
        return;
      case "SNAPEND":
        if (this.#snapshot !== undefined && node.follows(this.#peer)) {
          node.replica.end(this.#snapshot);
        }
        this.#snapshot = undefined;
        return;
      case "H":
        if (this.#handoff?.carried !== undefined) {
          const { key, token, remainingMs, owner } = message;
          this.#handoff.carried.push({ key, token, remainingMs, owner: owner ?? 0 });
        } else if (node.follows(this.#peer)) {
          node.replica.held(message.key, message.token, message.remainingMs, message.owner);
        }
        return;
      case "O": {
        const { id, name, session, bound } = message;
        if (this.#handoff?.carried !== undefined) {
          this.#handoff.owners.push({ id, name, session, bound });
        } else if (node.follows(this.#peer)) node.replica.owner({ id, name, session, bound });
        return;
      }
      case "OGONE":
        if (node.follows(this.#peer)) node.replica.ownerGone(message.id);
        return;
      case "F":
        if (node.follows(this.#peer)) node.replica.freed(message.key, message.token);
        return;
      case "W":
        if (node.follows(this.#peer)) node.replica.mark(message.mark);
        return;
      case "HANDOFF":
        this.#handoff = {
          header: message,
          carried: message.mode === "full" ? [] : undefined,
          owners: [],
        };
        return;
      case "HANDOFFEND":
        if (this.#handoff !== undefined) {
          const { header, carried, owners } = this.#handoff;
          node.takeOver(this.#peer, header, carried, owners);
        }
        this.#handoff = undefined;
        return;
      case "TAKEN":
        node.handedOver(this.#peer, message.activation, message.attempt);
        return;
      case "SEQ":
        if (node.follows(this.#peer)) node.replica.batch(this.#peer, message.seq);
        return;
      case "ACK":
        node.acked(this.#peer, message.seq);
        return;
      case "COMMIT":
      case "ABORT":
        node.handoffOutcome(this.#peer, message.activation, message.type === "COMMIT");
        return;
      case "PEER":
        // A second handshake on an open link: harmless, ignored.
        return;
    }
  }

  /** The connection closed. */
  closed(): void {
    this.#closed = true;
    this.#receiver.streamLost(this.#peer);
  }

  #drop(): void {
    this.#closed = true;
    this.#options.close();
  }
}
