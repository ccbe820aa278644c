/**
 * The client side of one connection: parses request lines (docs/protocol.md), applies them
 * to the lock table and queues the replies, keeping replies with the same (op, key) in
 * request order even when an earlier acquire is still queued.
 *
 * @module
 */

import {
  AUTH_REQUIRED,
  CREDENTIAL_REVOKED,
  errorReply,
  extendReply,
  grantReply,
  invalidLineError,
  isHello,
  isInspection,
  OUTSIDE_PREFIX,
  parseInspection,
  parseRequest,
  PROBE,
  type Refusal,
  refusalReply,
  type RejectionReason,
  releaseReply,
  type RequestError,
  timeoutReply,
} from "../client/codec.ts";
import { type OrderedReply, ReplyOrder } from "../client/reply_order.ts";
import type { LockTableHooks, Waiter } from "./engine/lock_table.ts";
import type { LineHandler } from "./line_socket.ts";
import {
  answerHello,
  answerInvalidHello,
  type HelloContext,
  type HelloOutcome,
  type Identity,
} from "./hello.ts";
import { TokensExhaustedError } from "./tokens.ts";
import { type Inspection, inspectKeyReply, locksPageReply, statusReplyOf } from "./inspect.ts";
import { reasonOf } from "./metrics.ts";
import {
  DEFAULT_MAX_WAITERS,
  MAX_QUEUED_PER_CONNECTION,
  type ReplySink,
  type SessionContext,
} from "./session_context.ts";

const FULL_CONNECTION = "too many queued acquires on this connection";
const FULL_SERVER = "too many queued acquires on this server";

/** One queued acquire: its place among the replies of its key. */
export class Ticket implements OrderedReply {
  /** The reply once decided; `undefined` while the acquire is queued. */
  reply: string | undefined = undefined;
  /** The table's waiter, while queued. */
  waiter: Waiter<Ticket> | undefined = undefined;
  /** The grant's token, once granted. */
  token: bigint | undefined = undefined;
  /** @param session Owner. @param key The key. */
  constructor(readonly session: ClientSession, readonly key: string) {}
}

/** Sends a queued acquire's reply once it is in order: one function for every session. */
function sendDecided(entry: Ticket): void {
  entry.session.sendInOrder(entry);
}

