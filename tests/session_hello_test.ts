/**
 * Unit tests of the hello side of {@linkcode ClientSession} (docs/protocol.md, "Sessions and
 * authentication"), in the manner of session_test.ts: a real lock table on a fake clock, a
 * fake reply sink, and a hello context with or without credentials. No sockets, no timers:
 * delayed answers are run by hand.
 *
 * @module
 */

import assert from "node:assert/strict";
import { AUTH_FAILED, AUTH_REQUIRED, CREDENTIAL_REVOKED, OUTSIDE_PREFIX } from "../client/codec.ts";
import { Credentials, Throttle } from "../server/auth.ts";
import { LockTable } from "../server/engine/lock_table.ts";
import type { Logger } from "../server/log.ts";
import { Owners, SessionGrace } from "../server/owners.ts";
import { ClientSession, type Ticket, ticketHooks } from "../server/session.ts";
import type { ReplySink, SessionContext } from "../server/session_context.ts";

const SESSION = "0123456789abcdef0123456789abcdef";
const SECRET = "billing-secret-0123456789";
const ADMIN_SECRET = "admin+secret!";
const CREDENTIALS = Credentials.parse(`billing ${SECRET} billing:\nadmin ${ADMIN_SECRET} *\n`);

/** A sink that keeps the replies, whether it was closed, and the units held for it. */
class FakeSink implements ReplySink {
  lines: string[] = [];
  closes = 0;
  held = 0;
  constructor(readonly remote: string) {}
  send(line: string): void {
    assert.equal(this.closes, 0, `sent ${JSON.stringify(line)} after close`);
    this.lines.push(line);
  }
  closeAfterFlush(): void {
    this.closes++;
  }
  hold(units: number): void {
    this.held += units;
  }
  /** The replies since the last call, forgotten. */
  take(): string[] {
    return this.lines.splice(0, this.lines.length);
  }
}

interface Harness {
  table: LockTable<Ticket>;
  ctx: SessionContext;
  owners: Owners;
  grace: SessionGrace;
  /** The fake clock, ms. */
  now: number;
  /** Whether the server requires credentials. */
  auth: boolean;
  /** The credentials in force (an auth file reload replaces them). */
  credentials: Credentials;
  /** Answers delayed by `ctx.later`, not run yet. */
  delayed: { ms: number; fn: () => void }[];
  log: string[];
  /** A new connection from `remote`. */
  connect(remote?: string): { session: ClientSession; sink: FakeSink };
}

function harness(auth: boolean): Harness {
  let token = 0n;
  const log: string[] = [];
  const logger: Logger = {
    debug: () => {},
    info: (m) => log.push(m),
    warn: (m) => log.push(m),
    error: (m) => log.push(m),
  };
  const h: Harness = {
    table: new LockTable<Ticket>({
      clock: () => h.now,
      nextToken: () => ++token,
      hooks: ticketHooks,
    }),
    ctx: undefined as unknown as SessionContext,
    owners: new Owners(),
    grace: new SessionGrace(5000),
    now: 0,
    auth,
    credentials: CREDENTIALS,
    delayed: [],
    log,
    connect(remote = "10.0.0.5:4000") {
      const sink = new FakeSink(remote);
      return { session: new ClientSession(h.ctx, sink), sink };
    },
  };
  h.ctx = {
    table: h.table,
    maxLeaseMs: 60_000,
    fatal: (error) => {
      throw error;
    },
    hello: {
      credentials: () => h.auth ? h.credentials : undefined,
      throttle: new Throttle(),
      clock: () => h.now,
      log: logger,
    },
    owners: h.owners,
    grace: h.grace,
    later: (ms, fn) => h.delayed.push({ ms, fn }),
  };
  return h;
}

Deno.test("ClientSession with auth answers a first line that is not a hello with E, then closes", () => {
  const cases: [string, string][] = [
    ["A k 30 0", `A k E ${AUTH_REQUIRED}`],
    ["R k 1", `R k E ${AUTH_REQUIRED}`],
    ["garbage", `garbage - E ${AUTH_REQUIRED}`],
    ["", `- - E ${AUTH_REQUIRED}`],
  ];
  for (const [line, reply] of cases) {
    const h = harness(true);
    const { session, sink } = h.connect();
    session.line(line);
    assert.deepEqual(sink.take(), [reply], JSON.stringify(line));
    assert.equal(sink.closes, 1, "closed");
    session.line(`HELLO 1 - w billing ${SECRET}`);
    session.line("A billing:k 30 0");
    assert.deepEqual(sink.take(), [], "nothing more is answered");
    assert.equal(h.table.held, 0, "nothing was acquired");
    assert.equal(session.identity, undefined);
  }
});

