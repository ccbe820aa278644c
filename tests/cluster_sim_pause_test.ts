/**
 * A paused active resumed after a standby promoted, and the merges of two actives
 * (docs/cluster.md, "Two actives at once"), on the deterministic simulator: the resumed node
 * must hand out no grant of its old activation, neither from a request that waited in its
 * socket during the pause nor from a lease that ran out meanwhile, whatever order the peers'
 * first words arrive in; and it must serve again once nothing newer is left to merge (or
 * step down when the newer state's active is gone), however its pauses fall.
 *
 * @module
 */

import assert from "node:assert/strict";
import { SimCluster } from "./_sim_cluster.ts";

const [A, B, C, D] = ["a:7001", "b:7002", "c:7003", "d:7004"];

/** A cluster of `size` settled after its cold start: `A` active, every standby in sync. */
async function settled(size: number): Promise<SimCluster> {
  const sim = new SimCluster({ size });
  assert.equal((await sim.waitForOneActive()).address, A);
  await sim.waitForSync();
  return sim;
}

/**
 * Four nodes: A pauses and B promotes, B pauses and C promotes and grants `key` (D
 * replicates it), C dies. A and B are still paused; D alone holds C's later activation.
 */
async function laterActivationOnD(key: string): Promise<{ sim: SimCluster; late: bigint }> {
  const sim = new SimCluster({ size: 4 });
  assert.equal((await sim.waitForOneActive()).address, A);
  await sim.waitForSync();
  sim.pause(A);
  assert.ok(await sim.runUntil(() => sim.node(B).role === "active", 3000));
  await sim.waitForSync(2000);
  sim.pause(B);
  assert.ok(await sim.runUntil(() => sim.node(C).role === "active", 3000));
  await sim.advance(300);
  const late = await sim.grant(C, key, 120);
  await sim.replicated(D, key, late);
  sim.kill(C);
  await sim.advance(200);
  return { sim, late };
}

/** The tokens granted so far in the replies of `lines` (`A <key> A <token>`). */
function grants(lines: readonly string[]): bigint[] {
  return lines.flatMap((line) => {
    const match = /^A \S+ A (\d+)$/.exec(line);
    return match === null ? [] : [BigInt(match[1])];
  });
}

Deno.test("ClusterNode resumed active stays parked while the first peer it hears names another active", async () => {
  // The stale grant after SIGCONT: a standby's heartbeat (naming the new active) used to be
  // enough to end the freeze, before the new active itself was heard from.
  const sim = await settled(3);
  const frozen = sim.node(A);
  const held = await sim.grant(A, "pause:k");
  await sim.replicated(B, "pause:k", held);
  await sim.replicated(C, "pause:k", held);
  // A waiter on the old active, queued before the pause.
  const waiter = sim.connect(A);
  waiter.send("A pause:k 30 0");
  await sim.advance(5);
  assert.equal(frozen.table.waiting, 1);

  sim.pause(A);
  // The holder releases on the new active, and someone else takes the key there.
  assert.ok(await sim.runUntil(() => sim.node(B).role === "active", 3000), sim.describe());
  assert.equal(await sim.request(B, `R pause:k ${held}`), "R pause:k R");
  const newer = await sim.grant(B, "pause:k");
  // On the old active, a release buffered during the pause would pass the key to its
  // waiter: it must wait for the merge.
  const buffered = sim.connect(A);
  buffered.send(`R pause:k ${held}`);

  // When A wakes, only C's words reach it for a while: C follows B.
  sim.cut(B, A);
  sim.resume(A);
  await sim.advance(500);
  assert.equal(frozen.role, "active");
  assert.deepEqual(grants(waiter.replies), [], `granted from the stale table: ${waiter.replies}`);
  assert.deepEqual(buffered.replies, [], "the buffered release was served before the merge");

  sim.heal();
  assert.equal((await sim.waitForOneActive(3000)).address, A, sim.describe());
  // After the merge the newer grant stands: the buffered release does not hold the key
  // any more, and the waiter is still queued behind the newer holder.
  assert.ok(await sim.runUntil(() => buffered.replies.length > 0, 1000));
  assert.equal(buffered.replies[0], "R pause:k N");
  assert.equal(frozen.holder("pause:k"), newer);
  assert.deepEqual(grants(waiter.replies), []);
  assert.equal(await sim.request(A, `R pause:k ${newer}`), "R pause:k R");
  assert.ok(await sim.runUntil(() => grants(waiter.replies).length > 0, 1000));
  assert.ok(grants(waiter.replies)[0] > newer, `${waiter.replies} not above ${newer}`);
});

