/**
 * The client side of one connection: parses request lines (docs/protocol.md), applies them
 * to the lock table and queues the replies, keeping replies with the same (op, key) in
 * request order even when an earlier acquire is still queued.
 *
 * @module
 */

import {
  AUTH_REQUIRED,
  errorReply,
  extendReply,
  grantReply,
  invalidLineError,
  OUTSIDE_PREFIX,
  parseRequest,
  type Refusal,
  refusalReply,
  releaseReply,
  type RequestError,
  timeoutReply,
} from "../client/codec.ts";
import { type OrderedReply, ReplyOrder } from "../client/reply_order.ts";
import type { LockTable, LockTableHooks, Waiter } from "./engine/lock_table.ts";
import type { LineHandler } from "./line_socket.ts";
import { answerHello, type HelloContext, type Identity, isHello } from "./hello.ts";
import type { Owners, SessionGrace } from "./owners.ts";
import { TokensExhaustedError } from "./tokens.ts";

/** Where a session's replies go: a connection, or a test double. */
export interface ReplySink {
  /** Queues one reply line (without `\n`). */
  send(line: string): void;
  /** Writes what is queued, then closes (a refused hello). Default: nothing. */
  close?(): void;
  /** The peer's `host:port` (failed hellos are slowed down per host). */
  remote?: string;
  /**
   * Accounts for `units` (UTF-16 units, negative to give back) of replies held in memory
   * before they can be sent, so the connection's output limits cover them too.
   */
  hold?(units: number): void;
}

/** Most acquires one connection may have queued at once; more are answered `E`. */
export const MAX_QUEUED_PER_CONNECTION = 1_000_000;

/** How a request is treated right now: served, parked until the role settles, or refused. */
export type Gate =
  | { kind: "serve" }
  | { kind: "park" }
  | { kind: "refuse"; refusal: Refusal };

/** What the sessions of one server share. */
export interface SessionContext {
  /** The lock table (its tickets are this module's {@linkcode Ticket}s). */
  table: LockTable<Ticket>;
  /** Longest lease a client may ask for, in ms. */
  maxLeaseMs: number;
  /**
   * Whether this node serves requests now; a cluster standby refuses them (`M host:port`,
   * `E no active node`) and a node handing over parks them. Default: serve.
   */
  gate?: () => Gate;
  /** Keeps a request line to handle again later (see {@linkcode Gate}). */
  park?: (session: ClientSession, line: string) => void;
  /** A fatal condition (tokens exhausted): the server must stop. */
  fatal(error: Error): void;
  /** Hellos: credentials, throttle, clock, log. Without it a hello is accepted as is. */
  hello?: HelloContext;
  /** Who holds what: interned at each grant (0 without a hello). */
  owners?: Owners;
  /** The sessions' grace period: connections of a session attach and detach. */
  grace?: SessionGrace;
  /** Runs `fn` after `ms` (a failed hello's answer is delayed). */
  later?(ms: number, fn: () => void): void;
}

/** One queued acquire: its place among the replies of its key. */
export class Ticket implements OrderedReply {
  /** The reply once decided; `undefined` while the acquire is queued. */
  reply: string | undefined = undefined;
  /** The table's waiter, while queued. */
  waiter: Waiter<Ticket> | undefined = undefined;
  /** @param session Owner. @param key The key. */
  constructor(readonly session: ClientSession, readonly key: string) {}
}

/** The lock table hooks that route outcomes of queued acquires back to their sessions. */
export const ticketHooks: LockTableHooks<Ticket> = {
  granted(ticket, key, token) {
    ticket.session.settle(ticket, grantReply(key, token));
  },
  timedOut(ticket, key) {
    ticket.session.settle(ticket, timeoutReply(key));
  },
};