Deno.test("ClientSession with auth answers a wrong credential after the throttle delay, then closes", () => {
  const h = harness(true);
  const { session, sink } = h.connect("10.0.0.7:1000");
  session.line(`HELLO 1 ${SESSION} w billing ${ADMIN_SECRET}`);
  session.line("A billing:k 30 0"); // sent meanwhile: never answered
  assert.deepEqual(sink.take(), [], "no answer before the delay");
  assert.deepEqual(h.delayed.map((d) => d.ms), [100]);
  h.delayed.shift()!.fn();
  assert.deepEqual(sink.take(), [`HELLO - E ${AUTH_FAILED}`]);
  assert.equal(sink.closes, 1);
  assert.equal(h.table.held, 0);
  assert.equal(h.grace.live(SESSION), false, "a refused session is not attached");
  assert.equal(h.log.length, 1);
  assert.ok(!h.log[0].includes(ADMIN_SECRET), h.log[0]);

  // The next failure from that host waits longer; another host's does not.
  const again = h.connect("10.0.0.7:1001");
  again.session.line(`HELLO 1 - w nobody ${SECRET}`);
  const elsewhere = h.connect("10.0.0.8:1000");
  elsewhere.session.line(`HELLO 1 - w billing ${SECRET}x`);
  assert.deepEqual(h.delayed.map((d) => d.ms), [200, 100]);
  for (const d of h.delayed.splice(0)) d.fn();
  assert.deepEqual(again.sink.take(), [`HELLO - E ${AUTH_FAILED}`]);
  assert.deepEqual(elsewhere.sink.take(), [`HELLO - E ${AUTH_FAILED}`]);
});

Deno.test("ClientSession with auth closes at once on a malformed hello", () => {
  const h = harness(true);
  const { session, sink } = h.connect();
  session.line(`HELLO 1 - w billing`);
  assert.deepEqual(h.delayed, []);
  assert.equal(sink.take().length, 1);
  assert.equal(sink.closes, 1);
});

Deno.test("ClientSession counts a line that is not valid UTF-8 for the first-line rules", async (t) => {
  const NOT_UTF8 = "E line is not valid UTF-8";
  await t.step("with auth: refused as a first line, then closed; a hello is malformed", () => {
    for (
      const [line, reply] of [
        ["\uFFFD", `- - E ${AUTH_REQUIRED}`],
        ["A k\uFFFD 30 0", `A - E ${AUTH_REQUIRED}`],
        [`HELLO 1 - w\uFFFD billing ${SECRET}`, `HELLO - ${NOT_UTF8}`],
      ]
    ) {
      const h = harness(true);
      const { session, sink } = h.connect();
      session.invalid(line);
      session.line(`HELLO 1 - w billing ${SECRET}`);
      session.invalid("\uFFFD");
      assert.deepEqual(sink.take(), [reply], JSON.stringify(line));
      assert.equal(sink.closes, 1, "closed");
      assert.equal(session.identity, undefined);
    }
  });
  await t.step("without auth: a hello cannot follow it; a hello's fields are not echoed", () => {
    const h = harness(false);
    const first = h.connect();
    first.session.invalid("\uFFFD");
    first.session.line("HELLO 1 - w");
    assert.deepEqual(first.sink.take(), [
      `- - ${NOT_UTF8}`,
      "HELLO - E hello must be the first line",
    ]);
    const hello = h.connect();
    hello.session.invalid(`HELLO ${SECRET} w\uFFFD`);
    hello.session.line("HELLO 1 - w");
    assert.deepEqual(hello.sink.take(), [`HELLO - ${NOT_UTF8}`, "HELLO - OK"]);
    assert.equal(first.sink.closes + hello.sink.closes, 0);
  });
});