Deno.test("ClusterNode merge does not pass a lease that ran out during the pause to the old active's waiter", async () => {
  const sim = await settled(2);
  const frozen = sim.node(A);
  // A 1.5 s lease that runs out while A is paused, with a waiter on A.
  const held = await sim.grant(A, "lease:k", 1.5);
  await sim.replicated(B, "lease:k", held);
  const waiter = sim.connect(A);
  waiter.send("A lease:k 30 0");
  await sim.advance(5);

  sim.pause(A);
  assert.ok(await sim.runUntil(() => sim.node(B).role === "active", 3000));
  // The lease runs out on B too; someone takes the key there.
  await sim.advance(1000);
  assert.equal(sim.node(B).holder("lease:k"), undefined);
  const newer = await sim.grant(B, "lease:k");
  sim.resume(A);
  assert.equal((await sim.waitForOneActive(3000)).address, A, sim.describe());
  await sim.advance(10);
  // The newer grant was merged in before A settled its own expired lease: the waiter
  // still waits, behind the newer holder.
  assert.equal(frozen.holder("lease:k"), newer);
  assert.deepEqual(grants(waiter.replies), [], `granted over a newer holder: ${waiter.replies}`);
  assert.equal(await sim.request(A, `X lease:k ${newer} 30`), "X lease:k X");
});

Deno.test("ClusterNode active that pauses again right after a merge serves again (no deadlock with a standby of the merged activation)", async (t) => {
  // Found by the chaos run: after the merge, a standby still holding the merged
  // activation's replica (a higher floor than the active's own) made a second freeze park
  // the active for good, while that standby waited for a snapshot a frozen active never
  // sends. The merge now raises the active's floor to the merged activation's.
  for (const second of [600, 900]) {
    await t.step(`a second pause of ${second} ms`, async () => {
      const sim = await settled(3);
      const held = await sim.grant(A, "again:k");
      sim.pause(A);
      assert.ok(await sim.runUntil(() => sim.node(B).role === "active", 3000), sim.describe());
      const newer = await sim.grant(B, "again:other");
      sim.resume(A);
      const merged = () => sim.node(A).role === "active" && sim.node(B).role === "standby";
      assert.ok(await sim.runUntil(merged, 5000), sim.describe());
      assert.ok(sim.node(A).node.replica.floor >= newer, "the merge raised the floor");
      sim.pause(A); // past the freeze limit (half a failover timeout), short of a failover
      await sim.advance(second);
      sim.resume(A);
      assert.ok(
        await sim.runUntil(() => sim.node(A).node.frozenSince() === undefined, 2000),
        sim.describe(),
      );
      assert.equal(await sim.request(A, `R again:k ${held}`), "R again:k R");
      assert.equal(await sim.request(A, `R again:other ${newer}`), "R again:other R");
      await sim.waitForSync(3000);
      for (const standby of [B, C]) {
        assert.equal(sim.node(standby).node.replica.floor, sim.node(A).node.replica.floor);
      }
    });
  }
});

