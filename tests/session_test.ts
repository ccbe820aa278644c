/**
 * Unit tests of {@linkcode ClientSession}, the request side of one client connection, over
 * a real lock table on a fake clock and a fake reply sink: replies, reply order per key
 * behind a queued acquire, the gate of a cluster node (serve, park, refuse), answers to
 * queued acquires and the close of a connection. No sockets.
 *
 * @module
 */

import assert from "node:assert/strict";
import { NO_ACTIVE_NODE, type Refusal, SHUTTING_DOWN } from "../client/codec.ts";
import { LockTable } from "../server/engine/lock_table.ts";
import { ClientSession, type Ticket, ticketHooks } from "../server/session.ts";
import { TokensExhaustedError } from "../server/tokens.ts";
import {
  type Gate,
  MAX_QUEUED_PER_CONNECTION,
  type ReplySink,
  type SessionContext,
} from "../server/session_context.ts";

/** A sink that keeps the replies and the units held for it. */
class FakeSink implements ReplySink {
  lines: string[] = [];
  /** Units the session says it holds for this connection (must return to 0). */
  held = 0;
  send(line: string): void {
    this.lines.push(line);
  }
  hold(units: number): void {
    this.held += units;
    assert.ok(this.held >= 0, "held units must never go below 0");
  }
  /** The replies since the last call, forgotten. */
  take(): string[] {
    return this.lines.splice(0, this.lines.length);
  }
}

interface Harness {
  table: LockTable<Ticket>;
  ctx: SessionContext;
  /** Sets the fake clock (ms) and settles what is due, as the server's lease timer does. */
  at(ms: number): void;
  /** Sets the fake clock (ms) only: what is due waits for a request (a late lease timer). */
  clockOnly(ms: number): void;
  /** What the gate answers. */
  gate: Gate;
  /** Lines parked by the gate, with their session. */
  parked: [ClientSession, string][];
  fatal: Error[];
  /** When true, the token source is exhausted. */
  exhausted: boolean;
  /** A new connection. */
  connect(): { session: ClientSession; sink: FakeSink };
}

function harness(): Harness {
  let now = 0;
  let token = 0n;
  const h: Harness = {
    table: new LockTable<Ticket>({
      clock: () => now,
      nextToken: () => {
        if (h.exhausted) throw new TokensExhaustedError();
        return ++token;
      },
      hooks: ticketHooks,
    }),
    ctx: undefined as unknown as SessionContext,
    at(ms) {
      now = ms;
      h.table.advance();
    },
    clockOnly(ms) {
      now = ms;
    },
    gate: { kind: "serve" },
    parked: [],
    fatal: [],
    exhausted: false,
    connect() {
      const sink = new FakeSink();
      return { session: new ClientSession(h.ctx, sink), sink };
    },
  };
  h.ctx = {
    table: h.table,
    maxLeaseMs: 60_000,
    gate: () => h.gate,
    park: (session, line) => h.parked.push([session, line]),
    fatal: (error) => h.fatal.push(error),
  };
  return h;
}

Deno.test("ClientSession answers A, R and X", () => {
  const h = harness();
  const { session, sink } = h.connect();
  session.line("A k 30 0");
  assert.deepEqual(sink.take(), ["A k A 1"]);
  session.line("X k 1 10");
  assert.deepEqual(sink.take(), ["X k X"]);
  assert.equal(h.table.holder("k")?.deadline, 10_000);
  session.line("X k 2 10");
  assert.deepEqual(sink.take(), ["X k N"]);
  session.line("R k 2");
  assert.deepEqual(sink.take(), ["R k N"]);
  session.line("R k 1");
  assert.deepEqual(sink.take(), ["R k R"]);
  assert.equal(h.table.held, 0);
  session.line("X k 1 10");
  assert.deepEqual(sink.take(), ["X k N"]);
  session.line("A é 0.5 1");
  assert.deepEqual(sink.take(), ["A é A 2"]);
  assert.equal(sink.held, 0);
});

