/**
 * The election weighs how far each replica applied the active's stream (docs/cluster.md,
 * "Promotion"): on the simulator, a higher-priority standby that was paused while a
 * lower-priority one kept replicating does not take over when the active dies, and the
 * grants only the lower-priority one received survive the failover.
 */

import assert from "node:assert/strict";
import { SimCluster } from "./_sim_cluster.ts";

const [A, B, C] = ["a:7001", "b:7002", "c:7003"];

Deno.test("ClusterNode: a standby that lagged behind another does not win the failover", async () => {
  const sim = new SimCluster({ size: 3 });
  assert.equal((await sim.waitForOneActive()).address, A);
  await sim.waitForSync();
  const before = await sim.grant(A, "lag:before");
  // B is paused (SIGSTOP) past the freeze threshold but within the failover timeout; C goes
  // on applying A's stream, A's grants included, and acknowledging its batches.
  sim.pause(B);
  const during: [string, bigint][] = [];
  for (let i = 0; i < 5; i++) {
    const key = `lag:${i}`;
    during.push([key, await sim.grant(A, key)]);
    await sim.advance(sim.heartbeatMs);
  }
  for (const [key, token] of during) await sim.replicated(C, key, token);
  await sim.advance(2 * sim.heartbeatMs);
  sim.kill(A);
  await sim.advance(2 * sim.heartbeatMs);
  sim.resume(B);
  const active = await sim.waitForOneActive(5000);
  assert.equal(active.address, C, "the replica that got furthest takes over");
  for (const [key, token] of [["lag:before", before] as [string, bigint], ...during]) {
    assert.equal(active.holder(key), token, `${key} survived the failover`);
  }
  await sim.waitForSync(3000);
  for (const [key, token] of during) assert.equal(sim.node(B).holder(key), token, `B has ${key}`);
});