Deno.test("ClusterNode paused active whose successor died meanwhile steps down for the fresher replica", async () => {
  // A pauses, B promotes and grants, C replicates it, B dies before A wakes: nobody can
  // hand A the later state, so A steps down and C (the freshest replica) takes over; A
  // then follows it and takes the role back once in sync.
  const sim = await settled(3);
  sim.pause(A);
  assert.ok(await sim.runUntil(() => sim.node(B).role === "active", 3000), sim.describe());
  await sim.advance(300); // C follows B and syncs
  const newer = await sim.grant(B, "gone:k");
  await sim.replicated(C, "gone:k", newer);
  sim.kill(B);
  await sim.advance(200);
  sim.resume(A);
  assert.ok(
    await sim.runUntil(() => sim.node(A).roles.some((r) => r.role === "standby"), 3000),
    sim.describe(),
  );
  assert.ok(sim.node(A).warnings.some((w) => w.includes("stepped down")));
  // In sync mode its replies no standby acknowledged are never sent: their connections close.
  assert.equal(sim.node(A).unconfirmedDrops.length, 1);
  assert.equal((await sim.waitForOneActive(3000)).address, C, sim.describe());
  assert.equal(sim.node(C).holder("gone:k"), newer, "the later activation's grant stands");
  // The failback brings A back with C's state, and new tokens above every earlier one.
  assert.ok(
    await sim.runUntil(() => sim.oneActive()?.address === A, 10_000),
    sim.describe(),
  );
  assert.equal(sim.node(A).holder("gone:k"), newer);
  assert.ok((await sim.grant(A, "gone:next")) > newer);
});

Deno.test("ClusterNode standby in sync with an active takes its floor when that active merges a split brain", async () => {
  // A and D on one side, B and C on the other: B promotes there. When the partition heals
  // B hands its state to A, whose floor rises to B's activation; D, in sync with A all
  // along, holds that merged state too and must rank as high (the freshest replica wins an
  // election), not below C's replica of B's activation.
  const sim = new SimCluster({ size: 4 });
  assert.equal((await sim.waitForOneActive()).address, A);
  await sim.waitForSync();
  sim.partition([A, D], [B, C]);
  assert.ok(await sim.runUntil(() => sim.node(B).role === "active", 3000), sim.describe());
  const newer = await sim.grant(B, "split:k");
  sim.heal();
  assert.equal((await sim.waitForOneActive(5000)).address, A, sim.describe());
  assert.equal(sim.node(A).holder("split:k"), newer);
  const floor = sim.node(A).node.replica.floor;
  assert.ok(floor >= newer, `the merge raised A's floor (${floor})`);
  assert.ok(
    await sim.runUntil(() => sim.node(D).node.replica.floor === floor, 1000),
    `D's floor ${sim.node(D).node.replica.floor}, A's ${floor}`,
  );
});

Deno.test("ClusterNode paused active that merges a stale active still steps down for a later activation on a third node", async (t) => {
  // A pauses, B promotes and pauses, C promotes and grants (D replicates it), C dies. When
  // A and B wake, B hands its (older) state over to A; A must not serve from that merge
  // alone: D holds C's later activation, so A steps down and D's state survives.
  for (const gap of [0, 300, 600, 900]) {
    await t.step(`B resumed ${gap} ms after A`, async () => {
      const { sim, late } = await laterActivationOnD("late:k");
      sim.resume(A);
      await sim.advance(gap);
      sim.resume(B);
      const active = await sim.waitForOneActive(10_000);
      await sim.waitForSync(5000);
      assert.equal(active.holder("late:k"), late, sim.describe());
      assert.equal(await sim.request(active.address, "A late:k 30 0.01"), "A late:k T");
    });
  }
});

Deno.test("ClusterNode paused again before its first freeze settled starts listening again", async (t) => {
  // The second pause used to count as time spent listening: the node woke with a stale
  // view of its peers and acted on it at once.
  await t.step("a standby does not promote over a healthy active", async () => {
    const sim = await settled(3);
    sim.pause(C);
    const onA = await sim.grant(A, "twice:k");
    await sim.advance(1100);
    sim.resume(C);
    await sim.advance(1);
    sim.pause(C);
    await sim.advance(1100);
    sim.resume(C);
    await sim.advance(5);
    const onC = await sim.request(C, "A twice:k 30 0");
    assert.notEqual(onC?.split(" ")[2], "A", `C granted: ${onC}\n${sim.describe()}`);
    assert.equal((await sim.waitForOneActive(5000)).address, A, sim.describe());
    assert.equal(sim.node(A).holder("twice:k"), onA);
    assert.ok(!sim.node(C).roles.some((r) => r.role === "active"), sim.describe());
  });
  await t.step("an active grants nothing from its stale table", async () => {
    const sim = await settled(3);
    sim.pause(A);
    await sim.advance(600);
    sim.resume(A);
    await sim.advance(1);
    sim.pause(A);
    assert.ok(await sim.runUntil(() => sim.node(B).role === "active", 3000));
    const onB = await sim.grant(B, "twice:k");
    const buffered = sim.connect(A);
    buffered.send("A twice:k 30 0");
    await sim.advance(300);
    sim.resume(A);
    await sim.waitForOneActive(5000);
    await sim.advance(500);
    const tokens = grants(buffered.replies);
    assert.ok(tokens.every((t) => t > onB), `granted ${tokens}, below ${onB}\n${sim.describe()}`);
  });
});