Deno.test("ClientSession answers an invalid line with E, echoing its op and key", () => {
  const h = harness();
  const { session, sink } = h.connect();
  const cases: [string, string][] = [
    ["A k -1 0", "A k E "],
    ["A k 90 0", "A k E "], // above maxLeaseMs
    ["R k 0", "R k E "],
    ["X k 1", "X k E "],
    ["Z k 1", "Z k E unknown op"],
    ["?", "? - E unknown op"],
    ["A", "A - E missing key"],
    // docs/protocol.md says `- - E missing op`; the codec echoes the 2nd field as the key.
    [" A k 1 0", "- "],
  ];
  for (const [line, prefix] of cases) {
    session.line(line);
    const replies = sink.take();
    assert.equal(replies.length, 1, line);
    assert.ok(replies[0].startsWith(prefix), `${JSON.stringify(line)}: ${replies[0]}`);
  }
  session.line(" A k 1 0");
  assert.match(sink.take()[0], /^- \S+ E missing op$/);
  session.invalid("A k\uFFFD 30 0");
  session.invalid("R k 1\uFFFD\r");
  assert.deepEqual(sink.take(), [
    "A - E line is not valid UTF-8",
    "R k E line is not valid UTF-8",
  ]);
  assert.equal(h.table.held, 0, "nothing was acquired");
});

Deno.test("ClientSession answers a queued acquire when it is granted or times out", () => {
  const h = harness();
  const a = h.connect();
  const b = h.connect();
  a.session.line("A k 30 0");
  b.session.line("A k 10 0");
  b.session.line("A j 10 0");
  b.session.line("A k 10 2");
  assert.deepEqual(a.sink.take(), ["A k A 1"]);
  assert.deepEqual(b.sink.take(), ["A j A 2"], "queued acquires are not answered yet");
  assert.equal(h.table.waiting, 2);
  a.session.line("R k 1");
  assert.deepEqual(a.sink.take(), ["R k R"]);
  assert.deepEqual(b.sink.take(), ["A k A 3"]);
  h.at(2000);
  assert.deepEqual(b.sink.take(), ["A k T"]);
  assert.equal(h.table.waiting, 0);
  assert.equal(b.sink.held, 0);
});

Deno.test("ClientSession holds a later A k reply behind an earlier queued A k", async (t) => {
  await t.step("an immediate E waits for the grant", () => {
    const h = harness();
    const holder = h.connect();
    const { session, sink } = h.connect();
    holder.session.line("A k 30 0");
    session.line("A k 30 0"); // queued
    session.line("A k -1 0"); // E, held back
    session.invalid("A k 3\uFFFD 0"); // E for `A k`, held back
    session.line("R k 5"); // other op: not held
    session.line("A j 30 0"); // other key: not held
    const first = sink.take();
    assert.deepEqual(first.filter((l) => l.startsWith("A k ")), []);
    assert.ok(first.includes("R k N"));
    assert.ok(first.includes("A j A 2"));
    assert.ok(sink.held > 0, "the held replies are counted");
    holder.session.line("R k 1");
    const after = sink.take();
    assert.equal(after.length, 3);
    assert.equal(after[0], "A k A 3");
    assert.match(after[1], /^A k E lease/);
    assert.equal(after[2], "A k E line is not valid UTF-8");
    assert.equal(sink.held, 0);
  });
  await t.step("behind a timeout", () => {
    const h = harness();
    const holder = h.connect();
    const { session, sink } = h.connect();
    holder.session.line("A k 30 0");
    session.line("A k 30 1");
    session.line("A k");
    assert.deepEqual(sink.take(), []);
    h.at(1000);
    const replies = sink.take();
    assert.equal(replies.length, 2);
    assert.equal(replies[0], "A k T");
    assert.match(replies[1], /^A k E /);
    assert.equal(sink.held, 0);
  });
  await t.step("a second queued A k keeps its place, and so do replies behind it", () => {
    const h = harness();
    const holder = h.connect();
    const { session, sink } = h.connect();
    holder.session.line("A k 30 0");
    session.line("A k 30 0"); // queued 1st
    session.line("A k 30 1"); // queued 2nd, times out first
    session.line("A k x 0"); // E, behind both
    h.at(1000);
    assert.deepEqual(sink.take(), [], "the 2nd's T waits for the 1st");
    assert.ok(sink.held > 0);
    h.at(30_000); // the holder's lease runs out: the 1st is granted
    const replies = sink.take();
    assert.deepEqual(replies.slice(0, 2), ["A k A 2", "A k T"]);
    assert.match(replies[2], /^A k E lease/);
    assert.equal(replies.length, 3);
    assert.equal(sink.held, 0);
  });
  await t.step("other connections are not held back", () => {
    const h = harness();
    const holder = h.connect();
    const a = h.connect();
    const b = h.connect();
    holder.session.line("A k 30 0");
    a.session.line("A k 30 0");
    b.session.line("A k -1 0");
    assert.equal(b.sink.take().length, 1);
    assert.deepEqual(a.sink.take(), []);
  });
});

