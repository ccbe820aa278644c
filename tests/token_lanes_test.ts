/**
 * Token lanes (docs/cluster.md, "Token succession"): every cluster node issues tokens from its
 * own slabs, so two actives at once never issue the same one. The pure rule, the token store
 * that applies it, the simulator's two actives of a partition, and the `--peers` limit.
 */

import assert from "node:assert/strict";
import {
  LANE_SLAB,
  laneAhead,
  laneOf,
  laneOfToken,
  laneReach,
  TOKEN_LANES,
  tokenAfter,
} from "../server/token_lanes.ts";
import { TokenStore } from "../server/tokens.ts";
import { heartbeatFloor } from "../server/cluster/succession.ts";
import { capturingLogger } from "./_logger.ts";
import { mulberry32 } from "./_prng.ts";
import { runMain } from "./_helpers.ts";
import { SimCluster } from "./_sim_cluster.ts";
import { freePorts } from "./_cluster.ts";

const LANES = BigInt(TOKEN_LANES);

Deno.test("tokenAfter() is last + 1 for a single node, and the next token of the lane in a cluster", () => {
  assert.equal(tokenAfter(0n, undefined), 1n);
  assert.equal(tokenAfter(LANE_SLAB * 7n - 1n, undefined), LANE_SLAB * 7n);
  assert.equal(tokenAfter(0n, 0), 1n);
  assert.equal(tokenAfter(41n, 1), LANE_SLAB);
  assert.equal(tokenAfter(LANE_SLAB, 1), LANE_SLAB + 1n);
  // Past the end of its slab, a lane continues at the start of its next one.
  assert.equal(tokenAfter(LANE_SLAB * 2n - 1n, 1), LANE_SLAB * (LANES + 1n));
  assert.equal(tokenAfter(LANE_SLAB * LANES - 1n, 0), LANE_SLAB * LANES);
  assert.equal(tokenAfter(LANE_SLAB * LANES - 1n, 63), LANE_SLAB * (2n * LANES - 1n));
  // Above 2^53, exactly.
  const big = 1_750_000_001_002_000_000n;
  assert.equal(laneOfToken(tokenAfter(big, 5)), 5);
});

Deno.test("tokenAfter() gives the smallest token above `last` in the lane, for any last and lane", () => {
  const random = mulberry32(7);
  for (let i = 0; i < 20_000; i++) {
    const lane = Math.floor(random() * TOKEN_LANES);
    const last = BigInt(Math.floor(random() * 2 ** 40)) * (random() < 0.5 ? 1n : 1_000_000n);
    const token = tokenAfter(last, lane);
    assert.ok(token > last, `${token} <= ${last}`);
    assert.equal(laneOfToken(token), lane);
    // Nothing of the lane between: either consecutive, or the first token of its slab.
    assert.ok(token === last + 1n || token % LANE_SLAB === 0n, `${last} -> ${token}`);
    if (token !== last + 1n) assert.notEqual(laneOfToken(last + 1n), lane);
  }
});

Deno.test("laneAhead() is the count-th token of the lane, slab jumps included", () => {
  assert.equal(laneAhead(41n, 5n, undefined), 46n);
  assert.equal(laneAhead(41n, 5n, 0), 46n);
  assert.equal(laneAhead(LANE_SLAB - 3n, 5n, 0), LANE_SLAB * LANES + 2n);
  const random = mulberry32(11);
  for (let i = 0; i < 2000; i++) {
    const lane = Math.floor(random() * TOKEN_LANES);
    // Near the end of one of the lane's slabs, or anywhere.
    const slab = BigInt(lane) + LANES * BigInt(Math.floor(random() * 1000));
    const from = random() < 0.5
      ? (slab + 1n) * LANE_SLAB - BigInt(Math.floor(random() * 50))
      : BigInt(Math.floor(random() * 2 ** 40));
    const count = BigInt(1 + Math.floor(random() * 100));
    let at = from;
    for (let n = 0n; n < count; n++) at = tokenAfter(at, lane);
    assert.equal(laneAhead(from, count, lane), at, `${from} + ${count} in lane ${lane}`);
  }
});

