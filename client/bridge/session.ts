/**
 * The bridge's sessions, runtime-neutral: each WebSocket (any object with the standard
 * `WebSocket` surface) relays its lines through a `LockClient`, keeps reply order per
 * (op, key), confines its keys to a prefix and tracks what its browser client holds. The
 * WebSockets of one browser `LockClient` share a group: its grants are released when the
 * last of them closes.
 *
 * @module
 */

import {
  echoId,
  errorReply,
  formatReply,
  formatRequest,
  inspectLine,
  isInspection,
  keyError,
  LINE_TOO_LONG,
  MAX_KEY_BYTES,
  MAX_LINE_BYTES,
  NO_ACTIVE_NODE,
  parseInspection,
  parseRequest,
  type Reply,
  utf8Length,
} from "../codec.ts";
import { type OrderedReply, ReplyOrder } from "../reply_order.ts";
import type { ClientInternals, LockClient } from "../client.ts";

/** The part of a standard `WebSocket` a session uses. */
export interface BridgeSocket {
  /** `WebSocket.CONNECTING` (0), `OPEN` (1), `CLOSING` (2) or `CLOSED` (3). */
  readonly readyState: number;
  /** Sends a text frame. */
  send(data: string): void;
  /** Closes with a code and reason. */
  close(code?: number, reason?: string): void;
  /** Receives frames. */
  onmessage: ((event: MessageEvent) => void) | null;
  /** The socket closed. */
  onclose: ((event: CloseEvent) => void) | null;
  /** A socket error (a close follows). */
  onerror: ((event: Event) => void) | null;
}

const CONNECTING = 0;
const OPEN = 1;

/** Whether `prefix` can be put before keys without letting a page write raw protocol. */
export function validPrefix(prefix: unknown): prefix is string {
  return typeof prefix === "string" && (prefix === "" || keyError(prefix) === undefined);
}

/**
 * The sessions of one browser client (its WebSocket connections share a `client` id): the
 * grants any of them obtained, released when the last session closes (`releaseOnClose`).
 */
export class ClientGroup {
  /** How this client's requests reach lockd. */
  readonly relay: ClientInternals;
  /** Its own connection to lockd (with `servers`), closed when the client leaves. */
  #client: LockClient | undefined;
  /** Grants held: lockd key → tokens. */
  #held = new Map<string, Set<bigint>>();
  #sessions = 0;
  #releaseOnClose: boolean;
  #onEmpty: () => void;

  /**
   * @param relay How requests reach lockd.
   * @param client The group's own client, closed when it empties (none when shared).
   * @param releaseOnClose Release held locks when the last session closes.
   * @param onEmpty Called when the last session left.
   */
  constructor(
    relay: ClientInternals,
    client: LockClient | undefined,
    releaseOnClose: boolean,
    onEmpty: () => void,
  ) {
    this.relay = relay;
    this.#client = client;
    this.#releaseOnClose = releaseOnClose;
    this.#onEmpty = onEmpty;
  }

  /** A session joined. */
  join(): void {
    this.#sessions++;
  }

  /** Whether this client holds the grant (`key`, `token`). */
  holds(key: string, token: bigint): boolean {
    return this.#held.get(key)?.has(token) ?? false;
  }

  /** This client obtained the grant (`key`, `token`). */
  hold(key: string, token: bigint): void {
    let tokens = this.#held.get(key);
    if (tokens === undefined) this.#held.set(key, tokens = new Set());
    tokens.add(token);
  }

  /** The grant (`key`, `token`) is gone. */
  unhold(key: string, token: bigint): void {
    const tokens = this.#held.get(key);
    tokens?.delete(token);
    if (tokens?.size === 0) this.#held.delete(key);
  }