/** The lock table hooks that route outcomes of queued acquires back to their sessions. */
export const ticketHooks: LockTableHooks<Ticket> = {
  granted(ticket, key, token) {
    ticket.token = token;
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
  #order: ReplyOrder<Ticket> | undefined; // made on the first queued acquire
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
  #ownerEpoch = -1;
  #ownerUnbound = 0;
  #ownerBound = 0;
  /** Replies decided at once so far (a timed request is observed if it was). */
  #answered = 0;

  /** Sends a decided reply that is now in order (see {@linkcode sendDecided}). @internal */
  sendInOrder(entry: Ticket): void {
    this.#sink.hold?.(-(entry.reply!.length + 1));
    this.#sink.send(entry.reply!, entry.key, entry.token);
  }

  /** @param ctx Shared server state. @param sink Where replies go. */
  constructor(ctx: SessionContext, sink: ReplySink) {
    this.#ctx = ctx;
    this.#sink = sink;
  }

  /** The connection's identity after its hello. */
  get identity(): Identity | undefined {
    return this.#identity;
  }

  /** Handles one request line (counted, and one in a few timed, when metrics are on). */
  line(text: string): void {
    const metrics = this.#ctx.metrics;
    const start = metrics === undefined ? -1 : metrics.request();
    if (start < 0) return this.#line(text);
    const answered = this.#answered;
    this.#line(text);
    if (this.#answered !== answered) metrics!.answered(start);
  }

  /** Handles a line parked earlier (not counted again). */
  resume(text: string): void {
    this.#line(text);
  }

  #line(text: string): void {
    // A request parked while the role was unsettled, whose connection closed meanwhile:
    // nothing may be granted to it.
    if (this.#closed || this.#refused) return;
    if (isHello(text)) {
      this.#hello(text);
      return;
    }
    if (this.#unauthenticated()) {
      const [op, key] = text.split(" ", 2);
      return this.#refuseUnauthenticated(op || "-", key || "-");
    }
    if (this.#identity?.credential !== undefined && this.#revoked(text)) return;
    this.#started = true;
    if (this.#ctx.inspect !== undefined && isInspection(text)) {
      return this.#inspect(text, this.#ctx.inspect);
    }
    const gate = this.#ctx.gate?.();
    if (gate?.kind === "park") {
      this.#ctx.park!(this, text);
      return;
    }
    const request = parseRequest(text, this.#ctx);
    if ("kind" in request) {
      this.#reject(request);
      return;
    }
    const { op, key } = request;
    const prefix = this.#identity?.prefix;
    if (prefix && !key.startsWith(prefix)) {
      this.#count("prefix");
      this.#reply(op, key, errorReply(op, key, OUTSIDE_PREFIX));
      return;
    }
    if (gate?.kind === "refuse") return this.#refusal(op, key, gate.refusal);
    const table = this.#ctx.table;
    try {
      switch (request.op) {
        case "A": {
          const full = this.#full(key);
          if (full !== undefined) {
            this.#count("limits");
            this.#reply(op, key, errorReply(op, key, full));
            return;
          }
          if (request.session && this.#identity?.session === undefined) {
            this.#count("bad_request");
            this.#reply(op, key, errorReply(op, key, "a session-bound acquire needs a session"));
            return;
          }
          const ticket = new Ticket(this, key);
          const owner = this.#ownerOf(request.session === true);
          const outcome = table.acquire(key, request.leaseMs, request.waitMs, ticket, owner);
          if (typeof outcome === "bigint") this.#reply(op, key, grantReply(key, outcome), outcome);
          else {
            ticket.waiter = outcome;
            this.#waiting++;
            (this.#order ??= new ReplyOrder()).push(key, ticket);
          }
          return;
        }
        case "R":
          this.#reply(op, key, releaseReply(key, table.release(key, request.token)));
          return;
        case "X":
          this.#reply(op, key, extendReply(key, table.extend(key, request.token, request.leaseMs)));
          return;
      }
    } catch (error) {
      this.#exhausted(op, key, error);
    }
  }

  /**
   * Why an acquire of `key` may not queue now, if it may not: this connection or the server
   * has as many acquires queued as allowed (docs/protocol.md, "Limits and overload"). An
   * acquire of a free key is granted at once, never refused.
   */
  #full(key: string): string | undefined {
    const table = this.#ctx.table;
    const max = this.#ctx.maxWaiters ?? DEFAULT_MAX_WAITERS;
    if (this.#waiting < MAX_QUEUED_PER_CONNECTION && table.waiting < max) return;
    // At a cap: holder() settles what is due first (a wait that ran out frees its place).
    if (table.holder(key) === undefined) return;
    if (this.#waiting >= MAX_QUEUED_PER_CONNECTION) return FULL_CONNECTION;
    if (table.waiting >= max) return FULL_SERVER;
  }

  /** `I` and `L` (served like any request: gate, prefix), and `S` (answered in every role). */
  #inspect(text: string, inspection: Inspection): void {
    const request = parseInspection(text);
    if ("kind" in request) return this.#reject(request);
    const { op, key } = request;
    if (request.op === "S") return this.#reply(op, key, statusReplyOf(inspection));
    const gate = this.#ctx.gate?.();
    if (gate?.kind === "park") return this.#ctx.park!(this, text);
    const allowed = this.#identity?.prefix ?? "";
    if (!(request.op === "I" ? key : request.prefix ?? allowed).startsWith(allowed)) {
      this.#count("prefix");
      return this.#reply(op, key, errorReply(op, key, OUTSIDE_PREFIX));
    }
    if (gate?.kind === "refuse") return this.#refusal(op, key, gate.refusal);
    const table = this.#ctx.table;
    try {
      table.advance(); // Settles what is due, as every request does; changes nothing else.
    } catch (error) {
      return this.#exhausted(op, key, error);
    }
    this.#reply(
      op,
      key,
      request.op === "I"
        ? inspectKeyReply(table, inspection, request)
        : locksPageReply(table, inspection, request, allowed),
    );
  }

  /** Answers a refusal of the gate (`M`, or `E` counted by its reason). */
  #refusal(op: string, key: string, refusal: Refusal): void {
    if (refusal.status === "E") this.#count(reasonOf(refusal.text));
    this.#reply(op, key, refusalReply(op, key, refusal));
  }

  /** The token source is exhausted (anything else is rethrown): `E`, and the server stops. */
  #exhausted(op: string, key: string, error: unknown): void {
    if (!(error instanceof TokensExhaustedError)) throw error;
    this.#count("other");
    this.#reply(op, key, errorReply(op, key, "fencing tokens are exhausted"));
    this.#ctx.fatal(error);
  }

  #count(reason: RejectionReason): void {
    this.#ctx.metrics?.reject(reason);
  }

  /**
   * Answers a line that is not valid UTF-8 with `E` (see {@linkcode invalidLineError}). It
   * counts for the first-line rules like any line: a hello among such lines is a malformed
   * one (its fields not echoed), and with auth on any other is refused as a first line.
   */
  invalid(text: string): void {
    if (this.#closed || this.#refused) return;
    const error = invalidLineError(text);
    if (isHello(text)) {
      return this.#answerHello(
        answerInvalidHello(this.#helloContext(), this.#sink.remote ?? "-", this.#late()),
      );
    }
    if (this.#unauthenticated()) return this.#refuseUnauthenticated(error.op, error.key);
    this.#started = true;
    this.#reject(error);
  }

  /** With auth on, no valid hello came: every line but a hello is refused. */
  #unauthenticated(): boolean {
    return this.#identity === undefined && this.#ctx.hello?.credentials?.() !== undefined;
  }

  /**
   * Whether the credential this connection signed in with was removed or given another
   * secret by an auth file reload (docs/security.md): the request `text` is then answered
   * `E credential revoked` and the connection closes. A credential still valid keeps serving,
   * under its prefix as reloaded.
   */
  #revoked(text: string): boolean {
    const identity = this.#identity!;
    const signed = identity.credential!;
    const now = this.#ctx.hello?.credentials?.();
    if (now === undefined || now === signed.by) return false;
    const grant = now.recheck(signed.grant);
    if (grant !== undefined) {
      identity.credential = { grant, by: now };
      identity.prefix = grant.prefix;
      return false;
    }
    const [op, key] = text.split(" ", 2);
    const why = `its credential ${signed.grant.name} was revoked or changed`;
    this.#closeWith(op || "-", key || "-", CREDENTIAL_REVOKED, "closed", why, "auth-revoked");
    return true;
  }

  /** Answers `<op> <key> E authentication required` and closes (auth on, no hello first). */
  #refuseUnauthenticated(op: string, key: string): void {
    const why = "its first line was not a hello";
    this.#closeWith(op, key, AUTH_REQUIRED, "refused", why, "auth-refused");
  }

  /** Logs `<done> <remote>: <why>` as `event`, answers `<op> <key> E <message>`, closes. */
  #closeWith(
    op: string,
    key: string,
    message: string,
    done: string,
    why: string,
    event: string,
  ): void {
    const remote = this.#sink.remote ?? "-";
    this.#ctx.hello?.log?.warn(`${done} ${remote}: ${why}`, { event, remote });
    this.#refuse(errorReply(op, key, message), 0);
  }

  /** Decides a queued acquire and sends every reply of its key that is now in order. */
  settle(ticket: Ticket, reply: string): void {
    if (ticket.waiter !== undefined) this.#waiting--;
    ticket.waiter = undefined;
    ticket.reply = reply;
    if (this.#order === undefined || !this.#order.has(ticket.key)) return;
    this.#sink.hold?.(reply.length + 1);
    this.#order.drain(ticket.key, sendDecided);
  }

  /**
   * Answers a queued acquire with `refusal` (e.g. `E shutting down` or `M host:port`),
   * taking it out of the table first so it can never be granted afterwards.
   */
  answerQueued(ticket: Ticket, refusal: Refusal): void {
    if (ticket.waiter === undefined) return;
    this.#ctx.table.cancel(ticket.waiter);
    if (refusal.status === "E") this.#count(reasonOf(refusal.text));
    this.settle(ticket, refusalReply("A", ticket.key, refusal));
  }

  /**
   * The connection's input ended (closed, or its sending side shut down): what is due is
   * settled first, then its queued acquires leave the table, never granted nor answered, and
   * the replies already decided behind them (an `E`, a `T`) are sent now, each key's in
   * request order (docs/protocol.md, "Semantics"; the sink still writes them unless the
   * connection is gone).
   */
  closed(): void {
    if (this.#closed) return;
    // Like any request, the close first settles what is due: a wait limit that ran out
    // before it was read is answered `T` (a late timer never changes an outcome).
    if (this.#waiting > 0) this.#ctx.settleDue?.();
    this.#closed = true;
    const session = this.#identity?.session;
    if (session !== undefined && this.#ctx.grace !== undefined) {
      this.#ctx.grace.detach(session, this.#ctx.hello?.clock() ?? performance.now());
    }
    for (const ticket of this.#order?.entries() ?? []) {
      if (ticket.reply !== undefined) this.sendInOrder(ticket);
      else if (ticket.waiter !== undefined) this.#ctx.table.cancel(ticket.waiter);
      ticket.waiter = undefined;
    }
    this.#order?.clear();
    this.#waiting = 0;
  }

  #hello(text: string): void {
    const remote = this.#sink.remote ?? "-";
    this.#answerHello(answerHello(this.#helloContext(), text, remote, this.#late()));
  }

  /** What answering a hello needs (a server without sessions: just the clock). */
  #helloContext(): HelloContext {
    return this.#ctx.hello ?? { clock: () => performance.now() };
  }

  /** Whether a hello comes too late: other lines came first, or it already said hello. */
  #late(): boolean {
    return this.#started || this.#identity !== undefined;
  }

  #answerHello(outcome: HelloOutcome): void {
    if (outcome.kind === "close") {
      this.#refuse(outcome.reply, outcome.delayMs);
      return;
    }
    if (outcome.kind === "ok") {
      this.#identity = outcome.identity;
      if (outcome.identity.session !== undefined) this.#ctx.grace?.attach(outcome.identity.session);
    } else this.#count("bad_request");
    this.#sink.send(outcome.reply);
  }

  /** Answers `reply` after `delayMs`, then closes; nothing else is answered meanwhile. */
  #refuse(reply: string, delayMs: number): void {
    this.#refused = true;
    this.#count("auth");
    const answer = () => {
      this.#sink.send(reply);
      this.#sink.closeAfterFlush?.();
    };
    if (delayMs > 0 && this.#ctx.later !== undefined) this.#ctx.later(delayMs, answer);
    else answer();
  }

  /** The owner id of this connection's grants (bound ones: its session's bound owner). */
  #ownerOf(bound: boolean): number {
    const identity = this.#identity;
    const owners = this.#ctx.owners;
    if (identity === undefined || owners === undefined) return 0;
    if (this.#ownerEpoch !== owners.epoch) {
      this.#ownerEpoch = owners.epoch;
      this.#ownerUnbound = this.#ownerBound = 0;
    }
    if (bound) {
      this.#ownerBound ||= owners.intern(identity.name, identity.session, true).id;
      return this.#ownerBound;
    }
    this.#ownerUnbound ||= owners.intern(identity.name, identity.session, false).id;
    return this.#ownerUnbound;
  }

  #reject(error: RequestError): void {
    if (error.op !== PROBE) this.#count("bad_request");
    this.#reply(error.op, error.key, errorReply(error.op, error.key, error.message));
  }

  /** Sends a reply to (op, key), behind any earlier unanswered acquire of the same key. */
  #reply(op: string, key: string, line: string, token?: bigint): void {
    this.#answered++;
    if (op !== "A" || this.#order === undefined || !this.#order.has(key)) {
      this.#sink.send(line, key, token);
      return;
    }
    const held = new Ticket(this, key);
    held.reply = line;
    held.token = token;
    this.#order.push(key, held); // (made: has(key) was true)
    this.#sink.hold?.(line.length + 1);
  }
}
