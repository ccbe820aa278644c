/**
 * Token succession (server/cluster/succession.ts, docs/cluster.md "Token succession"): which
 * heartbeat marks raise a node's tokens, as a pure rule, and on the simulator the case that
 * rule exists for: a node that was active alone during a split brain (with higher tokens)
 * restarts and rejoins as a standby, so no merge raises the active above it.
 */

import assert from "node:assert/strict";
import type { Role } from "../server/cluster/election.ts";
import { heartbeatFloor, promotionFloor, raiseOnHeartbeat } from "../server/cluster/succession.ts";
import { TokenStore } from "../server/tokens.ts";
import { LANE_SLAB, laneReach } from "../server/token_lanes.ts";
import { capturingLogger } from "./_logger.ts";
import { SimCluster } from "./_sim_cluster.ts";

const [A, B] = ["a:7001", "b:7002"];
const TIMEOUT = 1000;

function sender(role: Role, activeAddress: string | undefined, mark: bigint, own = 0n) {
  return { role, activeAddress, mark, own };
}

Deno.test("heartbeatFloor(): a node that is not active takes an active's mark above its own", () => {
  const tokens = { last: 10n, owns: (mark: bigint) => mark <= 1000n };
  for (const role of ["starting", "standby", "leaving"] as const) {
    const self = { address: B, role };
    assert.equal(heartbeatFloor(self, tokens, sender("active", A, 5000n)), 5000n, role);
    assert.equal(heartbeatFloor(self, tokens, sender("active", A, 10n)), undefined, role);
    assert.equal(heartbeatFloor(self, tokens, sender("standby", A, 9000n)), undefined, role);
  }
  const handingOff = { address: B, role: "handing-off" as const };
  assert.equal(heartbeatFloor(handingOff, tokens, sender("active", A, 5000n)), undefined);
});

Deno.test("heartbeatFloor(): an active takes only a follower's mark above its reserved block", () => {
  const self = { address: A, role: "active" as const };
  const tokens = { last: 10n, owns: (mark: bigint) => mark <= 1000n };
  assert.equal(heartbeatFloor(self, tokens, sender("standby", A, 5000n)), 5000n);
  assert.equal(heartbeatFloor(self, tokens, sender("starting", A, 5000n)), 5000n);
  // Its own mark, learned from it: raising to it would skip a block at every heartbeat.
  assert.equal(heartbeatFloor(self, tokens, sender("standby", A, 1000n)), undefined);
  assert.equal(heartbeatFloor(self, tokens, sender("standby", A, 500n)), undefined);
  // Another active, or a node that follows another active: they would leapfrog.
  assert.equal(heartbeatFloor(self, tokens, sender("active", B, 5000n)), undefined);
  assert.equal(heartbeatFloor(self, tokens, sender("handing-off", A, 5000n)), undefined);
  assert.equal(heartbeatFloor(self, tokens, sender("standby", B, 5000n)), undefined);
  assert.equal(heartbeatFloor(self, tokens, sender("standby", undefined, 5000n)), undefined);
});

Deno.test("promotionFloor(): two blocks above every known mark, and above the wall clock in a cluster", () => {
  const base = { last: 10n, peersMark: 30n, block: 1000n, wallMs: 5 };
  assert.equal(promotionFloor({ ...base, clustered: false }), 2030n);
  // In a cluster, two blocks of any lane (token_lanes.ts): 16 slabs for blocks this small.
  assert.equal(promotionFloor({ ...base, clustered: true }), 5_000_000n + 16n * LANE_SLAB);
  assert.equal(promotionFloor({ ...base, clustered: true }), 5_000_000n + laneReach(2000n));
});

Deno.test("ClusterNode: an active rises above the tokens a rejoining node issued while it was active alone", async () => {
  const sim = new SimCluster({ size: 2 });
  assert.equal((await sim.waitForOneActive()).address, A);
  await sim.waitForSync();
  const before = await sim.grant(A, "k:before");
  // A split brain (here a partition; in the field also a peer secret set on one node only):
  // B promotes above the wall clock and grants, then restarts while still cut off.
  sim.partition([A], [B], "down");
  assert.ok(await sim.runUntil(() => sim.node(B).role === "active", 2 * TIMEOUT));
  const onB = await sim.grant(B, "k:b");
  assert.ok(onB > before);
  sim.kill(B);
  sim.heal();
  const [b] = sim.start(B);
  assert.ok(await sim.runUntil(() => b.role === "standby", 2 * TIMEOUT), "B follows A again");
  await sim.advance(3 * sim.heartbeatMs);
  const after = await sim.grant(A, "k:after");
  assert.ok(after > onB, `A's next token ${after} is above B's ${onB}`);
  assert.equal(sim.node(A).role, "active");
});

Deno.test("raiseOnHeartbeat(): a follower's mark the active announced, still being written, raises nothing", async () => {
  // The active announces a background reservation (W) before its write completes; a
  // follower's heartbeat carrying that mark must not look like a token this active never
  // issued (a false 'tokens raised' warning, and a skipped block).
  const dir = await Deno.makeTempDir({ prefix: "lockd-succession-" });
  const log = capturingLogger();
  const announced: bigint[] = [];
  const store = TokenStore.open(dir, {
    block: 100n,
    log,
    onReserve: (m) => void announced.push(m),
  });
  try {
    let token = 0n;
    while (announced.length < 2) token = store.next(); // the background reservation starts
    const pending = announced.at(-1)!;
    assert.ok(store.reserved < pending, "its write is still in flight");
    assert.equal(store.announced, pending);
    const self = { address: A, role: "active" as const };
    raiseOnHeartbeat(self, store, B, sender("standby", A, pending), log);
    assert.deepEqual(log.lines.filter((l) => l.startsWith("warn")), []);
    assert.equal(store.next(), token + 1n, "no token skipped");
    // A follower's mark above anything announced still raises the active.
    raiseOnHeartbeat(self, store, B, sender("standby", A, pending + 5000n), log);
    assert.equal(store.next(), pending + 5001n);
  } finally {
    await store.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("heartbeatFloor(): an active rises above a follower's own mark hidden behind its highest known", () => {
  // The follower knows this active's reservation (5000n, its own: no raise), but its own
  // mark 3000n (a token it issued while active alone, in another lane) is not this node's.
  const self = { address: A, role: "active" as const };
  const tokens = { last: 10n, owns: (mark: bigint) => mark === 5000n || mark <= 1000n };
  assert.equal(heartbeatFloor(self, tokens, sender("standby", A, 5000n, 3000n)), 3000n);
  assert.equal(heartbeatFloor(self, tokens, sender("standby", A, 5000n, 900n)), undefined);
  assert.equal(heartbeatFloor(self, tokens, sender("standby", A, 5000n, 5n)), undefined);
  // Both foreign: the higher.
  assert.equal(heartbeatFloor(self, tokens, sender("standby", A, 7000n, 3000n)), 7000n);
  assert.equal(heartbeatFloor(self, tokens, sender("standby", A, 3000n, 7000n)), 7000n);
  // Not a follower: neither counts.
  assert.equal(heartbeatFloor(self, tokens, sender("standby", B, 5000n, 3000n)), undefined);
});
