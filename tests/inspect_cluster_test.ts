/**
 * Inspection of a real 3-node cluster (docs/protocol.md, "Inspection"; issue 13): every
 * node answers `S -` with its own view (standbys too), the active measures its standbys'
 * lag, `I` and `L` are redirected by standbys, `LockClient.status()` asks each node
 * itself, and a failover and a handoff are counted by the node that took over.
 *
 * @module
 */

import assert from "node:assert/strict";
import { LockClient } from "../mod.ts";
import { type NodeStatus, nodeStatusOf, parseReply } from "../client/codec.ts";
import { Cluster, type Member, replicated, tokenOf, withLine } from "./_cluster.ts";

/** `S -` of `member`. */
async function statusOf(member: Member): Promise<NodeStatus> {
  const reply = await member.request("S -", 2000);
  const status = nodeStatusOf(parseReply(reply ?? "")!);
  assert.ok(status, `S - of ${member.address} answered ${reply}`);
  return status;
}

/** Asks `S -` of `member` until `check` holds (each answer is an event: no sleeping). */
async function statusUntil(
  member: Member,
  check: (s: NodeStatus) => boolean,
  what: string,
  timeoutMs = 5000,
): Promise<NodeStatus> {
  const until = performance.now() + timeoutMs;
  for (;;) {
    const status = await statusOf(member);
    if (check(status)) return status;
    if (performance.now() > until) {
      throw new Error(`${member.address}: no ${what} in time; last ${JSON.stringify(status)}`);
    }
  }
}

Deno.test("cluster (3 nodes): every node reports its own status; standbys redirect I and L", async () => {
  await Cluster.run(3, async (cluster) => {
    const active = await cluster.waitForOneActive();
    const standbys = cluster.members.filter((m) => m !== active);
    const token = await withLine(
      active,
      async (c) => tokenOf(await c.request("A job:1 30 0"), "job:1"),
    );
    await Promise.all(standbys.map((m) => replicated(m, "job:1", token)));
    const mine = await statusUntil(
      active,
      (s) => s.replication.inSync.length === 2 && s.peers.every((p) => p.lagMs !== null),
      "two standbys in sync with a known lag",
    );
    assert.equal(mine.role, "active");
    assert.equal(mine.active, active.address);
    assert.equal(mine.replication.mode, "async");
    assert.deepEqual(mine.peers.map((p) => p.address), standbys.map((m) => m.address));
    for (const p of mine.peers) {
      assert.equal(p.role, "standby");
      assert.equal(p.live, true);
      assert.ok(p.lagMs! >= 0 && p.lagMs! < 1000, `lag ${p.lagMs}`);
      assert.ok(p.lastHeardMs !== null && p.lastHeardMs < 1000);
    }
    assert.equal(mine.holders, 1);
    assert.equal(mine.tokens.last, String(token));
    for (const standby of standbys) {
      const theirs = await statusUntil(
        standby,
        (s) => s.replication.inSync.length === 1,
        "standby in sync",
      );
      assert.equal(theirs.address, standby.address, "a standby answers for itself");
      assert.equal(theirs.role, "standby");
      assert.equal(theirs.active, active.address);
      assert.deepEqual(theirs.replication.inSync, [standby.address]);
      assert.ok(theirs.peers.every((p) => p.lagMs === null), "only the active measures lag");
      assert.equal(theirs.holders, 1, "its replica holds the key");
      assert.equal(await standby.request("I job:1"), `I job:1 M ${active.address}`);
      assert.equal(await standby.request("L - 10"), `L - M ${active.address}`);
    }
    const client = new LockClient([...cluster.addresses].reverse());
    try {
      const results = await client.status();
      assert.deepEqual(results.map((r) => r.address), [...cluster.addresses].reverse());
      assert.deepEqual(
        results.map((r) => r.status?.role),
        cluster.members.map((m) => m === active ? "active" : "standby").reverse(),
      );
      // Through the router: a standby's M is followed to the active.
      const state = await client.inspect("job:1");
      assert.equal(state.token, token);
      assert.deepEqual((await client.locks()).map((l) => l.key), ["job:1"]);
    } finally {
      await client.close();
    }
  });
});

Deno.test("cluster (3 nodes): the node that takes over counts the failover, then the handoff", async () => {
  await Cluster.run(3, async (cluster) => {
    const first = await cluster.waitForOneActive();
    assert.equal((await statusOf(first)).counts.failovers, 0, "a cold start is no failover");
    await first.kill("SIGKILL");
    const second = await cluster.waitForOneActive({ not: [first], timeoutMs: 8000 });
    const promoted = await statusOf(second);
    assert.equal(promoted.role, "active");
    assert.equal(promoted.counts.failovers, 1);
    assert.equal(promoted.counts.handoffs, 0);
    const dead = promoted.peers.find((p) => p.address === first.address)!;
    assert.equal(dead.live, false);
    const third = cluster.members.find((m) => m !== first && m !== second)!;
    await statusUntil(third, (s) => s.active === second.address, "the new active followed");
    assert.equal(await second.kill("SIGTERM"), 0);
    const taken = await statusUntil(third, (s) => s.role === "active", "the handoff");
    assert.equal(taken.counts.handoffs, 1);
    assert.equal(taken.counts.failovers, 0);
  });
});

Deno.test("cluster (2 nodes): a standby stops counting a session once its connections close", async () => {
  await Cluster.run(2, async (cluster) => {
    const active = await cluster.waitForOneActive();
    const standby = cluster.members.find((m) => m !== active)!;
    await statusUntil(standby, (s) => s.role === "standby", "a standby");
    const addresses = cluster.members.map((m) => m.address);
    for (let i = 0; i < 3; i++) {
      const client = new LockClient(addresses);
      await (await client.acquire(`short:${i}`, { lease: 30 })).release();
      await statusUntil(standby, (s) => s.sessions === 1, `session ${i} said hello to the standby`);
      await client.close();
    }
    // A standby releases nothing, so it keeps no grace: each session is gone at its close.
    await statusUntil(standby, (s) => s.sessions === 0, "no session left on the standby");
    // The active keeps them for their grace (1 s here), then forgets them too.
    await statusUntil(active, (s) => s.sessions === 0, "no session left on the active");
  }, { args: ["--session-grace", "1"] });
});
