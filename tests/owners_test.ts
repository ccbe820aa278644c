/**
 * Unit tests of who holds a lock ({@linkcode Owners}) and of the grace period of sessions
 * ({@linkcode SessionGrace}), docs/protocol.md "Sessions", on explicit clock numbers (pure: no
 * sockets, no timers); then two tests of `Sessions` wired to a lock table, on real timers.
 *
 * @module
 */

import assert from "node:assert/strict";
import { type Owner, Owners, SessionGrace } from "../server/owners.ts";
import type { Ticket } from "../server/session.ts";

const S1 = "11111111111111111111111111111111";
const S2 = "22222222222222222222222222222222";
const S3 = "33333333333333333333333333333333";

/** Owners that record their `created` and `gone` events. */
function recorded(): { owners: Owners; created: Owner[]; gone: number[] } {
  const created: Owner[] = [];
  const gone: number[] = [];
  const owners = new Owners({ created: (o) => created.push(o), gone: (id) => gone.push(id) });
  return { owners, created, gone };
}

Deno.test("Owners intern() gives one owner per name, session and bound, with ids from 1", () => {
  const { owners, created } = recorded();
  const a = owners.intern("w-1", S1, false);
  assert.deepEqual(a, { id: 1, name: "w-1", session: S1, bound: false });
  assert.equal(owners.intern("w-1", S1, false), a, "the same identity: the same owner");
  const bound = owners.intern("w-1", S1, true);
  const other = owners.intern("w-1", S2, false);
  const noSession = owners.intern("w-1", undefined, false);
  const renamed = owners.intern("w-2", S1, false);
  assert.deepEqual([bound.id, other.id, noSession.id, renamed.id], [2, 3, 4, 5]);
  assert.equal(owners.intern("w-1", undefined, false), noSession);
  assert.equal(owners.size, 5);
  assert.deepEqual(created, [a, bound, other, noSession, renamed], "created once each");
  assert.equal(owners.get(3), other);
  assert.equal(owners.get(0), undefined, "0 is no owner");
  assert.equal(owners.get(6), undefined);
  assert.deepEqual([...owners.all()].map((o) => o.id), [1, 2, 3, 4, 5]);
});

Deno.test("Owners install() keeps the id it is given and fires no created event", () => {
  const { owners, created } = recorded();
  const replicated: Owner = { id: 7, name: "w-1", session: S1, bound: true };
  owners.install(replicated);
  assert.equal(owners.get(7), replicated);
  assert.equal(owners.intern("w-1", S1, true), replicated, "found by its identity");
  assert.deepEqual(created, [], "an installed owner is not replicated again");
  assert.equal(owners.intern("w-2", S1, true).id, 8, "new ids come after installed ones");
  owners.install({ id: 3, name: "w-3", session: undefined, bound: false });
  assert.equal(owners.intern("w-4", undefined, false).id, 9, "a lower id does not lower them");
});

Deno.test("Owners install() of a known id replaces that owner and its identity", () => {
  const owners = new Owners();
  owners.install({ id: 2, name: "old", session: S1, bound: false });
  const fresh: Owner = { id: 2, name: "new", session: S2, bound: true };
  owners.install(fresh);
  assert.equal(owners.size, 1);
  assert.equal(owners.get(2), fresh);
  assert.equal(owners.intern("new", S2, true), fresh);
  assert.equal(owners.intern("old", S1, false).id, 3, "the old identity is no longer known");
});

Deno.test("Owners boundOf() lists the bound owners of one session only", () => {
  const owners = new Owners();
  owners.intern("a", S1, false);
  const b = owners.intern("a", S1, true);
  const c = owners.intern("b", S1, true);
  owners.intern("a", S2, true);
  owners.intern("a", undefined, false);
  assert.deepEqual(owners.boundOf(S1), [b, c]);
  assert.deepEqual(owners.boundOf(S3), []);
});

Deno.test("Owners sweep() forgets owners that hold nothing and whose session is gone", () => {
  const { owners, gone } = recorded();
  const holding = owners.intern("a", S1, true); // 1: holds a lock
  owners.intern("a", S1, false); // 2: S1 is live
  owners.intern("b", S2, false); // 3: S2 is gone, holds nothing
  owners.intern("c", undefined, false); // 4: no session, holds nothing
  const anonymous = owners.intern("d", undefined, true); // 5: no session, holds a lock
  const epoch = owners.epoch;
  owners.sweep(new Set([holding.id, anonymous.id]), (session) => session === S1);
  assert.deepEqual(gone, [3, 4]);
  assert.deepEqual([...owners.all()].map((o) => o.id), [1, 2, 5]);
  assert.notEqual(owners.epoch, epoch, "cached ids are no longer valid");
  assert.equal(owners.intern("b", S2, false).id, 6, "a forgotten owner comes back with a new id");
  const after = owners.epoch;
  owners.sweep(new Set([1, 2, 5, 6]), () => false);
  assert.deepEqual(gone, [3, 4], "nothing to forget: no event");
  assert.equal(owners.epoch, after, "and the epoch stays");
});