Deno.test("TokenStore announces a jump to its lane's next slab half a block before it", async () => {
  // A token reserved only by the write just before its grant would be lost with that
  // grant's replication at a kill -9, and a successor could start below it.
  const dir = await Deno.makeTempDir({ prefix: "lockd-lanes-" });
  try {
    const announced: bigint[] = [];
    const store = TokenStore.open(dir, {
      lane: 1,
      block: 1000n,
      log: capturingLogger(),
      onReserve: (mark) => void announced.push(mark),
    });
    store.raiseTo(LANE_SLAB * 2n - 3000n); // 3,000 tokens before the end of lane 1's slab
    const nextSlab = LANE_SLAB * (LANES + 1n);
    let issued = 0;
    let announcedAt: number | undefined;
    for (;;) {
      const token = store.next();
      issued++;
      if (announcedAt === undefined && announced.some((m) => m >= nextSlab)) announcedAt = issued;
      if (token >= nextSlab) break;
    }
    assert.equal(issued, 3000);
    assert.ok(announcedAt !== undefined && issued - announcedAt >= 500, `at ${announcedAt}`);
    await store.close();
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("laneReach() bounds how far any lane's next tokens reach", () => {
  const random = mulberry32(13);
  for (let i = 0; i < 3000; i++) {
    const lane = Math.floor(random() * TOKEN_LANES);
    const from = BigInt(Math.floor(random() * 2 ** 40));
    const count = BigInt(1 + Math.floor(random() * 3 * Number(LANE_SLAB)));
    assert.ok(laneAhead(from, count, lane) - from <= laneReach(count), `${from} ${count} ${lane}`);
  }
  // The worst case: from the last token of one of the lane's slabs.
  const count = 2_000_000n;
  const worst = laneAhead(LANE_SLAB - 1n, count, 0) - (LANE_SLAB - 1n);
  assert.ok(worst <= laneReach(count) && worst > laneReach(count) - LANE_SLAB, `${worst}`);
});

Deno.test("laneOf() is the node's position in --peers, for at most 16 nodes", () => {
  const peers = Array.from({ length: TOKEN_LANES }, (_, i) => `10.0.0.${i}:7321`);
  assert.equal(laneOf("10.0.0.0:7321", peers), 0);
  assert.equal(laneOf("10.0.0.15:7321", peers), 15);
  assert.throws(() => laneOf("10.0.0.99:7321", peers), RangeError);
  assert.throws(() => laneOf("10.0.0.0:7321", [...peers, "10.0.1.0:7321"]), /at most 16 nodes/);
});

Deno.test("TokenStore with a lane issues only its lane's tokens, across raises and reservations", async () => {
  const dir = await Deno.makeTempDir({ prefix: "lockd-lanes-" });
  try {
    const store = TokenStore.open(dir, { lane: 2, block: 1000n, log: capturingLogger() });
    const issued: bigint[] = [];
    for (let i = 0; i < 3000; i++) issued.push(store.next());
    store.raiseTo(LANE_SLAB * 5n + 17n); // a promotion floor in another lane's slab
    issued.push(store.next());
    store.raiseTo(LANE_SLAB * 3n - 2n); // near the end of its next slab
    for (let i = 0; i < 3; i++) issued.push(store.next());
    for (let i = 1; i < issued.length; i++) assert.ok(issued[i] > issued[i - 1]);
    assert.deepEqual(new Set(issued.map(laneOfToken)), new Set([2]));
    assert.equal(issued[0], LANE_SLAB * 2n);
    assert.equal(issued[3000], LANE_SLAB * (LANES + 2n));
    assert.ok(store.reserved >= issued.at(-1)!, "reserved on disk before it was issued");
    await store.close();
    // Reopened, it continues above the last one, in its lane.
    const again = TokenStore.open(dir, { lane: 2, log: capturingLogger() });
    const next = again.next();
    assert.ok(next > issued.at(-1)! && laneOfToken(next) === 2);
    await again.close();
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("ClusterNode: the two actives of a partition never issue the same token", async () => {
  // A cut off from B and C keeps granting while B promotes above A's announced mark: with
  // small blocks, A passes B's floor within the partition; lanes keep them apart.
  const sim = new SimCluster({ size: 3, block: 100n });
  const [A, B, C] = sim.addresses;
  assert.equal((await sim.waitForOneActive()).address, A);
  await sim.waitForSync();
  sim.partition([A], [B, C], "down");
  assert.ok(await sim.runUntil(() => sim.node(B).role === "active", 3000), sim.describe());
  const onA: bigint[] = [];
  const onB: bigint[] = [];
  for (let i = 0; i < 400; i++) {
    onA.push(await sim.grant(A, `lanes:a${i}`, 60));
    if (i % 4 === 0) onB.push(await sim.grant(B, `lanes:b${i}`, 60));
  }
  // More than the two blocks of margin B's floor has over A's mark: without lanes A would
  // have reached B's tokens.
  assert.ok(onA.at(-1)! - onA[0] > 200n, `A issued ${onA.at(-1)! - onA[0]} tokens`);
  const both = onA.filter((t) => onB.includes(t));
  assert.deepEqual(both, [], "tokens granted by both actives");
  assert.deepEqual(new Set(onA.map(laneOfToken)), new Set([0]));
  assert.deepEqual(new Set(onB.map(laneOfToken)), new Set([1]));
  void C;
});

Deno.test("ClusterNode: a successor starts above a slab jump the dead active made, replicated or not", async () => {
  // The wall clock is held still, so that only the marks can keep the successor above.
  const sim = new SimCluster({ size: 2, wallClock: () => 0 });
  const [A, B] = sim.addresses;
  for (const node of [A, B]) sim.kill(node);
  // B (lane 1) starts 10 tokens before the end of its slab 17 (its floor adds two blocks of
  // any lane).
  sim.writeMark(B, 18n * LANE_SLAB - laneReach(2_000_000n) - 10n);
  sim.start(B);
  assert.equal((await sim.waitForOneActive()).address, B);
  sim.start(A);
  await sim.waitForSync();
  await sim.grant(B, "busy:k");
  sim.connect(B).send("A busy:k 30 30"); // a waiter holds the failback back
  await sim.advance(10);
  const onB: bigint[] = [];
  do onB.push(await sim.grant(B, `jump:${onB.length}`)); while (onB.at(-1)! < 18n * LANE_SLAB);
  sim.kill(B, { dropInFlight: true }); // the last grant's lines never reach A
  assert.equal((await sim.waitForOneActive(5000)).address, A, sim.describe());
  const next = await sim.grant(A, "jump:after");
  assert.ok(next > onB.at(-1)!, `A granted ${next} after B had granted ${onB.at(-1)}`);
});

Deno.test("heartbeatFloor(): an active rises above another lane's token below its own reservation", async () => {
  // Lane 0's reservation runs up to 16 slabs ahead of its next token: a follower's mark in
  // that range but in lane 2 is a token another node issued, not this node's announcement.
  const dir = await Deno.makeTempDir({ prefix: "lockd-lanes-" });
  const tokens = TokenStore.open(dir, { lane: 0, block: 3_000_000n, log: capturingLogger() });
  try {
    const floor = 5n * LANE_SLAB * LANES + 2n * LANE_SLAB + 10n; // in lane 2
    tokens.raiseTo(floor); // announced exactly: a mark of its own, though in another lane
    tokens.next(); // reserves three million tokens of lane 0 ahead
    const self = { address: "a:7001", role: "active" as const };
    const follower = (mark: bigint) => ({
      role: "standby" as const,
      activeAddress: self.address,
      mark,
      own: 0n,
    });
    const foreign = tokens.last + 2n * LANE_SLAB + 5n; // lane 2
    assert.equal(heartbeatFloor(self, tokens, follower(foreign)), foreign);
    assert.equal(heartbeatFloor(self, tokens, follower(tokens.announced)), undefined, "its W");
    assert.equal(heartbeatFloor(self, tokens, follower(tokens.last + 7n)), undefined, "its lane");
    assert.equal(heartbeatFloor(self, tokens, follower(tokens.last)), undefined);
    assert.ok(tokens.owns(floor), "the floor it announced is its own too");
    assert.equal(heartbeatFloor(self, tokens, follower(floor)), undefined);
    const above = tokens.announced + 1n;
    assert.equal(heartbeatFloor(self, tokens, follower(above)), above);
  } finally {
    await tokens.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("ClusterNode: a settled active rises above the tokens of a node that returns as its follower", async () => {
  // Found by the seeded fault search (seed 622232330): A, paused, resumes on its old tokens;
  // C, which granted above them in its own lane, returns as A's follower with a mark below
  // A's reservation. A must issue above C's tokens from then on.
  const sim = new SimCluster({ size: 3 });
  const [A, B, C] = sim.addresses;
  await sim.waitForOneActive();
  await sim.waitForSync();
  await sim.advance(200);
  sim.pause(A);
  assert.ok(await sim.runUntil(() => sim.node(B).role === "active", 3000));
  await sim.waitForSync(2000);
  let left: boolean | undefined;
  sim.shutdown(B).then((ok) => left = ok); // B hands over to C
  assert.ok(await sim.runUntil(() => left === true && sim.node(C).role === "active", 2000));
  const onC = await sim.grant(C, "rise:k", 1);
  sim.kill(C);
  sim.start(B); // its data directory holds only B's last token
  sim.resume(A); // A raises its tokens to B's mark
  await sim.waitForOneActive(5000);
  await sim.grant(A, "rise:early");
  sim.start(C); // C follows A; its heartbeat mark is above onC
  assert.equal((await sim.waitForOneActive(5000)).address, A);
  await sim.waitForSync(3000);
  await sim.advance(2000);
  const after = await sim.grant(A, "rise:other");
  assert.ok(after > onC, `settled, A granted ${after} below C's earlier ${onC}`);
});

Deno.test("main() exits 2 when --peers lists more than 16 nodes", async () => {
  const [self] = freePorts(1).map((p) => `127.0.0.1:${p}`);
  const others = Array.from({ length: TOKEN_LANES }, (_, i) => `10.9.${i >> 8}.${i & 255}:7321`);
  const out = await runMain(["--listen", self, "--peers", [self, ...others].join(",")]);
  assert.equal(out.code, 2, out.stderr);
  assert.match(out.stderr, /--peers lists 17 nodes, at most 16 are supported/);
});