  /**
   * A session closed; the last one out releases what the client held, then closes its own
   * connection to lockd (with `servers`), which drops its queued acquires there.
   */
  async leave(): Promise<void> {
    if (--this.#sessions > 0) return;
    this.#onEmpty();
    const held = [...this.#held].flatMap(([key, tokens]) =>
      [...tokens].map((t) => [key, t] as const)
    );
    this.#held.clear();
    if (this.#releaseOnClose) {
      await Promise.all(held.map(([key, token]) => this.relay.release(key, token).catch(() => {})));
    }
    await this.#client?.close();
  }
}

/** How long a socket closed for an over-long frame waits for earlier replies, in ms. */
export const CLOSE_DRAIN_MS = 1000;

/** Options of {@linkcode BridgeSession}. */
export interface BridgeSessionOptions {
  /** Put before every key on the lockd side. */
  prefix: string;
  /** Most acquires in flight; more are answered `E`. */
  maxInFlight: number;
  /** The session ended (its cleanup is done). */
  onEnd: () => void;
}

/** One WebSocket: relays its lines, keeps reply order per (op, key), tracks its locks. */
export class BridgeSession {
  #socket: BridgeSocket;
  #group: ClientGroup;
  #options: BridgeSessionOptions;
  /** Replies not sent yet, per (op, key), in request order. */
  #order = new ReplyOrder<OrderedReply>();
  #inFlight = 0;
  #closed = false;
  /** A frame over the limit came: later frames are ignored, and the socket closes soon. */
  #closing = false;
  /** Requests relayed to lockd and not answered yet (their replies go out before a close). */
  #relaying = new Set<Promise<void>>();
  /** Bounds the wait for those replies once `closing`. */
  #drainTimer: ReturnType<typeof setTimeout> | undefined;
  #ended: Promise<void>;
  #end!: () => void;
  #cleanups: Promise<unknown>[] = [];
  #send = (entry: OrderedReply) => this.#frame(entry.reply!);

  /** @param socket An open WebSocket. @param group Its browser client. @param options Limits. */
  constructor(socket: BridgeSocket, group: ClientGroup, options: BridgeSessionOptions) {
    this.#socket = socket;
    this.#group = group;
    this.#options = options;
    group.join();
    this.#ended = new Promise((resolve) => this.#end = resolve);
    socket.onmessage = (event) => this.#message(event.data);
    socket.onclose = () => this.#closedBySocket();
    socket.onerror = () => {};
  }

  /** Closes the socket (going away) and resolves once cleanup is done. */
  end(): Promise<void> {
    const state = this.#socket.readyState;
    if (state === OPEN || state === CONNECTING) {
      try {
        this.#socket.close(1001, "bridge shutting down");
      } catch {
        // Already closing.
      }
    }
    this.#closedBySocket();
    return this.#ended;
  }

  #message(data: unknown): void {
    if (this.#closed || this.#closing) return;
    if (typeof data !== "string") {
      this.#frame(errorReply("-", "-", "binary frames are not supported"));
      return;
    }
    if (data.length > MAX_LINE_BYTES || utf8Length(data) > MAX_LINE_BYTES) {
      this.#closeTooLong();
      return;
    }
    if (data.includes("\n") || data.includes("\r")) {
      this.#frame(errorReply("-", "-", "one line per frame, without line ending"));
      return;
    }
    if (data === "") return;
    if (isInspection(data)) {
      this.#inspect(data);
      return;
    }
    const request = parseRequest(data, { maxLeaseMs: Number.MAX_SAFE_INTEGER });
    if ("kind" in request) {
      this.#reply(request.op, request.key, errorReply(request.op, request.key, request.message));
      return;
    }
    const { op, key } = request;
    const target = this.#options.prefix + key;
    if (utf8Length(target) > MAX_KEY_BYTES) { // The prefix itself is checked at upgrade.
      const room = MAX_KEY_BYTES - utf8Length(this.#options.prefix);
      this.#reply(op, key, errorReply(op, key, `key must be at most ${room} bytes here`));
      return;
    }
    // Only acquires count: a release or an extend must always get through.
    if (request.op === "A" && this.#inFlight >= this.#options.maxInFlight) {
      this.#reply(op, key, errorReply(op, key, "too many acquires in flight on this session"));
      return;
    }
    if (request.op !== "A" && !this.#group.holds(target, request.token)) {
      // Only grants of this client: tokens are easy to guess.
      this.#reply(op, key, formatReply({ op, key, status: "N" }));
      return;
    }
    const place: OrderedReply = { reply: undefined };
    this.#order.push(echoId(op, key), place);
    const counted = request.op === "A";
    if (counted) this.#inFlight++;
    const relay = this.#group.relay;
    this.#relayed(
      relay.exchange(op, target, formatRequest({ ...request, key: target })).then((reply) => {
        if (this.#closed) {
          // The page is gone: a late grant is released at once.
          if (reply.status === "A") this.#track(relay.release(target, reply.token!));
          return;
        }
        if (reply.status === "A") this.#group.hold(target, reply.token!);
        if (request.op !== "A" && (reply.status === "R" || reply.status === "N")) {
          this.#group.unhold(target, request.token);
        }
        this.#settle(op, key, place, formatReply({ ...reply, op, key } satisfies Reply));
      }, () => {
        // No usable lockd connection (or the client closed): let the page's client retry.
        this.#settle(op, key, place, errorReply(op, key, NO_ACTIVE_NODE));
      }).finally(() => {
        if (counted) this.#inFlight--;
      }),
    );
  }