Deno.test("Owners forget() drops one owner, changing the epoch only when it knew it", () => {
  const { owners, gone } = recorded();
  const a = owners.intern("a", S1, false);
  const epoch = owners.epoch;
  owners.forget(99);
  assert.equal(owners.epoch, epoch, "an unknown id changes nothing");
  owners.forget(a.id);
  assert.equal(owners.get(a.id), undefined);
  assert.equal(owners.size, 0);
  assert.equal(owners.epoch, epoch + 1);
  assert.deepEqual(gone, [], "forget() is the replica's: it is not replicated back");
  assert.equal(owners.intern("a", S1, false).id, 2, "ids are never reused");
  owners.forget(a.id);
  assert.equal(owners.epoch, epoch + 1, "forgetting twice changes nothing");
});

Deno.test("Owners clear() forgets every owner and changes the epoch; ids go on", () => {
  const owners = new Owners();
  owners.intern("a", S1, false);
  owners.intern("b", S2, true);
  const epoch = owners.epoch;
  owners.clear();
  assert.equal(owners.size, 0);
  assert.equal(owners.get(1), undefined);
  assert.deepEqual(owners.boundOf(S2), []);
  assert.equal(owners.epoch, epoch + 1);
  assert.equal(owners.intern("a", S1, false).id, 3);
});

Deno.test("SessionGrace starts the grace when the last connection of a session closes", () => {
  const grace = new SessionGrace(5000);
  assert.equal(grace.live(S1), false);
  grace.attach(S1);
  grace.attach(S1);
  assert.equal(grace.live(S1), true);
  grace.detach(S1, 1000);
  assert.equal(grace.live(S1), true, "one connection is left");
  assert.equal(grace.nextDeadline(), undefined);
  grace.detach(S1, 2000);
  assert.equal(grace.live(S1), false);
  assert.equal(grace.nextDeadline(), 7000, "the grace counts from the last close");
  assert.deepEqual(grace.due(6999), []);
  assert.deepEqual(grace.due(7000), [S1], "gone at its deadline");
  assert.deepEqual(grace.due(8000), [], "reported once");
  assert.equal(grace.nextDeadline(), undefined);
});

Deno.test("SessionGrace keeps a session that reconnects within the grace", () => {
  const grace = new SessionGrace(5000);
  grace.attach(S1);
  grace.detach(S1, 0);
  grace.attach(S1); // at 4999, say: the clock is not needed to come back
  assert.equal(grace.live(S1), true);
  assert.equal(grace.nextDeadline(), undefined);
  assert.deepEqual(grace.due(1_000_000), []);
  grace.detach(S1, 10_000);
  assert.equal(grace.nextDeadline(), 15_000, "a new close starts a full grace");
});

Deno.test("SessionGrace nextDeadline() is the earliest; due() returns every one passed", () => {
  const grace = new SessionGrace(1000);
  for (const [session, at] of [[S1, 300], [S2, 100], [S3, 200]] as const) {
    grace.attach(session);
    grace.detach(session, at);
  }
  assert.equal(grace.nextDeadline(), 1100);
  assert.deepEqual(grace.due(1100), [S2]);
  assert.equal(grace.nextDeadline(), 1200);
  assert.deepEqual(grace.due(5000).sort(), [S1, S3]);
  assert.equal(grace.nextDeadline(), undefined);
});

Deno.test("SessionGrace detach() without attach() still starts the grace", () => {
  const grace = new SessionGrace(1000);
  grace.detach(S1, 50);
  assert.equal(grace.live(S1), false);
  assert.equal(grace.nextDeadline(), 1050);
});

Deno.test("SessionGrace expect() gives a full grace from promotion to sessions not here", () => {
  const grace = new SessionGrace(5000);
  grace.attach(S1); // connected here already: no deadline
  grace.attach(S2);
  grace.detach(S2, 1000); // already going: its deadline stays 6000
  grace.expect([S1, S2, S3], 3000);
  assert.equal(grace.live(S3), false);
  assert.equal(grace.nextDeadline(), 6000);
  assert.deepEqual(grace.due(6000), [S2]);
  assert.equal(grace.nextDeadline(), 8000, "S3 counts from the promotion");
  grace.attach(S3);
  assert.deepEqual(grace.due(8000), [], "S3 came back in time");
  grace.expect([], 9000);
  assert.equal(grace.nextDeadline(), undefined);
});

Deno.test("SessionGrace clearDeadlines() drops every deadline but keeps open connections", () => {
  const grace = new SessionGrace(5000);
  grace.attach(S1);
  grace.attach(S1);
  grace.attach(S2);
  grace.detach(S2, 0);
  grace.clearDeadlines();
  assert.equal(grace.nextDeadline(), undefined);
  assert.deepEqual(grace.due(1_000_000), [], "not released by a node that no longer serves");
  assert.equal(grace.live(S1), true);
  grace.detach(S1, 100);
  assert.equal(grace.live(S1), true, "still counted: one of two closed");
  grace.detach(S1, 200);
  assert.equal(grace.nextDeadline(), 5200);
  grace.expect([S2], 1000);
  assert.equal(grace.nextDeadline(), 5200, "S2 gets 6000 from the promotion; S1 is first");
  assert.deepEqual(grace.due(6000), [S1, S2]);
});