Deno.test("ClusterNode active paused while handing over does not merge a stale HANDOFF", async () => {
  // B, active while A was paused, hands over to A once A wakes; A pauses again, B gives up,
  // passes an expired lease to its waiter and hands over again. The first HANDOFF waited in
  // A's socket: merging it (and B taking its TAKEN for the second) lost the waiter's grant.
  const sim = await settled(2);
  sim.pause(A);
  assert.ok(await sim.runUntil(() => sim.node(B).role === "active", 3000));
  await sim.grant(B, "stale:k", 0.6);
  const waiter = sim.connect(B);
  waiter.send("A stale:k 30 0");
  await sim.advance(5);
  sim.resume(A);
  assert.ok(await sim.runUntil(() => sim.node(B).role === "handing-off", 3000));
  sim.pause(A);
  assert.ok(await sim.runUntil(() => waiter.replies.length > 0, 1000), sim.describe());
  const [granted] = grants(waiter.replies);
  assert.ok(granted !== undefined, `${waiter.replies}`);
  assert.ok(await sim.runUntil(() => sim.node(B).role === "handing-off", 1000));
  await sim.advance(20);
  sim.resume(A);
  const active = await sim.waitForOneActive(5000);
  await sim.advance(1000);
  assert.equal(active.holder("stale:k"), granted, sim.describe());
  assert.equal(await sim.request(active.address, "A stale:k 30 0.01"), "A stale:k T");
});

Deno.test("ClusterNode frozen active handing over passes its leases as they stand: no stale grant to its waiter", async () => {
  const sim = await settled(2);
  sim.kill(A);
  assert.ok(await sim.runUntil(() => sim.node(B).role === "active", 3000));
  // Acquires queued on B hold the failback back (FAILBACK_SETTLE_MS) once A is in sync.
  await sim.grant(B, "frozen:hold", 60);
  sim.connect(B).send("A frozen:hold 30 0");
  await sim.grant(B, "frozen:k", 1);
  const waiter = sim.connect(B);
  waiter.send("A frozen:k 30 0");
  await sim.advance(5);
  sim.start(A);
  await sim.waitForSync(3000);
  sim.pause(B); // its 1 s lease runs out while it is paused; A takes over
  assert.ok(await sim.runUntil(() => sim.node(A).role === "active", 3000), sim.describe());
  await sim.advance(1000);
  const onA = await sim.grant(A, "frozen:k");
  sim.resume(B); // B hands its state over to A (demotion)
  assert.equal((await sim.waitForOneActive(5000)).address, A);
  await sim.advance(500);
  assert.deepEqual(grants(waiter.replies), [], `B's waiter granted a stale lease (A: ${onA})`);
  assert.equal(sim.node(A).holder("frozen:k"), onA);
});

Deno.test("ClusterNode stepping down after a merge still answers TAKEN with its activation", async () => {
  // The merge case above, with B's HANDOFF held back until A has listened long enough to
  // know of D's later activation: A answers B's HANDOFF first, then steps down.
  const { sim, late } = await laterActivationOnD("taken:k");
  sim.cut(A, B, "hold");
  sim.resume(A);
  sim.resume(B);
  await sim.advance(1000);
  sim.heal();
  const active = await sim.waitForOneActive(10_000);
  await sim.waitForSync(5000);
  assert.deepEqual(sim.sent.filter((l) => / undefined\b/.test(l.line)).map((l) => l.line), []);
  assert.equal(active.holder("taken:k"), late, sim.describe());
});

