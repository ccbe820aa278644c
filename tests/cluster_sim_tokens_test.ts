/**
 * Token marks heard in heartbeats (docs/cluster.md, "Token succession") on the simulator:
 * an active raises its tokens only for a mark another node issued, never for its own
 * reservation echoed back by a standby that restarted and caught up; a standby that heard
 * another active's mark rises above it when it takes over.
 */

import assert from "node:assert/strict";
import { SimCluster, type SimClusterOptions } from "./_sim_cluster.ts";

const [A, B, C] = ["a:7001", "b:7002", "c:7003"];

/** A cluster settled after its cold start: `A` active, every standby in sync. */
async function settled(options: SimClusterOptions = {}): Promise<SimCluster> {
  const sim = new SimCluster({ size: 3, ...options });
  assert.equal((await sim.waitForOneActive()).address, A);
  await sim.waitForSync();
  return sim;
}

/** Once one node is active again, its next grant is above `earlier`. */
async function grantsAbove(sim: SimCluster, earlier: bigint, key: string): Promise<void> {
  const active = await sim.waitForOneActive();
  const after = await sim.grant(active.address, key);
  assert.ok(after > earlier, `${active.address} granted ${after} after ${earlier}`);
}

Deno.test("ClusterNode: a handover to a restarted standby raises no tokens", async () => {
  const sim = await settled();
  for (let i = 0; i < 20; i++) await sim.grant(A, `restart:${i}`);
  for (const address of [B, C]) {
    const left = sim.shutdown(address);
    assert.ok(await sim.runUntil(() => sim.node(address).exited, 1000));
    assert.equal(await left, false, "a standby has nothing to hand over");
  }
  await sim.advance(200);
  // C comes back and learns A's reservation as its mark; then B; then A hands over.
  sim.start(C);
  await sim.waitForSync();
  await sim.advance(300);
  sim.start(B);
  const left = sim.shutdown(A);
  assert.ok(await sim.runUntil(() => sim.node(A).exited, 3000), sim.describe());
  assert.equal(await left, true, "A handed over");
  await sim.advance(1000);
  const active = await sim.waitForOneActive();
  assert.notEqual(active.address, A);
  for (const address of [B, C]) {
    const raised = sim.node(address).warnings.filter((line) => line.includes("raised"));
    assert.deepEqual(raised, [], `${address} raised no tokens`);
  }
  for (let i = 0; i < 20; i++) assert.ok(active.holder(`restart:${i}`) !== undefined);
});

Deno.test("ClusterNode: a standby that heard a second active's mark rises above it when handed over to", async () => {
  const sim = await settled();
  // C alone promotes and grants; then only A and C are cut, so B (following A) hears C.
  sim.partition([C], [A, B], "down");
  assert.ok(await sim.runUntil(() => sim.node(C).role === "active", 3000), sim.describe());
  const onC = await sim.grant(C, "split:c");
  sim.heal();
  sim.partition([A], [C], "down");
  await sim.advance(300);
  sim.kill(C);
  sim.heal();
  await sim.advance(500);
  const left = sim.shutdown(A);
  assert.ok(await sim.runUntil(() => sim.node(A).exited, 3000), sim.describe());
  assert.equal(await left, true, "A handed over");
  assert.equal((await sim.waitForOneActive()).address, B);
  const onB = await sim.grant(B, "split:b");
  assert.ok(onB > onC, `B granted ${onB} after C had granted ${onC}`);
  sim.start(C);
  await sim.advance(3000);
  const after = await sim.grant((await sim.waitForOneActive()).address, "split:after");
  assert.ok(after > onC, `${after} after ${onC}`);
});

Deno.test("ClusterNode: a node that was active alone from the start returns as a follower and the active rises above its tokens", async () => {
  // Both sides of a partition promote from the same floor (a clock that stands still), each
  // in its own lane. A's first token is half way into a slab of lane 0, so its reservation
  // jumps to its next slab, past C's tokens: C, back as a follower, must still report them,
  // not the active's reservation it replicates.
  const wall = 1_750_000_000_052; // ms; in ns, half way into a slab of lane 0
  const sim = new SimCluster({ size: 3, wallClock: () => wall });
  sim.partition([C], [A, B], "down");
  const actives = () => [A, C].every((address) => sim.node(address).role === "active");
  assert.ok(await sim.runUntil(actives, 5000), sim.describe());
  const onA = await sim.grant(A, "alone:a");
  const onC = await sim.grant(C, "alone:c");
  sim.kill(C);
  sim.heal();
  await sim.advance(500);
  sim.start(C);
  await sim.waitForSync(3000);
  await sim.advance(1000);
  const raised = sim.node(A).warnings.filter((line) => line.includes("raised"));
  assert.equal(raised.length, 1, `A rose above C's tokens once: ${raised}`);
  const after = await sim.grant(A, "alone:after");
  assert.ok(after > onC && after > onA, `${after} after ${onC} (C) and ${onA} (A)`);
});

Deno.test("ClusterNode: a follower passes on the mark of a second active that died, and the active rises above it", async () => {
  const sim = await settled();
  // B promotes on the far side of a partition, C replicates it, then B dies.
  sim.partition([A], [B, C], "down");
  assert.ok(await sim.runUntil(() => sim.node(B).role === "active", 3000), sim.describe());
  await sim.waitForSync();
  const onB = await sim.grant(B, "relay:b");
  sim.kill(B);
  sim.heal();
  await sim.advance(3000);
  await grantsAbove(sim, onB, "relay:after");
});

Deno.test("ClusterNode: a paused active that wakes stays parked while a follower knows higher tokens", async () => {
  const sim = await settled();
  await sim.grant(A, "wake:a");
  // C hears B but can never sync with it; A is cut from B and paused; B promotes and grants.
  sim.cut(C, B, "down");
  sim.partition([A], [B], "down");
  sim.pause(A);
  assert.ok(await sim.runUntil(() => sim.node(B).role === "active", 3000), sim.describe());
  const onB = await sim.grant(B, "wake:b");
  await sim.advance(500);
  sim.kill(B);
  sim.resume(A);
  sim.heal();
  await sim.advance(4000);
  await grantsAbove(sim, onB, "wake:after");
});

Deno.test("ClusterNode: a standby killed soon after a restart raises no tokens when it returns", async () => {
  // A reservation made at start and left on disk by kill -9 would come back as a mark of the
  // standby's own that no node issued (here in lane 1: A's first block ends 88 tokens before
  // the end of a lane-0 slab).
  const sim = await settled({ block: 1000n, wallClock: () => 1_750_000_061_239 });
  await sim.grant(A, "crash:first");
  await sim.advance(300);
  const left = sim.shutdown(B);
  assert.ok(await sim.runUntil(() => sim.node(B).exited, 1000));
  assert.equal(await left, false);
  sim.start(B);
  await sim.waitForSync(3000);
  await sim.advance(300);
  sim.kill(B);
  const before: bigint[] = [];
  for (let i = 0; i < 600; i++) before.push(await sim.grant(A, `crash:${i}`));
  sim.start(B);
  await sim.waitForSync(3000);
  await sim.advance(1000);
  const raised = sim.node(A).warnings.filter((line) => line.includes("raised"));
  assert.deepEqual(raised, [], "B's restart raised A's tokens");
  assert.equal(await sim.grant(A, "crash:after"), before.at(-1)! + 1n, "no jump");
});