Deno.test("SessionGrace on a node that does not serve counts open sessions only, with no deadline", () => {
  let serving = false;
  const grace = new SessionGrace(5000, () => serving);
  grace.attach(S1);
  grace.attach(S2);
  assert.equal(grace.size, 2);
  grace.detach(S1, 1000); // a standby: nothing to release, nothing to keep
  assert.equal(grace.size, 1);
  assert.equal(grace.nextDeadline(), undefined);
  serving = true; // promoted: expect() gives bound sessions their grace from now
  grace.expect([S1], 3000);
  assert.equal(grace.nextDeadline(), 8000);
  grace.detach(S2, 4000);
  assert.equal(grace.size, 2);
  assert.deepEqual(grace.due(9000).sort(), [S1, S2]);
  assert.equal(grace.size, 0);
});

/**
 * A lock table and the {@linkcode Sessions} of a serving node on `clock` (with `refresh`, as
 * server.ts wires them); these use real timers, unlike the tests above. Stop the sessions.
 */
async function tableWithSessions(
  options: { clock: () => number; refresh?: () => void; graceMs: number; sweepMs: number },
) {
  const { LockTable } = await import("../server/engine/lock_table.ts");
  const { Sessions } = await import("../server/sessions.ts");
  const { silentLogger } = await import("../server/log.ts");
  let token = 0n;
  const table = new LockTable<Ticket>({
    clock: options.clock,
    nextToken: () => ++token,
    hooks: { granted: () => {}, timedOut: () => {} },
  });
  const sessions = new Sessions({
    ...options,
    table,
    serving: () => true,
    released: () => {},
    log: silentLogger,
  });
  return { table, sessions };
}

Deno.test("Sessions' sweep keeps the owner of a queued acquire: its grant still names its holder", async () => {
  const { table, sessions } = await tableWithSessions({
    clock: () => performance.now(),
    graceMs: 5000,
    sweepMs: 10,
  });
  try {
    const holder = sessions.owners.intern("holder", undefined, false);
    const waiter = sessions.owners.intern("waiter", undefined, false);
    const idle = sessions.owners.intern("idle", undefined, false);
    assert.equal(typeof table.acquire("k", 60_000, 0, {} as Ticket, holder.id), "bigint");
    const ticket = { waiter: undefined } as unknown as Ticket;
    const queued = table.acquire("k", 60_000, 0, ticket, waiter.id);
    assert.notEqual(typeof queued, "bigint");
    ticket.waiter = queued as Ticket["waiter"];
    const { promise: swept, resolve } = Promise.withResolvers<void>();
    const check = setInterval(() => sessions.owners.get(idle.id) === undefined && resolve(), 5);
    await swept;
    clearInterval(check);
    assert.equal(sessions.owners.get(holder.id)?.name, "holder");
    assert.equal(sessions.owners.get(waiter.id)?.name, "waiter", "kept while queued");
    assert.equal(table.release("k", 1n), true);
    assert.equal(sessions.owners.get(table.holder("k")!.owner)?.name, "waiter");
  } finally {
    sessions.stop();
  }
});

Deno.test("Sessions on a per-turn clock: a long run of releases settles against fresh time, not one stale instant", async () => {
  const { turnClock } = await import("../server/ticker.ts");
  // Wired like server.ts: the table and the sessions read the server's per-turn clock.
  const turn = turnClock();
  const { table, sessions } = await tableWithSessions({
    clock: turn.now,
    refresh: turn.refresh,
    graceMs: 20,
    sweepMs: 60_000,
  });
  try {
    const a = sessions.owners.intern("a", S1, true);
    const b = sessions.owners.intern("b", S2, true);
    for (let i = 0; i < 15; i++) table.acquire(`a${i}`, 60_000, 0, {} as Ticket, a.id);
    table.acquire("b", 60_000, 0, {} as Ticket, b.id);
    // Releasing S1's locks takes 3 ms (0.2 ms each); S2's grace ends 2.5 ms after S1's (later
    // than a timer runs late), so during it. With a stale instant the timer's catch-up loop
    // would ask again and again, in vain, until its 5 ms budget is spent.
    const release = table.release.bind(table);
    table.release = (key, t) => {
      if (key.startsWith("a")) {
        const until = performance.now() + 0.2;
        while (performance.now() < until) { /* the cost of a release */ }
      }
      return release(key, t);
    };
    let asked = 0;
    const due = sessions.grace.due.bind(sessions.grace);
    sessions.grace.due = (now: number) => {
      asked++;
      return due(now);
    };
    const start = performance.now();
    sessions.grace.detach(S1, start);
    sessions.grace.detach(S2, start + 2.5);
    sessions.arm();
    for (let i = 0; i < 400 && table.held > 0; i++) await new Promise((r) => setTimeout(r, 5));
    assert.equal(table.held, 0, "both sessions' locks released");
    assert.ok(asked <= 5, `the grace was asked ${asked} times`);
  } finally {
    sessions.stop();
  }
});