Deno.test("ClientSession parks requests while the gate says park", () => {
  const h = harness();
  const { session, sink } = h.connect();
  h.gate = { kind: "park" };
  session.line("A k 30 0");
  session.line("not even a request");
  assert.deepEqual(sink.take(), []);
  assert.deepEqual(h.parked.map(([s, line]) => [s === session, line]), [
    [true, "A k 30 0"],
    [true, "not even a request"],
  ]);
  assert.equal(h.table.held, 0, "a parked request changes nothing");
  h.gate = { kind: "serve" };
  for (const [s, line] of h.parked.splice(0)) s.line(line);
  assert.equal(sink.take()[0], "A k A 1");
  assert.equal(h.table.held, 1);
});

Deno.test("ClientSession refuses requests while the gate says refuse", async (t) => {
  await t.step("M host:port", () => {
    const h = harness();
    const { session, sink } = h.connect();
    h.gate = { kind: "refuse", refusal: { status: "M", text: "10.0.0.2:7321" } };
    session.line("A k 30 0");
    session.line("R k 1");
    session.line("X k 1 30");
    assert.deepEqual(sink.take(), [
      "A k M 10.0.0.2:7321",
      "R k M 10.0.0.2:7321",
      "X k M 10.0.0.2:7321",
    ]);
    session.line("A k -1 0");
    assert.match(sink.take()[0], /^A k E lease/, "an invalid line is rejected as invalid");
    assert.equal(h.table.held, 0);
  });
  await t.step("E no active node", () => {
    const h = harness();
    const { session, sink } = h.connect();
    h.gate = { kind: "refuse", refusal: { status: "E", text: NO_ACTIVE_NODE } };
    session.line("A k 30 0");
    session.line("X é 1 30");
    assert.deepEqual(sink.take(), ["A k E no active node", "X é E no active node"]);
    assert.equal(h.table.held, 0);
  });
  await t.step("a refusal of A k waits behind a queued A k", () => {
    const h = harness();
    const holder = h.connect();
    const { session, sink } = h.connect();
    holder.session.line("A k 30 0");
    session.line("A k 30 0");
    const refusal: Refusal = { status: "M", text: "10.0.0.2:7321" };
    h.gate = { kind: "refuse", refusal };
    session.line("A k 30 0");
    session.line("R k 1");
    assert.deepEqual(sink.take(), ["R k M 10.0.0.2:7321"]);
    // The node becomes a standby: its queued acquires are answered the same way.
    for (const ticket of [...h.table.queued()]) ticket.session.answerQueued(ticket, refusal);
    assert.deepEqual(sink.take(), ["A k M 10.0.0.2:7321", "A k M 10.0.0.2:7321"]);
    assert.equal(sink.held, 0);
  });
});

Deno.test("ClientSession answerQueued() answers a queued acquire once and takes it out", () => {
  const h = harness();
  const holder = h.connect();
  const { session, sink } = h.connect();
  holder.session.line("A k 30 0");
  session.line("A k 30 0");
  session.line("A k 30 0");
  const tickets = [...h.table.queued()];
  assert.equal(tickets.length, 2);
  const shutdown: Refusal = { status: "E", text: SHUTTING_DOWN };
  session.answerQueued(tickets[1], shutdown);
  assert.deepEqual(sink.take(), [], "the 2nd waits for the 1st");
  assert.equal(h.table.waiting, 1);
  session.answerQueued(tickets[0], shutdown);
  assert.deepEqual(sink.take(), ["A k E shutting down", "A k E shutting down"]);
  assert.equal(h.table.waiting, 0);
  session.answerQueued(tickets[0], shutdown);
  assert.deepEqual(sink.take(), [], "answered once");
  holder.session.line("R k 1");
  assert.deepEqual(sink.take(), [], "never granted afterwards");
  assert.equal(h.table.held, 0);
  assert.equal(sink.held, 0);
});

Deno.test("ClientSession closed() drops its waiters: nothing is granted to a closed connection", () => {
  const h = harness();
  const holder = h.connect();
  const gone = h.connect();
  const next = h.connect();
  holder.session.line("A k 30 0");
  holder.session.line("A j 30 0");
  gone.session.line("A k 30 0");
  gone.session.line("A k -1 0"); // held behind
  gone.session.line("A j 30 5");
  next.session.line("A k 30 0");
  assert.equal(h.table.waiting, 3);
  gone.session.closed();
  gone.session.closed();
  assert.equal(h.table.waiting, 1, "only the other connection's waiter is left");
  assert.deepEqual(
    gone.sink.take(),
    ["A k E lease must be a positive number of seconds"],
    "the reply decided behind a dropped acquire still goes out, once",
  );
  holder.session.line("R k 1");
  assert.deepEqual(next.sink.take(), ["A k A 3"], "the lock passes over the closed one");
  holder.session.line("R j 2");
  h.at(10_000);
  assert.equal(h.table.holder("j"), undefined, "j is free: not granted to the closed one");
  assert.deepEqual(gone.sink.take(), []);
  // A parked line re-run after the close changes nothing.
  gone.session.line("A free 30 0");
  assert.deepEqual(gone.sink.take(), []);
  assert.equal(h.table.holder("free"), undefined);
});