Deno.test("ClusterNode standby that wakes from a long pause listens a failover timeout before promoting", async (t) => {
  // Its first fresh word used to end its freeze; the election then counted the silence of
  // its own pause and, if that word was not the active's, promoted over a live active.
  await t.step("a restarted peer speaks first", async () => {
    const sim = await settled(3);
    const held = await sim.grant(A, "wake:k");
    sim.kill(B);
    sim.pause(C);
    await sim.advance(1200);
    sim.resume(C);
    await sim.advance(50);
    sim.start(B);
    await sim.advance(60);
    const onC = await sim.request(C, "A wake:k 30 0");
    assert.notEqual(onC?.split(" ")[2], "A", `C granted: ${onC}`);
    const active = await sim.waitForOneActive(5000);
    assert.equal(active.address, A, sim.describe());
    assert.equal(active.holder("wake:k"), held);
  });
  await t.step("the active is handing over to it", async () => {
    const sim = await settled(2);
    sim.kill(A);
    assert.ok(await sim.runUntil(() => sim.node(B).role === "active", 3000));
    await sim.grant(B, "wake2:hold", 60);
    sim.connect(B).send("A wake2:hold 30 0"); // queued: the failback waits 3.5 s
    sim.start(A);
    assert.ok(await sim.runUntil(() => sim.node(A).node.replica.synced, 3000));
    await sim.advance(2700);
    sim.pause(A);
    const onB = await sim.grant(B, "wake2:k");
    await sim.advance(1045);
    sim.resume(A);
    await sim.runUntil(() => sim.node(A).role === "active", 1500);
    const onA = await sim.request(A, "A wake2:k 30 0");
    const active = await sim.waitForOneActive(5000);
    assert.equal(active.holder("wake2:k"), onB, `A answered ${onA}\n${sim.describe()}`);
  });
});

Deno.test("ClusterNode merged state ranks strictly above the loser's activation, even one that issued no token", async () => {
  // A floor equal to the loser's would let a replica of the loser tie with the merged state,
  // and the election would then compare stream positions of two different activations.
  const sim = new SimCluster({ size: 4 });
  assert.equal((await sim.waitForOneActive()).address, A);
  await sim.waitForSync();
  const held = await sim.grant(A, "tie:k", 60);
  await sim.replicated(C, "tie:k", held);
  sim.partition([A, D], [B, C], "down");
  assert.ok(await sim.runUntil(() => sim.node(B).role === "active", 3000));
  for (let i = 0; i < 5; i++) assert.equal(await sim.request(B, `X tie:k ${held} 60`), "X tie:k X");
  const loserFloor = sim.node(B).node.replica.floor;
  sim.heal();
  assert.equal((await sim.waitForOneActive(5000)).address, A);
  assert.ok(sim.node(A).node.replica.floor > loserFloor, "strictly above the loser's floor");
  assert.ok(
    await sim.runUntil(() => sim.node(D).node.replica.floor > loserFloor, 1000),
    "and so is D's, in sync with A",
  );
});

Deno.test("ClusterNode woken active stopped (SIGTERM) before its freeze settled hands nothing over: a lock released meanwhile stays released", async () => {
  const sim = await settled(3);
  const t1 = await sim.grant(A, "sig:k", 30);
  await sim.replicated(B, "sig:k", t1);
  await sim.replicated(C, "sig:k", t1);
  sim.pause(A);
  assert.ok(await sim.runUntil(() => sim.node(B).role === "active", 3000), sim.describe());
  await sim.waitForSync(2000);
  assert.equal(await sim.request(B, `R sig:k ${t1}`), "R sig:k R");
  assert.ok(await sim.runUntil(() => sim.node(C).holder("sig:k") === undefined, 3000));
  sim.cut(B, A); // A hears only C, which names B: A stays parked, no HANDOFF of B's reaches it
  sim.resume(A);
  await sim.advance(400);
  assert.equal(sim.node(A).node.gate().kind, "park", "the woken active is parked");
  const left = sim.shutdown(A);
  await sim.advance(3000);
  assert.equal(await left, false, "its stale state went to no standby");
  sim.heal();
  const active = await sim.waitForOneActive(5000);
  assert.equal(active.address, B);
  assert.equal(active.holder("sig:k"), undefined, "the released lock did not come back");
  assert.match((await sim.request(B, "A sig:k 30 0.2", 500))!, /^A sig:k A \d+$/);
});
