/**
 * Unit tests of `I`, `S` and `L` in {@linkcode ClientSession} (docs/protocol.md,
 * "Inspection"; issue 13) over a real lock table on a fake clock: read-only answers, the
 * gate (a standby redirects `I`/`L` but answers `S`; a node handing over parks `I`/`L` but
 * answers `S`), credential prefixes, and what the session counts (requests, rejections by
 * reason, latency of requests answered at once). No sockets.
 *
 * @module
 */

import assert from "node:assert/strict";
import { locksPageOf, nodeStatusOf, parseReply } from "../client/codec.ts";
import { Credentials, Throttle } from "../server/auth.ts";
import { LockTable } from "../server/engine/lock_table.ts";
import { Metrics } from "../server/metrics.ts";
import { Owners } from "../server/owners.ts";
import { ClientSession, type Ticket, ticketHooks } from "../server/session.ts";
import type { Gate, ReplySink, SessionContext } from "../server/session_context.ts";
import { buildStatus } from "../server/status.ts";

const SECRET = "billing-secret-0123456789";
const CREDENTIALS = Credentials.parse(`billing ${SECRET} billing:\nadmin ${SECRET} *\n`);

class FakeSink implements ReplySink {
  lines: string[] = [];
  closed = false;
  send(line: string): void {
    this.lines.push(line);
  }
  closeAfterFlush(): void {
    this.closed = true;
  }
  take(): string[] {
    return this.lines.splice(0, this.lines.length);
  }
}

interface Harness {
  table: LockTable<Ticket>;
  metrics: Metrics;
  gate: Gate;
  auth: boolean;
  parked: string[];
  connect(): { session: ClientSession; sink: FakeSink };
}

function harness(): Harness {
  let token = 0n;
  const now = 0;
  const metrics = new Metrics({ clock: () => now, sampleEvery: 1 });
  const table = new LockTable<Ticket>({
    clock: () => now,
    nextToken: () => ++token,
    hooks: ticketHooks,
    counts: metrics.counts,
  });
  const owners = new Owners();
  const h: Harness = {
    table,
    metrics,
    gate: { kind: "serve" },
    auth: false,
    parked: [],
    connect() {
      const sink = new FakeSink();
      return { session: new ClientSession(ctx, sink), sink };
    },
  };
  const ctx: SessionContext = {
    table,
    maxLeaseMs: 60_000,
    gate: () => h.gate,
    park: (_, line) => h.parked.push(line),
    fatal: (error) => {
      throw error;
    },
    hello: {
      credentials: () => h.auth ? CREDENTIALS : undefined,
      throttle: new Throttle(),
      clock: () => now,
    },
    owners,
    inspect: {
      clock: () => now,
      owners,
      status: () =>
        buildStatus({
          address: "a:1",
          version: "0",
          now,
          startedAt: 0,
          stopping: false,
          table,
          tokens: { last: token, reserved: 1000n },
          metrics,
          connections: 1,
          sessions: 0,
          cluster: undefined,
        }),
    },
    metrics,
  };
  return h;
}

Deno.test("ClientSession answers I, L and S from the table without changing it", () => {
  const h = harness();
  const { session, sink } = h.connect();
  session.line("HELLO 1 - worker-1");
  session.line("A jobs:1 30 0");
  session.line("A jobs:2 30 0");
  sink.take();
  session.line("I jobs:1");
  session.line("I jobs:3");
  session.line("L jobs: 1");
  session.line("S -");
  const [held, free, page, status] = sink.take();
  assert.equal(held, "I jobs:1 I 1 30 0 worker-1");
  assert.equal(free, "I jobs:3 F");
  assert.deepEqual(locksPageOf(parseReply(page)!)?.locks.map((l) => l.key), ["jobs:1"]);
  assert.equal(locksPageOf(parseReply(page)!)?.more, true);
  assert.equal(nodeStatusOf(parseReply(status)!)?.holders, 2);
  assert.equal(h.table.held, 2);
  assert.equal(h.table.counts.grants, 2, "inspection granted nothing");
});

