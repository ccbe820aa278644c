/**
 * The requests outstanding on one connection, matched to their replies by the echoed
 * (op, key) (docs/protocol.md, "Pipelining"): several outstanding requests with the same
 * pair are answered in the order they were sent, so each pair keeps a queue.
 *
 * @module
 */

import type { Reply } from "./codec.ts";

/** The connection dropped (or could not be used) while a request was outstanding. */
export class ConnectionLost extends Error {
  /** @param address Where it was connected. @param detail Last error line from the server. */
  constructor(address: string, detail?: string) {
    super(`Connection to ${address} was lost${detail ? ` (${detail})` : ""}`);
    this.name = "ConnectionLost";
  }
}

/**
 * What waits for a reply on a connection: the router's exchanges themselves (no promise or
 * closure per request), or a promise's ({@linkcode PromiseReceiver}). The requests waiting
 * for one (op, key) form a queue through `nextReceiver`, in the order sent.
 */
export interface Receiver {
  /** The next receiver of the same (op, key) on the connection: the queue's to set. */
  nextReceiver: Receiver | undefined;
  /** On the first of a queue, its last: the queue's to set. */
  lastReceiver: Receiver | undefined;
  /** Its place among the requests this process sent (any connection): the queue's to set. */
  sentSeq?: number;
  /** The reply whose echoed (op, key) matched. */
  replied(reply: Reply): void;
  /** The connection dropped before the reply came. */
  lost(error: ConnectionLost): void;
}

/** Requests sent by this process so far, on any connection (orders `Receiver.sentSeq`). */
let sentSeq = 0;

/** A receiver that settles a promise. */
export class PromiseReceiver implements Receiver {
  nextReceiver: Receiver | undefined;
  lastReceiver: Receiver | undefined;
  sentSeq = 0;
  replied: (reply: Reply) => void;
  lost: (error: ConnectionLost) => void;

  /** @param resolve Gets the reply. @param reject Gets the loss. */
  constructor(resolve: (reply: Reply) => void, reject: (error: ConnectionLost) => void) {
    this.replied = resolve;
    this.lost = reject;
  }
}

/**
 * The outstanding requests of one connection, by op and then key: the first receiver of
 * each (op, key) queue. Two levels, so that neither a request nor a reply builds an
 * `op key` string to look up.
 */
export class PendingReplies {
  #byOp = new Map<string, Map<string, Receiver>>();

  /** Queues `receiver` behind the requests with the same (op, key), stamping its `sentSeq`. */
  add(op: string, key: string, receiver: Receiver): void {
    let byKey = this.#byOp.get(op);
    if (byKey === undefined) this.#byOp.set(op, byKey = new Map());
    receiver.sentSeq = sentSeq++;
    receiver.nextReceiver = undefined;
    const first = byKey.get(key);
    if (first === undefined) {
      receiver.lastReceiver = receiver;
      byKey.set(key, receiver);
    } else {
      first.lastReceiver!.nextReceiver = receiver;
      first.lastReceiver = receiver;
    }
  }

  /** Takes the oldest receiver of (op, key) off its queue, or `undefined` if none waits. */
  take(op: string, key: string): Receiver | undefined {
    const byKey = this.#byOp.get(op);
    const receiver = byKey?.get(key);
    if (receiver === undefined) return undefined;
    const next = receiver.nextReceiver;
    if (next === undefined) byKey!.delete(key);
    else {
      next.lastReceiver = receiver.lastReceiver;
      byKey!.set(key, next);
    }
    receiver.nextReceiver = receiver.lastReceiver = undefined;
    return receiver;
  }

  /** When the oldest request of (op, key) was sent (its `sentSeq`), or `Infinity` if none. */
  oldest(op: string, key: string): number {
    return this.#byOp.get(op)?.get(key)?.sentSeq ?? Infinity;
  }

  /** Whether a request with this (op, key) is outstanding. */
  has(op: string, key: string): boolean {
    return this.#byOp.get(op)?.has(key) ?? false;
  }

  /** Empties every queue; returns the receivers that were in them. */
  clear(): Receiver[] {
    const all: Receiver[] = [];
    for (const byKey of this.#byOp.values()) {
      for (const first of byKey.values()) {
        let receiver: Receiver | undefined = first;
        while (receiver !== undefined) {
          const next: Receiver | undefined = receiver.nextReceiver;
          receiver.nextReceiver = receiver.lastReceiver = undefined;
          all.push(receiver);
          receiver = next;
        }
      }
    }
    this.#byOp.clear();
    return all;
  }
}