  /**
   * Relays `I <key>` (docs/protocol.md, "Inspection") for a key of this session's prefix. The
   * node-wide requests, `S` and `L`, are not relayed: a page sees only keys it names.
   */
  #inspect(data: string): void {
    const request = parseInspection(data);
    if ("kind" in request) {
      this.#reply(request.op, request.key, errorReply(request.op, request.key, request.message));
      return;
    }
    if (request.op !== "I") {
      const { op, key } = request;
      this.#reply(op, key, errorReply(op, key, "not available through the bridge"));
      return;
    }
    const { op, key } = request;
    const target = this.#options.prefix + key;
    if (utf8Length(target) > MAX_KEY_BYTES) {
      const room = MAX_KEY_BYTES - utf8Length(this.#options.prefix);
      this.#reply(op, key, errorReply(op, key, `key must be at most ${room} bytes here`));
      return;
    }
    const place: OrderedReply = { reply: undefined };
    this.#order.push(echoId(op, key), place);
    this.#relayed(
      this.#group.relay.exchange(op, target, inspectLine(target)).then((reply) => {
        if (!this.#closed) this.#settle(op, key, place, formatReply({ ...reply, op, key }));
      }, () => {
        this.#settle(op, key, place, errorReply(op, key, NO_ACTIVE_NODE));
      }),
    );
  }

  /** Keeps `relaying` (which never rejects) among the requests a close waits for. */
  #relayed(relaying: Promise<void>): void {
    this.#relaying.add(relaying);
    relaying.finally(() => this.#relaying.delete(relaying));
  }

  /**
   * A frame over the limit: as over TCP (docs/protocol.md, "Framing"), the replies to the
   * requests before it go out first, then `E line too long`, then the socket closes (1009).
   * An acquire queued on lockd is not waited for past {@linkcode CLOSE_DRAIN_MS}: its grant,
   * if one comes later, is released at once, as for any closed socket.
   */
  #closeTooLong(): void {
    this.#closing = true;
    if (this.#relaying.size === 0) return this.#tooLong();
    this.#drainTimer = setTimeout(() => this.#tooLong(), CLOSE_DRAIN_MS);
    Promise.all(this.#relaying).then(() => this.#tooLong());
  }

  #tooLong(): void {
    clearTimeout(this.#drainTimer);
    if (this.#closed || this.#socket.readyState !== OPEN) return;
    this.#frame(errorReply("-", "-", LINE_TOO_LONG));
    this.#socket.close(1009, LINE_TOO_LONG);
  }

  /** Replies now, or behind earlier replies of the same (op, key). */
  #reply(op: string, key: string, line: string): void {
    const id = echoId(op, key);
    if (!this.#order.has(id)) this.#frame(line);
    else this.#order.push(id, { reply: line });
  }

  #settle(op: string, key: string, place: OrderedReply, line: string): void {
    place.reply = line;
    this.#order.drain(echoId(op, key), this.#send);
  }

  #frame(line: string): void {
    if (this.#socket.readyState === OPEN) this.#socket.send(line);
  }

  #track(promise: Promise<unknown>): void {
    this.#cleanups.push(promise.catch(() => {}));
  }

  #closedBySocket(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#drainTimer);
    this.#order.clear();
    // Done once the client's locks are released (when this was its last session). Requests
    // still in flight finish on their own: a grant that arrives for them is released at once.
    this.#track(this.#group.leave());
    Promise.all(this.#cleanups).finally(() => {
      this.#options.onEnd();
      this.#end();
    });
  }
}
