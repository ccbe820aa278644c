/**
 * Token marks heard in heartbeats (docs/cluster.md, "Fencing tokens across failovers") on
 * the simulator: an active raises its tokens only for a mark another node issued, never for
 * its own reservation echoed back by a standby that restarted and caught up.
 */

import assert from "node:assert/strict";
import { SimCluster } from "./_sim_cluster.ts";

const [A, B, C] = ["a:7001", "b:7002", "c:7003"];

Deno.test("ClusterNode: a handover to a restarted standby raises no tokens", async () => {
  const sim = new SimCluster({ size: 3 });
  assert.equal((await sim.waitForOneActive()).address, A);
  await sim.waitForSync();
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