Deno.test("ClientSession keeps a held lock when its connection closes", () => {
  const h = harness();
  const { session, sink } = h.connect();
  session.line("A k 30 0");
  assert.deepEqual(sink.take(), ["A k A 1"]);
  session.closed();
  assert.equal(h.table.holder("k")?.token, 1n, "the lease covers a client that died");
});

Deno.test("ClientSession answers E and reports a fatal error when tokens are exhausted", () => {
  const h = harness();
  const { session, sink } = h.connect();
  session.line("A k 30 0");
  sink.take();
  h.exhausted = true;
  session.line("A j 30 0");
  assert.deepEqual(sink.take(), ["A j E fencing tokens are exhausted"]);
  assert.equal(h.fatal.length, 1);
  assert.ok(h.fatal[0] instanceof TokensExhaustedError);
  assert.equal(h.table.holder("j"), undefined);
  session.line("R k 1"); // nobody waits: freeing needs no token
  assert.deepEqual(sink.take(), ["R k R"]);
});

Deno.test("ClientSession refuses an acquire that would queue past the server's --max-waiters", () => {
  const h = harness();
  h.ctx.maxWaiters = 2;
  const a = h.connect();
  const b = h.connect();
  const c = h.connect();
  a.session.line("A k 30 0");
  a.session.line("A j 30 0");
  b.session.line("A k 30 0");
  b.session.line("A j 30 0");
  assert.deepEqual(a.sink.take(), ["A k A 1", "A j A 2"]);
  assert.equal(h.table.waiting, 2);
  c.session.line("A k 30 0");
  c.session.line("A j 30 5");
  assert.deepEqual(c.sink.take(), [
    "A k E too many queued acquires on this server",
    "A j E too many queued acquires on this server",
  ]);
  assert.equal(h.table.waiting, 2, "a refused acquire changes nothing");
  c.session.line("A free 30 0");
  assert.deepEqual(c.sink.take(), ["A free A 3"], "a free key is granted at the cap");
  a.session.line("R k 1");
  assert.deepEqual(a.sink.take(), ["R k R"]);
  assert.deepEqual(b.sink.take(), ["A k A 4"], "the queue moves on as before");
  c.session.line("A k 30 0");
  assert.deepEqual(c.sink.take(), [], "below the cap again: queued");
  assert.equal(h.table.waiting, 2);
  b.session.line("R k 4");
  assert.deepEqual(c.sink.take(), ["A k A 5"]);
});

Deno.test("ClientSession refuses an acquire that would queue past the connection's limit", () => {
  const h = harness();
  const holder = h.connect();
  const { session, sink } = h.connect();
  holder.session.line("A k 30 0");
  holder.session.line("A h 30 0");
  for (let i = 0; i < MAX_QUEUED_PER_CONNECTION; i++) session.line("A k 30 0");
  assert.equal(h.table.waiting, MAX_QUEUED_PER_CONNECTION);
  session.line("A h 30 0");
  assert.deepEqual(sink.take(), ["A h E too many queued acquires on this connection"]);
  session.line("A other 30 0");
  assert.deepEqual(sink.take(), ["A other A 3"], "a free key is still granted");
  h.connect().session.line("A h 30 0");
  assert.equal(h.table.waiting, MAX_QUEUED_PER_CONNECTION + 1, "other connections still queue");
});

Deno.test("ClientSession settles a wait that ran out before checking the caps: its place is free", () => {
  const h = harness();
  h.ctx.maxWaiters = 1;
  const a = h.connect();
  const b = h.connect();
  const c = h.connect();
  a.session.line("A k 60 0");
  b.session.line("A k 60 0.1"); // queued, its wait runs out at 100 ms
  h.clockOnly(200); // ... and the lease timer has not run yet
  c.session.line("A k 60 0");
  assert.deepEqual(b.sink.take(), ["A k T"], "the run-out wait is answered first");
  assert.deepEqual(c.sink.take(), [], "queued in the place it freed");
  assert.equal(h.table.waiting, 1);
  assert.deepEqual(a.sink.take(), ["A k A 1"]);
});
