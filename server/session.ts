/**
 * The client side of one connection: parses request lines (SPEC §2), applies them to the
 * lock table and queues the replies, keeping replies with the same (op, key) in request
 * order even when an earlier acquire is still queued.
 *
 * @module
 */

import { parseRequest } from "../client/codec.ts";
import type { LineHandler } from "./conn.ts";
import type { LockTable, LockTableHooks, Waiter } from "./lock_table.ts";
import { TokensExhaustedError } from "./tokens.ts";

/** Where a session's replies go: a connection, or a test double. */
export interface ReplySink {
  /** Queues one reply line (without `\n`). */
  send(line: string): void;
}

/** What the sessions of one server share. */
export interface SessionContext {
  /** The lock table (its tickets are this module's {@linkcode Ticket}s). */
  table: LockTable<Ticket>;
  /** Longest lease a client may ask for, in ms. */
  maxLeaseMs: number;
  /**
   * When set, this node does not serve requests: returns the reply status and text to give
   * instead (`M host:port` on a standby, `E no active node`, `E shutting down`).
   */
  refuse?: () => string | undefined;
  /** A fatal condition (tokens exhausted): the server must stop. */
  fatal(error: Error): void;
}

/** One queued acquire: the reply slot that keeps same-key replies in order. */
export class Ticket {
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
    ticket.session.settle(ticket, `A ${key} A ${token}`);
  },
  timedOut(ticket, key) {
    ticket.session.settle(ticket, `A ${key} T`);
  },
};

/** Handles the request lines of one client connection. */
export class ClientSession implements LineHandler {
  #ctx: SessionContext;
  #sink: ReplySink;
  /** Per key: acquires of this connection not yet answered, in request order. */
  #queued = new Map<string, Ticket[]>();
  #closed = false;

  /** @param ctx Shared server state. @param sink Where replies go. */
  constructor(ctx: SessionContext, sink: ReplySink) {
    this.#ctx = ctx;
    this.#sink = sink;
  }

  /** Handles one request line. */
  line(text: string): void {
    const request = parseRequest(text, { maxLeaseMs: this.#ctx.maxLeaseMs });
    if ("kind" in request) {
      this.#reply(request.op, request.key, `${request.op} ${request.key} E ${request.message}`);
      return;
    }
    const { op, key } = request;
    const refusal = this.#ctx.refuse?.();
    if (refusal !== undefined) {
      this.#reply(op, key, `${op} ${key} ${refusal}`);
      return;
    }
    const table = this.#ctx.table;
    try {
      switch (request.op) {
        case "A": {
          const ticket = new Ticket(this, key);
          const outcome = table.acquire(key, request.leaseMs, request.waitMs, ticket);
          if (typeof outcome === "bigint") this.#reply(op, key, `A ${key} A ${outcome}`);
          else {
            ticket.waiter = outcome;
            const tickets = this.#queued.get(key);
            if (tickets === undefined) this.#queued.set(key, [ticket]);
            else tickets.push(ticket);
          }
          return;
        }
        case "R":
          this.#sink.send(table.release(key, request.token) ? `R ${key} R` : `R ${key} N`);
          return;
        case "X":
          this.#sink.send(
            table.extend(key, request.token, request.leaseMs) ? `X ${key} X` : `X ${key} N`,
          );
          return;
      }
    } catch (error) {
      if (!(error instanceof TokensExhaustedError)) throw error;
      this.#reply(op, key, `${op} ${key} E fencing tokens are exhausted`);
      this.#ctx.fatal(error);
    }
  }

  /** Decides a queued acquire and sends every reply of its key that is now in order. */
  settle(ticket: Ticket, reply: string): void {
    ticket.waiter = undefined;
    ticket.reply = reply;
    const tickets = this.#queued.get(ticket.key);
    if (tickets === undefined) return;
    while (tickets.length > 0 && tickets[0].reply !== undefined) {
      this.#sink.send(tickets.shift()!.reply!);
    }
    if (tickets.length === 0) this.#queued.delete(ticket.key);
  }

  /**
   * Answers every queued acquire with `reply` (e.g. `E shutting down` or `M host:port`),
   * taking it out of the table first so it can never be granted afterwards.
   */
  answerQueued(status: string): void {
    for (const tickets of [...this.#queued.values()]) {
      for (const ticket of [...tickets]) {
        if (ticket.waiter === undefined) continue;
        this.#ctx.table.cancel(ticket.waiter);
        this.settle(ticket, `A ${ticket.key} ${status}`);
      }
    }
  }

  /** The connection closed: its queued acquires leave the table (never granted to it). */
  closed(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const tickets of this.#queued.values()) {
      for (const ticket of tickets) {
        if (ticket.waiter !== undefined) this.#ctx.table.cancel(ticket.waiter);
        ticket.waiter = undefined;
      }
    }
    this.#queued.clear();
  }

  /** Sends a reply to (op, key), behind any earlier unanswered acquire of the same key. */
  #reply(op: string, key: string, line: string): void {
    const tickets = op === "A" ? this.#queued.get(key) : undefined;
    if (tickets === undefined) {
      this.#sink.send(line);
      return;
    }
    const slot = new Ticket(this, key);
    slot.reply = line;
    tickets.push(slot);
  }
}