Deno.test("ClientSession with auth refuses a key outside the credential's prefix, changing nothing", () => {
  const h = harness(true);
  const admin = h.connect();
  admin.session.line(`HELLO 1 - root admin ${ADMIN_SECRET}`);
  admin.session.line("A other 30 0");
  assert.deepEqual(admin.sink.take(), ["HELLO - OK", "A other A 1"]);

  const { session, sink } = h.connect();
  session.line(`HELLO 1 ${SESSION} w billing ${SECRET}`);
  assert.deepEqual(sink.take(), [`HELLO ${SESSION} OK`]);
  const { credential: _, ...identity } = session.identity!;
  assert.deepEqual(identity, { name: "w", session: SESSION, prefix: "billing:" });
  session.line("A billing:1 30 0");
  session.line("A other 30 0");
  session.line("R other 1");
  session.line("X other 1 30");
  session.line("A billing 30 0"); // the prefix is billing:, with its colon
  assert.deepEqual(sink.take(), [
    "A billing:1 A 2",
    `A other E ${OUTSIDE_PREFIX}`,
    `R other E ${OUTSIDE_PREFIX}`,
    `X other E ${OUTSIDE_PREFIX}`,
    `A billing E ${OUTSIDE_PREFIX}`,
  ]);
  assert.equal(sink.closes, 0, "the connection stays");
  assert.equal(h.table.holder("other")?.token, 1n, "still held by admin");
  assert.equal(h.table.holder("other")?.deadline, 30_000, "not extended");
  assert.equal(h.table.waiting, 0, "nothing queued");
  assert.equal(h.table.holder("billing"), undefined);
});

Deno.test("ClientSession refuses a late hello with E and stays usable", async (t) => {
  for (const auth of [false, true]) {
    await t.step(`a second hello (auth ${auth ? "on" : "off"})`, () => {
      const h = harness(auth);
      const { session, sink } = h.connect();
      session.line(`HELLO 1 - first billing ${SECRET}`);
      session.line(`HELLO 1 ${SESSION} second billing ${SECRET}`);
      session.line("A billing:k 30 0");
      assert.deepEqual(sink.take(), [
        "HELLO - OK",
        "HELLO - E hello must be the first line",
        "A billing:k A 1",
      ]);
      assert.equal(session.identity?.name, "first", "the second changed nothing");
      assert.equal(h.grace.live(SESSION), false, "its session was not attached");
      assert.equal(sink.closes, 0);
    });
  }
  await t.step("a hello after a request, without auth", () => {
    const h = harness(false);
    const { session, sink } = h.connect();
    session.line("A k 30 0");
    session.line("HELLO 1 - w");
    session.line("R k 1");
    assert.deepEqual(sink.take(), [
      "A k A 1",
      "HELLO - E hello must be the first line",
      "R k R",
    ]);
    assert.equal(session.identity, undefined);
    assert.equal(sink.closes, 0);
  });
  await t.step("a hello after an invalid line, without auth", () => {
    const h = harness(false);
    const { session, sink } = h.connect();
    session.line("A");
    session.line("HELLO 1 - w");
    assert.deepEqual(sink.take().slice(1), ["HELLO - E hello must be the first line"]);
  });
});

Deno.test("ClientSession refuses a session-bound acquire without a session", async (t) => {
  const bound = "A k 10 0 s";
  const refusal = "A k E a session-bound acquire needs a session";
  await t.step("no hello", () => {
    const h = harness(false);
    const { session, sink } = h.connect();
    session.line(bound);
    assert.deepEqual(sink.take(), [refusal]);
    assert.equal(h.table.held, 0);
  });
  await t.step("a hello without a session", () => {
    const h = harness(false);
    const { session, sink } = h.connect();
    session.line("HELLO 1 - w");
    session.line(bound);
    assert.deepEqual(sink.take(), ["HELLO - OK", refusal]);
    assert.equal(h.table.held, 0);
    assert.equal(h.owners.size, 0);
  });
  await t.step("with a session, the grant is its bound owner's", () => {
    const h = harness(false);
    const { session, sink } = h.connect();
    session.line(`HELLO 1 ${SESSION} w`);
    session.line(bound);
    session.line("A j 10 0");
    assert.deepEqual(sink.take(), [`HELLO ${SESSION} OK`, "A k A 1", "A j A 2"]);
    const k = h.owners.get(h.table.holder("k")!.owner);
    const j = h.owners.get(h.table.holder("j")!.owner);
    assert.deepEqual(k, { id: k!.id, name: "w", session: SESSION, bound: true });
    assert.deepEqual(j, { id: j!.id, name: "w", session: SESSION, bound: false });
    assert.deepEqual(h.owners.boundOf(SESSION), [k]);
  });
});