/** Handles the request lines of one client connection. */
export class ClientSession implements LineHandler {
  #ctx: SessionContext;
  #sink: ReplySink;
  /** Per key: acquires of this connection not yet answered, and replies held behind them. */
  #order = new ReplyOrder<Ticket>();
  /** Acquires of this connection waiting in the table. */
  #waiting = 0;
  #closed = false;
  /** Who the connection is, after its hello. */
  #identity: Identity | undefined;
  /** Whether a line other than a hello came (a hello must be the first line). */
  #started = false;
  /** The connection was refused (auth): it answers nothing more and closes. */
  #refused = false;
  /** Owner ids of this connection's grants (unbound, bound), valid for one owners epoch. */
  #owner = { epoch: -1, unbound: 0, bound: 0 };
  #send = (entry: Ticket) => {
    this.#sink.hold?.(-(entry.reply!.length + 1));
    this.#sink.send(entry.reply!);
  };

  /** @param ctx Shared server state. @param sink Where replies go. */
  constructor(ctx: SessionContext, sink: ReplySink) {
    this.#ctx = ctx;
    this.#sink = sink;
  }

  /** The connection's identity after its hello. */
  get identity(): Identity | undefined {
    return this.#identity;
  }

  /** Handles one request line. */
  line(text: string): void {
    // A request parked while the role was unsettled, whose connection closed meanwhile:
    // nothing may be granted to it.
    if (this.#closed || this.#refused) return;
    if (isHello(text)) {
      this.#hello(text);
      return;
    }
    if (this.#identity === undefined && this.#ctx.hello?.credentials?.() !== undefined) {
      // With auth on, the first line must be a valid hello.
      const [op, key] = text.split(" ", 2);
      this.#refuse(errorReply(op || "-", key || "-", AUTH_REQUIRED), 0);
      return;
    }
    this.#started = true;
    const gate = this.#ctx.gate?.();
    if (gate?.kind === "park") {
      this.#ctx.park!(this, text);
      return;
    }
    const request = parseRequest(text, { maxLeaseMs: this.#ctx.maxLeaseMs });
    if ("kind" in request) {
      this.#reject(request);
      return;
    }
    const { op, key } = request;
    const prefix = this.#identity?.prefix;
    if (prefix && !key.startsWith(prefix)) {
      this.#reply(op, key, errorReply(op, key, OUTSIDE_PREFIX));
      return;
    }
    if (gate?.kind === "refuse") {
      this.#reply(op, key, refusalReply(op, key, gate.refusal));
      return;
    }
    const table = this.#ctx.table;
    try {
      switch (request.op) {
        case "A": {
          if (this.#waiting >= MAX_QUEUED_PER_CONNECTION) {
            this.#reply(
              op,
              key,
              errorReply(op, key, "too many queued acquires on this connection"),
            );
            return;
          }
          if (request.session && this.#identity?.session === undefined) {
            this.#reply(op, key, errorReply(op, key, "a session-bound acquire needs a session"));
            return;
          }
          const ticket = new Ticket(this, key);
          const owner = this.#ownerOf(request.session === true);
          const outcome = table.acquire(key, request.leaseMs, request.waitMs, ticket, owner);
          if (typeof outcome === "bigint") this.#reply(op, key, grantReply(key, outcome));
          else {
            ticket.waiter = outcome;
            this.#waiting++;
            this.#order.push(key, ticket);
          }
          return;
        }
        case "R":
          this.#sink.send(releaseReply(key, table.release(key, request.token)));
          return;
        case "X":
          this.#sink.send(extendReply(key, table.extend(key, request.token, request.leaseMs)));
          return;
      }
    } catch (error) {
      if (!(error instanceof TokensExhaustedError)) throw error;
      this.#reply(op, key, errorReply(op, key, "fencing tokens are exhausted"));
      this.#ctx.fatal(error);
    }
  }

  /** Answers a line that is not valid UTF-8 with `E` (see {@linkcode invalidLineError}). */
  invalid(text: string): void {
    this.#reject(invalidLineError(text));
  }

  /** Decides a queued acquire and sends every reply of its key that is now in order. */
  settle(ticket: Ticket, reply: string): void {
    if (ticket.waiter !== undefined) this.#waiting--;
    ticket.waiter = undefined;
    ticket.reply = reply;
    if (!this.#order.has(ticket.key)) return;
    this.#sink.hold?.(reply.length + 1);
    this.#order.drain(ticket.key, this.#send);
  }

  /**
   * Answers a queued acquire with `refusal` (e.g. `E shutting down` or `M host:port`),
   * taking it out of the table first so it can never be granted afterwards.
   */
  answerQueued(ticket: Ticket, refusal: Refusal): void {
    if (ticket.waiter === undefined) return;
    this.#ctx.table.cancel(ticket.waiter);
    this.settle(ticket, refusalReply("A", ticket.key, refusal));
  }

  /** The connection closed: its queued acquires leave the table (never granted to it). */
  closed(): void {
    if (this.#closed) return;
    this.#closed = true;
    const session = this.#identity?.session;
    if (session !== undefined && this.#ctx.grace !== undefined) {
      this.#ctx.grace.detach(session, this.#ctx.hello?.clock() ?? performance.now());
    }
    for (const ticket of this.#order.entries()) {
      if (ticket.waiter !== undefined) this.#ctx.table.cancel(ticket.waiter);
      ticket.waiter = undefined;
    }
    this.#order.clear();
    this.#waiting = 0;
  }

  #hello(text: string): void {
    const ctx = this.#ctx;
    const outcome = answerHello(
      ctx.hello ?? { clock: () => performance.now() },
      text,
      this.#sink.remote ?? "-",
      this.#started || this.#identity !== undefined,
    );
    if (outcome.kind === "close") {
      this.#refuse(outcome.reply, outcome.delayMs);
      return;
    }
    if (outcome.kind === "ok") {
      this.#identity = outcome.identity;
      if (outcome.identity.session !== undefined) ctx.grace?.attach(outcome.identity.session);
    }
    this.#sink.send(outcome.reply);
  }

  /** Answers `reply` after `delayMs`, then closes; nothing else is answered meanwhile. */
  #refuse(reply: string, delayMs: number): void {
    this.#refused = true;
    const answer = () => {
      this.#sink.send(reply);
      this.#sink.close?.();
    };
    if (delayMs > 0 && this.#ctx.later !== undefined) this.#ctx.later(delayMs, answer);
    else answer();
  }

  /** The owner id of this connection's grants (bound ones: its session's bound owner). */
  #ownerOf(bound: boolean): number {
    const identity = this.#identity;
    const owners = this.#ctx.owners;
    if (identity === undefined || owners === undefined) return 0;
    const cached = this.#owner;
    if (cached.epoch !== owners.epoch) {
      cached.epoch = owners.epoch;
      cached.unbound = cached.bound = 0;
    }
    if (bound) {
      cached.bound ||= owners.intern(identity.name, identity.session, true).id;
      return cached.bound;
    }
    cached.unbound ||= owners.intern(identity.name, identity.session, false).id;
    return cached.unbound;
  }

  #reject(error: RequestError): void {
    this.#reply(error.op, error.key, errorReply(error.op, error.key, error.message));
  }

  /** Sends a reply to (op, key), behind any earlier unanswered acquire of the same key. */
  #reply(op: string, key: string, line: string): void {
    if (op !== "A" || !this.#order.has(key)) {
      this.#sink.send(line);
      return;
    }
    const held = new Ticket(this, key);
    held.reply = line;
    this.#order.push(key, held);
    this.#sink.hold?.(line.length + 1);
  }
}
