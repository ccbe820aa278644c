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
  | { kind: "refuse"; reply: string };

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

/**
 * The unanswered acquires of one key on one connection, in request order, and the replies
 * held behind them. A FIFO with a moving head: settling is O(1), not O(n) as `shift` is.
 */
class KeyQueue {
  items: Ticket[] = [];
  head = 0;

  get empty(): boolean {
    return this.head === this.items.length;
  }

  push(ticket: Ticket): void {
    this.items.push(ticket);
  }

  /** The first ticket if it is decided, removed; otherwise `undefined`. */
  shiftDecided(): Ticket | undefined {
    const first = this.items[this.head];
    if (first === undefined || first.reply === undefined) return undefined;
    this.items[this.head++] = undefined as unknown as Ticket;
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items = this.items.slice(this.head);
      this.head = 0;
    }
    return first;
  }

  /** The tickets still in the queue. */
  *[Symbol.iterator](): IterableIterator<Ticket> {
    for (let i = this.head; i < this.items.length; i++) yield this.items[i];
  }
}

/** Handles the request lines of one client connection. */
export class ClientSession implements LineHandler {
  #ctx: SessionContext;
  #sink: ReplySink;
  /** Per key: acquires of this connection not yet answered, in request order. */
  #queued = new Map<string, KeyQueue>();
  /** Acquires of this connection waiting in the table. */
  #waiting = 0;
  #closed = false;

  /** @param ctx Shared server state. @param sink Where replies go. */
  constructor(ctx: SessionContext, sink: ReplySink) {
    this.#ctx = ctx;
    this.#sink = sink;
  }

  /** Handles one request line. */
  line(text: string): void {
    // A request parked while the role was unsettled, whose connection closed meanwhile:
    // nothing may be granted to it.
    if (this.#closed) return;
    const gate = this.#ctx.gate?.();
    if (gate?.kind === "park") {
      this.#ctx.park!(this, text);
      return;
    }
    const request = parseRequest(text, { maxLeaseMs: this.#ctx.maxLeaseMs });
    if ("kind" in request) {
      this.#reply(request.op, request.key, `${request.op} ${request.key} E ${request.message}`);
      return;
    }
    const { op, key } = request;
    if (gate?.kind === "refuse") {
      this.#reply(op, key, `${op} ${key} ${gate.reply}`);
      return;
    }
    const table = this.#ctx.table;
    try {
      switch (request.op) {
        case "A": {
          if (this.#waiting >= MAX_QUEUED_PER_CONNECTION) {
            this.#reply(op, key, `A ${key} E too many queued acquires on this connection`);
            return;
          }
          const ticket = new Ticket(this, key);
          const outcome = table.acquire(key, request.leaseMs, request.waitMs, ticket);
          if (typeof outcome === "bigint") this.#reply(op, key, `A ${key} A ${outcome}`);
          else {
            ticket.waiter = outcome;
            this.#waiting++;
            let tickets = this.#queued.get(key);
            if (tickets === undefined) this.#queued.set(key, tickets = new KeyQueue());
            tickets.push(ticket);
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

  /**
   * Answers a line that is not valid UTF-8 with `E`, echoing its op and key where they are
   * intact (no replacement character), `-` otherwise.
   */
  invalid(text: string): void {
    if (text.endsWith("\r")) text = text.slice(0, -1);
    const [op, key] = text.split(" ");
    const intact = (field: string | undefined) =>
      field === undefined || field === "" || field.includes("\uFFFD") ? "-" : field;
    const echoOp = intact(op);
    const echoKey = intact(key);
    this.#reply(echoOp, echoKey, `${echoOp} ${echoKey} E line is not valid UTF-8`);
  }

  /** Decides a queued acquire and sends every reply of its key that is now in order. */
  settle(ticket: Ticket, reply: string): void {
    if (ticket.waiter !== undefined) this.#waiting--;
    ticket.waiter = undefined;
    ticket.reply = reply;
    const tickets = this.#queued.get(ticket.key);
    if (tickets === undefined) return;
    this.#sink.hold?.(reply.length + 1);
    for (let next = tickets.shiftDecided(); next; next = tickets.shiftDecided()) {
      this.#sink.hold?.(-(next.reply!.length + 1));
      this.#sink.send(next.reply!);
    }
    if (tickets.empty) this.#queued.delete(ticket.key);
  }

  /**
   * Answers a queued acquire with `status` (e.g. `E shutting down` or `M host:port`),
   * taking it out of the table first so it can never be granted afterwards.
   */
  answerQueued(ticket: Ticket, status: string): void {
    if (ticket.waiter === undefined) return;
    this.#ctx.table.cancel(ticket.waiter);
    this.settle(ticket, `A ${ticket.key} ${status}`);
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
    this.#waiting = 0;
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
    this.#sink.hold?.(line.length + 1);
  }
}