Deno.test("ClientSession answers S in every gate, and parks or redirects I and L like any request", () => {
  const h = harness();
  const { session, sink } = h.connect();
  h.gate = { kind: "refuse", refusal: { status: "M", text: "b:1" } };
  session.line("I k");
  session.line("L - 10");
  session.line("S -");
  const [i, l, s] = sink.take();
  assert.equal(i, "I k M b:1");
  assert.equal(l, "L - M b:1");
  assert.equal(nodeStatusOf(parseReply(s)!)?.address, "a:1");
  h.gate = { kind: "park" };
  session.line("I k");
  session.line("L k 5 j");
  session.line("S -");
  assert.deepEqual(h.parked, ["I k", "L k 5 j"]);
  assert.equal(sink.take().length, 1, "only S was answered");
  h.gate = { kind: "refuse", refusal: { status: "E", text: "no active node" } };
  session.line("I k");
  assert.deepEqual(sink.take(), ["I k E no active node"]);
  assert.equal(h.metrics.rejections.no_active, 1);
});

Deno.test("ClientSession answers malformed inspection lines with E and the old rules stand", () => {
  const h = harness();
  const { session, sink } = h.connect();
  for (const line of ["I", "L - 0", "S x", "Q k", "?"]) session.line(line);
  assert.deepEqual(sink.take().map((r) => r.split(" E ")[0]), ["I -", "L -", "S x", "Q k", "? -"]);
  assert.equal(h.metrics.rejections.bad_request, 4, "the ? probe is not a rejection");
  h.gate = { kind: "park" };
  session.line("L - 0");
  assert.equal(sink.take().length, 1, "a malformed line is answered even while parking");
});

Deno.test("ClientSession confines I and L to the credential's prefix; S is not confined", () => {
  const h = harness();
  h.auth = true;
  const { session, sink } = h.connect();
  session.line(`HELLO 1 - worker-1 billing ${SECRET}`);
  session.line("A billing:1 30 0");
  const admin = h.connect();
  admin.session.line(`HELLO 1 - admin-1 admin ${SECRET}`);
  admin.session.line("A other:1 30 0");
  sink.take();
  session.line("I other:1");
  session.line("L other: 10");
  session.line("L - 10");
  session.line("L billing:1 10");
  session.line("S -");
  const [i, l, all, mine, s] = sink.take();
  assert.equal(i, "I other:1 E key outside this credential's prefix");
  assert.equal(l, "L other: E key outside this credential's prefix");
  assert.deepEqual(locksPageOf(parseReply(all)!)?.locks.map((x) => x.key), ["billing:1"]);
  assert.deepEqual(locksPageOf(parseReply(mine)!)?.locks.map((x) => x.key), ["billing:1"]);
  assert.equal(nodeStatusOf(parseReply(s)!)?.holders, 2);
  assert.equal(h.metrics.rejections.prefix, 2);
  admin.sink.take();
  admin.session.line("L - 10");
  const keys = locksPageOf(parseReply(admin.sink.take()[0])!)?.locks.map((x) => x.key);
  assert.deepEqual(keys, ["billing:1", "other:1"], "a * credential lists every key");
});

Deno.test("ClientSession with auth refuses I, L and S as a first line, counted under auth", () => {
  const h = harness();
  h.auth = true;
  for (const line of ["S -", "I k", "L - 1"]) {
    const { session, sink } = h.connect();
    session.line(line);
    assert.match(sink.take()[0], / E authentication required$/);
    assert.ok(sink.closed);
  }
  assert.equal(h.metrics.rejections.auth, 3);
});

Deno.test("ClientSession counts requests and times those answered at once, not queued ones", () => {
  const h = harness();
  const { session } = h.connect();
  session.line("A k 30 0"); // answered at once
  session.line("A k 30 0"); // queued: not answered yet
  session.line("I k");
  h.gate = { kind: "park" };
  session.line("I k"); // parked
  assert.equal(h.metrics.requests, 4);
  assert.equal(h.metrics.histogram().count, 2);
  h.gate = { kind: "serve" };
  session.resume("I k");
  assert.equal(h.metrics.requests, 4, "a parked line handled again is not a new request");
  assert.equal(h.metrics.counts.grants, 1);
});
