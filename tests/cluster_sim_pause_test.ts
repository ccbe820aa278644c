/**
 * A paused active resumed after a standby promoted (docs/cluster.md, "Two actives at
 * once"), on the deterministic simulator: it must hand out no grant of its old activation,
 * neither from a request that waited in its socket during the pause nor from a lease that
 * ran out meanwhile, whatever order the peers' first words arrive in.
 *
 * @module
 */

import assert from "node:assert/strict";
import { SimCluster } from "./_sim_cluster.ts";

const [A, B, C] = ["a:7001", "b:7002", "c:7003"];

/** A cluster of `size` settled after its cold start: `A` active, every standby in sync. */
async function settled(size: number): Promise<SimCluster> {
  const sim = new SimCluster({ size });
  assert.equal((await sim.waitForOneActive()).address, A);
  await sim.waitForSync();
  return sim;
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