Deno.test("ClientSession without auth works without a hello, as before", () => {
  const h = harness(false);
  const { session, sink } = h.connect();
  session.line("A k 30 0");
  session.line("X k 1 10");
  session.line("R k 1");
  session.line("A anything:at:all 30 0");
  assert.deepEqual(sink.take(), ["A k A 1", "X k X", "R k R", "A anything:at:all A 2"]);
  assert.equal(h.table.holder("anything:at:all")?.owner, 0, "no hello: owner unknown");
  assert.equal(h.owners.size, 0);
  assert.equal(session.identity, undefined);
  assert.equal(sink.closes, 0);
});

Deno.test("ClientSession without auth accepts a hello, ignoring a credential", () => {
  const h = harness(false);
  const { session, sink } = h.connect();
  session.line(`HELLO 1 ${SESSION} w-1 nobody wrong`);
  session.line("A k 30 0");
  assert.deepEqual(sink.take(), [`HELLO ${SESSION} OK`, "A k A 1"]);
  assert.deepEqual(session.identity, { name: "w-1", session: SESSION, prefix: "" });
  const owner = h.owners.get(h.table.holder("k")!.owner);
  assert.deepEqual(owner, { id: 1, name: "w-1", session: SESSION, bound: false });
});

Deno.test("ClientSession without auth answers a malformed hello with E and stays open", () => {
  const h = harness(false);
  const { session, sink } = h.connect();
  session.line("HELLO 2 - w");
  session.line("A k 30 0");
  assert.deepEqual(sink.take(), ["HELLO - E unsupported hello version", "A k A 1"]);
  assert.equal(sink.closes, 0);
});

Deno.test("ClientSession attaches its session at hello and detaches it when closed", () => {
  const h = harness(true);
  const a = h.connect();
  const b = h.connect();
  a.session.line(`HELLO 1 ${SESSION} w billing ${SECRET}`);
  b.session.line(`HELLO 1 ${SESSION} w billing ${SECRET}`);
  assert.equal(h.grace.live(SESSION), true);
  h.now = 1000;
  a.session.closed();
  assert.equal(h.grace.live(SESSION), true, "one connection is left");
  h.now = 2500;
  b.session.closed();
  b.session.closed(); // twice: counted once
  assert.equal(h.grace.live(SESSION), false);
  assert.equal(h.grace.nextDeadline(), 7500, "the grace counts on the hello context's clock");
});

Deno.test("ClientSession with auth: a reload that removes or changes its credential closes it at its next request", () => {
  const h = harness(true);
  const billing = h.connect("10.0.0.5:1");
  billing.session.line(`HELLO 1 - w billing ${SECRET}`);
  const admin = h.connect("10.0.0.5:2");
  admin.session.line(`HELLO 1 - root admin ${ADMIN_SECRET}`);
  billing.session.line("A billing:1 30 0");
  assert.deepEqual(billing.sink.take(), ["HELLO - OK", "A billing:1 A 1"]);
  admin.sink.take();

  // Reloaded: admin's prefix narrowed, billing's secret rotated.
  h.credentials = Credentials.parse(`billing ${SECRET}x billing:\nadmin ${ADMIN_SECRET} ops:\n`);
  admin.session.line("A other 30 0");
  admin.session.line("A ops:1 30 0");
  assert.deepEqual(admin.sink.take(), [`A other E ${OUTSIDE_PREFIX}`, "A ops:1 A 2"]);
  assert.equal(admin.sink.closes, 0, "an unchanged secret keeps its connection");

  billing.session.line("R billing:1 1");
  assert.deepEqual(billing.sink.take(), [`R billing:1 E ${CREDENTIAL_REVOKED}`]);
  assert.equal(billing.sink.closes, 1);
  assert.equal(h.table.holder("billing:1")?.token, 1n, "the request changed nothing");
  billing.session.line("R billing:1 1");
  assert.deepEqual(billing.sink.take(), [], "nothing more is answered");
  assert.match(
    h.log.at(-1)!,
    /closed 10\.0\.0\.5:1: its credential billing was revoked or changed/,
  );

  // Removed altogether: the same.
  h.credentials = Credentials.parse(`billing ${SECRET}x billing:\n`);
  admin.session.line("I ops:1");
  assert.deepEqual(admin.sink.take(), [`I ops:1 E ${CREDENTIAL_REVOKED}`]);
  assert.equal(admin.sink.closes, 1);
});
