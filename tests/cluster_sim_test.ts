/**
 * The cluster scenarios of `cluster_test.ts` (real processes) re-expressed on the
 * deterministic simulator (`_sim_cluster.ts`): several {@linkcode ClusterNode}s on fake
 * time, talking through the real peer codec and `PeerInbound`, each driving a real lock
 * table through the real `ClientSession`. Cold start, failover after kill -9, graceful
 * handoff, failback, split brain after SIGSTOP/SIGCONT, token succession, 1 and 4 nodes,
 * and a client riding through a failover. Default timings (heartbeat 100 ms, failover
 * timeout 1 s), 1 ms network delay.
 */

import assert from "node:assert/strict";
import { FollowingAcquire, SimCluster } from "./_sim_cluster.ts";

const [A, B, C, D] = ["a:7001", "b:7002", "c:7003", "d:7004"];
const HEARTBEAT = 100;
const TIMEOUT = 1000;
const SIZES = [3, 2];

/**
 * Longest time from a kill -9 of the active to the promotion of its successor: the failover
 * timeout plus up to one heartbeat until the next tick, plus network delays. With a third
 * node, up to one heartbeat more: that node's last heartbeat before it, too, gave the
 * active up still names it as live (it heard it less than a failover timeout before), and
 * a standby follows an active a live peer names (the partial-partition rule).
 */
function promotionBudget(size: number): number {
  return TIMEOUT + (size === 2 ? 1 : 2) * HEARTBEAT + 5;
}

function max(tokens: Iterable<bigint>): bigint {
  let m = 0n;
  for (const t of tokens) if (t > m) m = t;
  return m;
}

function increasing(tokens: readonly bigint[]): boolean {
  return tokens.every((t, i) => i === 0 || t > tokens[i - 1]);
}

/** Pipelines `A <prefix><i> 30 0` for `count` keys on `address`; returns every token. */
async function grantMany(
  sim: SimCluster,
  address: string,
  prefix: string,
  count: number,
): Promise<bigint[]> {
  const client = sim.connect(address);
  for (let i = 0; i < count; i++) client.send(`A ${prefix}${i} 30 0`);
  assert.ok(await sim.runUntil(() => client.replies.length === count, 100), sim.describe());
  client.close();
  return client.replies.map((line, i) => {
    const match = new RegExp(`^A ${prefix}${i} A (\\d+)$`).exec(line);
    assert.ok(match, `reply ${line}`);
    return BigInt(match[1]);
  });
}

/** Cold start: node 0 active, every other node its standby, in sync. */
async function coldStart(sim: SimCluster): Promise<void> {
  const active = await sim.waitForOneActive();
  assert.equal(active.address, A, "the highest-priority node is active after a cold start");
  await sim.waitForSync();
}

// ---------------------------------------------------------------------------------------
// Cold start

for (const size of SIZES) {
  Deno.test(`ClusterNode (${size} nodes) cold start makes the highest-priority node active after one failover timeout`, async () => {
    const sim = new SimCluster({ size });
    await sim.advance(TIMEOUT - 1);
    for (const address of sim.addresses) {
      assert.equal(sim.node(address).role, "starting");
      assert.deepEqual(sim.node(address).node.gate(), {
        kind: "refuse",
        refusal: { status: "E", text: "no active node" },
      });
    }
    const active = await sim.waitForOneActive(3 * HEARTBEAT);
    assert.equal(active.address, A);
    assert.deepEqual(active.roles.map((r) => [r.at, r.role, r.description]), [
      [TIMEOUT, "active", "promoted"],
    ]);
    for (const address of sim.addresses.slice(1)) {
      const standby = sim.node(address);
      assert.equal(standby.lastRole?.description, `following ${A}`);
      assert.deepEqual(standby.node.gate(), {
        kind: "refuse",
        refusal: { status: "M", text: A },
      });
      // It asked for the stream and got a whole snapshot: it is in sync.
      await sim.runUntil(() => standby.node.replica.synced, 2 * HEARTBEAT);
      assert.ok(standby.node.replica.synced, `${address} in sync`);
      assert.equal(sim.lines(address, A, "SYNC").length, 1);
      assert.deepEqual(
        sim.lines(A, address).map((l) => l.line.split(" ")[0]).filter((t) => t !== "HB"),
        [
          "PEER",
          "SNAP",
          "W",
          "SNAPEND",
        ],
      );
    }
    assert.equal(await sim.request(B, "A cold 30 0"), `A cold M ${A}`);
    assert.match((await sim.request(A, "A cold 30 0")) ?? "", /^A cold A \d+$/);
  });
}

// ---------------------------------------------------------------------------------------
// Failover after kill -9

for (const size of SIZES) {
  Deno.test(`ClusterNode (${size} nodes) fails over after a kill -9 of the active, keeping tokens and holders`, async () => {
    const sim = new SimCluster({ size });
    await coldStart(sim);
    const held = await sim.grant(A, "kill:held");
    const before = [held, ...await grantMany(sim, A, "kill:k", 20)];
    assert.ok(increasing(before), "tokens grow");
    await sim.replicated(B, "kill:held", held);
    await sim.replicated(B, "kill:k19", before[20]);

    const killedAt = sim.now;
    sim.kill(A);
    const heir = sim.node(B);
    assert.ok(
      await sim.runUntil(() => heir.role === "active", promotionBudget(size)),
      `no promotion within ${promotionBudget(size)} ms\n${sim.describe()}`,
    );
    assert.equal(heir.lastRole?.description, "promoted");
    assert.ok(sim.now - killedAt > TIMEOUT - HEARTBEAT, `promoted after ${sim.now - killedAt} ms`);
    const first = await sim.grant(B, "kill:first");
    assert.ok(first > max(before), `${first} is not above ${max(before)}`);
    assert.equal((await sim.waitForOneActive()).address, B);
    if (size === 3) assert.equal(sim.node(C).lastRole?.description, `following ${B}`);

    // Still held by the same grant: others get T, the holder's token still works.
    assert.equal(await sim.request(B, "A kill:held 30 0.001"), "A kill:held T");
    assert.equal(await sim.request(B, `X kill:held ${held} 30`), "X kill:held X");
    assert.equal(await sim.request(B, `R kill:held ${held}`), "R kill:held R");
    const again = await sim.grant(B, "kill:held");
    const later = [again, ...await grantMany(sim, B, "kill:after", 20)];
    for (const t of later) assert.ok(t > max(before) && t > first, `token ${t}`);
    assert.ok(increasing(later));
  });
}

// ---------------------------------------------------------------------------------------
// Graceful handoff

for (const size of SIZES) {
  Deno.test(`ClusterNode (${size} nodes) leave() hands over to the successor, redirecting queued acquires in queue order`, async () => {
    const sim = new SimCluster({ size });
    await coldStart(sim);
    const a = await sim.grant(A, "term:a");
    const b = await sim.grant(A, "term:b");
    const granted: number[] = [];
    const waiters = [0, 1, 2].map((i) => {
      const waiter = new FollowingAcquire(sim, A, "A term:a 30 0");
      waiter.onGrant = () => granted.push(i);
      return waiter;
    });
    await sim.advance(5);
    assert.equal(sim.node(A).table.waiting, 3);
    await sim.replicated(B, "term:b", b);

    const left = sim.shutdown(A);
    const heir = sim.node(B);
    // Handed over, before the successor's first heartbeat as active: A redirects to it
    // (the successor parks until its COMMIT), it does not answer "no active node".
    assert.ok(await sim.runUntil(() => sim.node(A).node.role === "leaving", 50), sim.describe());
    assert.notEqual(heir.lastRole?.role, "active");
    assert.deepEqual(sim.node(A).node.gate(), {
      kind: "refuse",
      refusal: { status: "M", text: B },
    });
    assert.ok(await sim.runUntil(() => sim.node(A).exited, 50), sim.describe());
    assert.equal(await left, true, "a successor took over");
    await sim.advance(2 * sim.delayMs); // COMMIT reaches the successor
    assert.equal(heir.lastRole?.description, `took over from ${A}`);
    assert.deepEqual(sim.node(A).roles.map((r) => r.role), ["active", "handing-off", "leaving"]);
    // One full handover to B, confirmed.
    const handoffs = sim.lines(A, B, "HANDOFF");
    assert.equal(handoffs.length, 1);
    assert.match(handoffs[0].line, /^HANDOFF act\d+ \d+ \d+ full - 0 \d+$/);
    assert.equal(sim.lines(B, A, "TAKEN").length, 1);
    assert.equal(sim.lines(A, B, "COMMIT").length, 1);
    // The queued acquires were redirected with M, in queue order, and queued again on B.
    const [answered] = sim.node(A).answered;
    assert.deepEqual(answered.refusal, { status: "M", text: B });
    assert.deepEqual(answered.replies, Array(3).fill(`A term:a M ${B}`));
    await sim.advance(5);
    assert.equal(heir.table.waiting, 3);
    assert.equal((await sim.waitForOneActive()).address, B);

    // The holders survived: their tokens still work on the new active.
    assert.equal(await sim.request(B, `X term:b ${b} 30`), "X term:b X");
    assert.equal(await sim.request(B, `X term:a ${a} 30`), "X term:a X");
    assert.deepEqual(granted, [], "no waiter was granted while term:a is held");
    assert.ok(heir.tokens.last > sim.node(A).tokens.last, "tokens above the old active's last");

    // Releasing passes term:a down the queue in FIFO order, with growing tokens.
    let previous = a;
    for (let i = 0; i < waiters.length; i++) {
      assert.equal(await sim.request(B, `R term:a ${previous}`), "R term:a R");
      await sim.advance(2);
      const token = waiters[i].token;
      assert.ok(token !== undefined && token > previous, `waiter ${i}: token ${token}`);
      previous = token;
    }
    assert.deepEqual(granted, [0, 1, 2], "FIFO order");
    for (const waiter of waiters) {
      assert.ok(waiter.replies.every((r) => !/ E /.test(r)), `no error: ${waiter.replies}`);
    }
  });
}

// ---------------------------------------------------------------------------------------
// A broken stream

Deno.test("ClusterNode standby whose stream connection broke asks for a new snapshot", async () => {
  const sim = new SimCluster({ size: 3 });
  await coldStart(sim);
  const gone = await sim.grant(A, "resync:gone");
  await sim.replicated(B, "resync:gone", gone);
  const cutAt = sim.now;
  sim.cut(A, B, "down");
  const standby = sim.node(B);
  assert.ok(await sim.runUntil(() => !standby.node.replica.synced, 5));
  // Meanwhile the active grants and releases: the standby misses both.
  assert.equal(await sim.request(A, `R resync:gone ${gone}`), "R resync:gone R");
  const missed = await sim.grant(A, "resync:missed");
  await sim.advance(HEARTBEAT);
  assert.equal(standby.holder("resync:missed"), undefined);
  // Its heartbeats say it is not in sync (the active must not rely on its replica).
  const hb = sim.lines(B, A, "HB").filter((l) => l.at > cutAt + 2);
  assert.ok(hb.length > 0 && hb.every((l) => l.line.split(" ")[3] === "0"), hb.at(-1)?.line);

  sim.heal();
  assert.ok(await sim.runUntil(() => standby.node.replica.synced, 2 * TIMEOUT), sim.describe());
  assert.equal(standby.holder("resync:missed"), missed);
  assert.equal(standby.holder("resync:gone"), undefined);
  assert.ok(sim.lines(B, A, "SYNC").length >= 2, "asked again");
});

// ---------------------------------------------------------------------------------------
// Failback to a restarted higher-priority node

for (const size of SIZES) {
  Deno.test(`ClusterNode (${size} nodes) fails back to the restarted highest-priority node as soon as it is in sync, holders intact`, async () => {
    const sim = new SimCluster({ size });
    await coldStart(sim);
    sim.kill(A);
    assert.equal((await sim.waitForOneActive()).address, B);
    const lock = await sim.grant(B, "back:a");
    const raw = await grantMany(sim, B, "back:k", 10);

    const [first] = sim.start(A);
    // It hears the active within two heartbeats (the active redials it every heartbeat).
    assert.ok(await sim.runUntil(() => first.roles.length > 0, 2 * HEARTBEAT + 5));
    assert.equal(first.roles[0].role, "standby", "a returning node starts as a standby");
    assert.equal(first.roles[0].description, `following ${B}`);
    // It syncs from the active first, then the active hands over to it at once (nothing
    // is queued).
    assert.ok(await sim.runUntil(() => first.role === "active", 1000), sim.describe());
    assert.equal(first.lastRole?.description, `took over from ${B}`);
    const synced = sim.received.find((l) => l.from === B && l.to === A && l.line === "SNAPEND");
    assert.ok(synced !== undefined && synced.at < first.lastRole.at, "synced before taking over");
    assert.ok(
      first.lastRole.at - synced.at <= HEARTBEAT + 5,
      `failback ${first.lastRole.at - synced.at} ms after the sync`,
    );
    const handoff = sim.lines(B, A, "HANDOFF");
    assert.equal(handoff.length, 1);
    assert.match(handoff[0].line, / sync /, "a standby in sync needs no holders sent");
    assert.equal((await sim.waitForOneActive()).address, A);
    assert.equal(sim.node(B).lastRole?.description, `handed over to ${A}`);

    assert.equal(await sim.request(A, "A back:a 30 0.001"), "A back:a T");
    assert.equal(await sim.request(A, "A back:k0 30 0.001"), "A back:k0 T");
    assert.equal(await sim.request(A, `X back:k0 ${raw[0]} 30`), "X back:k0 X");
    assert.equal(await sim.request(A, `R back:k0 ${raw[0]}`), "R back:k0 R");
    const after = await sim.grant(A, "back:after");
    assert.ok(after > max(raw) && after > lock, `token ${after}`);
    assert.equal(await sim.request(A, `X back:a ${lock} 30`), "X back:a X");
    assert.equal(await sim.request(A, `R back:a ${lock}`), "R back:a R");
    assert.equal(await sim.request(A, `X back:a ${lock} 30`), "X back:a N");
  });
}

Deno.test("ClusterNode (3 nodes) keeps its holders when the killed active restarts at once", async () => {
  // SPEC §4: a returning node never takes over with empty state; the replica promotes.
  const sim = new SimCluster({ size: 3 });
  await coldStart(sim);
  const held = await sim.grant(A, "quick:a");
  await sim.replicated(B, "quick:a", held);
  await sim.replicated(C, "quick:a", held);
  sim.kill(A);
  const [restarted] = sim.start(A);
  assert.ok(await sim.runUntil(() => restarted.role === "active", 6000), sim.describe());
  // The standby with the state took over first, then failed back to the returning node.
  assert.equal(sim.node(B).roles.find((r) => r.role === "active")?.description, "promoted");
  assert.equal(restarted.lastRole?.description, `took over from ${B}`);
  assert.ok(!restarted.roles.some((r) => r.description === "promoted"), "never promoted empty");
  const active = await sim.waitForOneActive();
  assert.equal(active.address, A);
  assert.equal(await sim.request(A, "A quick:a 30 0.001"), "A quick:a T");
  assert.equal(await sim.request(A, `X quick:a ${held} 30`), "X quick:a X");
  assert.ok((await sim.grant(A, "quick:after")) > held);
});

// ---------------------------------------------------------------------------------------
// Split brain after SIGSTOP / SIGCONT

for (const size of SIZES) {
  Deno.test(`ClusterNode (${size} nodes) merges back to one active after a pause of the active, the lower-priority one stepping down`, async () => {
    const sim = new SimCluster({ size });
    await coldStart(sim);
    const before = await grantMany(sim, A, "stop:", 5);
    const [oldToken, bothToken] = before;
    await sim.replicated(B, "stop:4", before[4]);

    const pausedAt = sim.now;
    sim.pause(A);
    const interim = sim.node(B);
    assert.ok(await sim.runUntil(() => interim.role === "active", 3000), sim.describe());
    assert.equal(interim.lastRole?.description, "promoted");
    const fresh = await sim.grant(B, "stop:new");
    // A key the paused active still holds in its own table, re-granted during the pause.
    assert.equal(await sim.request(B, `R stop:1 ${bothToken}`), "R stop:1 R");
    const regranted = await sim.grant(B, "stop:1");
    assert.equal(await sim.request(B, "A stop:0 30 0.001"), "A stop:0 T");
    // The interim active's highest token is one nobody holds when they merge.
    const gone = await sim.grant(B, "stop:gone");
    assert.equal(await sim.request(B, `R stop:gone ${gone}`), "R stop:gone R");
    assert.ok(fresh > max(before) && regranted > fresh && gone > regranted);
    await sim.advance(pausedAt + 1500 - sim.now);

    const resumedAt = sim.now;
    sim.resume(A);
    const paused = sim.node(A);
    // It knows it was frozen: it parks requests rather than grant from its stale table.
    const probe = sim.connect(A);
    probe.send("A stop:probe 30 0");
    await sim.advance(2);
    assert.equal(paused.parked, 1);
    assert.ok(!paused.node.canAdvance(), "leases frozen");
    assert.ok(paused.warnings.some((w) => /was paused/.test(w)), String(paused.warnings));
    // Until the interim active's state is merged, it serves nothing from its stale table.
    const merged = () => sim.received.some((l) => l.from === B && l.line === "HANDOFFEND");
    let servedEarly = false;
    const one = await sim.waitUntilOneActive(2000, () => {
      if (!merged() && paused.node.gate().kind === "serve") servedEarly = true;
    });
    assert.ok(!servedEarly, "the woken active served before the merge");
    assert.equal(one.address, A, "the higher-priority node wins, the other steps down");
    assert.ok(sim.now - resumedAt < 1000, `one active ${sim.now - resumedAt} ms after resuming`);
    assert.equal(interim.lastRole?.description, `handed over to ${A}`);
    // The loser handed its state over in full, naming the activation it replicated.
    const [handoff] = sim.lines(B, A, "HANDOFF");
    assert.match(handoff.line, /^HANDOFF act\d+ \d+ \d+ full act\d+ \d+ \d+$/);
    assert.ok(paused.unparks.some((at) => at >= handoff.at), "unparked after the merge");
    // The parked request was served after the merge, above every token of the split.
    const probed = /^A stop:probe A (\d+)$/.exec(probe.replies[0] ?? "");
    assert.ok(probed && BigInt(probed[1]) > gone, `probe: ${probe.replies} after ${gone}`);

    // The newer grants survived the merge; the older grant of stop:1 did not.
    assert.equal(await sim.request(A, "A stop:new 30 0.001"), "A stop:new T");
    assert.equal(await sim.request(A, `X stop:1 ${bothToken} 30`), "X stop:1 N");
    assert.equal(await sim.request(A, `X stop:1 ${regranted} 30`), "X stop:1 X");
    assert.equal(await sim.request(A, `X stop:0 ${oldToken} 30`), "X stop:0 X");
    assert.equal(await sim.request(A, `R stop:new ${fresh}`), "R stop:new R");
    const after = await sim.grant(A, "stop:after");
    assert.ok(after > gone, `token ${after} after the merge, ${gone} issued before`);
  });
}

// ---------------------------------------------------------------------------------------
// Token succession

Deno.test("ClusterNode continues above a burst of grants the dead active never replicated", async () => {
  // Small blocks and a wall clock that does not help: the promotion's two-block margin
  // alone covers a reservation (W) the standbys never got.
  const sim = new SimCluster({ size: 3, block: 1000n, wallClock: () => 0 });
  await coldStart(sim);
  const client = sim.connect(A);
  for (let i = 0; i < 1500; i++) client.send(`A burst:${i} 30 0`);
  assert.ok(await sim.runUntil(() => client.replies.length === 1500, 10));
  sim.kill(A, { dropInFlight: true });
  const tokens = client.replies.map((line) => BigInt(line.split(" ")[3]));
  assert.ok(increasing(tokens));
  // Every new block was announced on the stream before its first token went out.
  const stream = sim.lines(A, B).map((l) => l.line);
  let announced = 0n;
  let reservations = 0;
  for (const line of stream) {
    const [type, , token] = line.split(" ");
    if (type === "W") {
      announced = BigInt(line.split(" ")[1]);
      reservations++;
    } else if (type === "H" && line.startsWith("H burst:")) {
      assert.ok(BigInt(token) <= announced, `${line} before its block's W (${announced})`);
    }
  }
  assert.ok(reservations >= 2, "the burst took new blocks");
  const heir = sim.node(B);
  assert.equal(heir.holder("burst:0"), undefined, "the burst never reached the standby");
  assert.ok(heir.tokens.last < max(tokens), "nor did its last reservation");
  assert.ok(await sim.runUntil(() => heir.role === "active", promotionBudget(3)));
  const first = await sim.grant(B, "burst:first");
  assert.ok(first > max(tokens), `${first} is not above ${max(tokens)}`);
});

Deno.test("ClusterNode never reuses a token when a standby alone restarts after a full crash", async () => {
  // The new active announces its reserved mark in its heartbeats as it becomes active; a
  // standby persists it, so even alone after a full crash, before it ever synced from the
  // new active, it starts above every token of that block. Small blocks, so the new active
  // issues more than its own restart margin covers; the wall clock does not help.
  const sim = new SimCluster({ size: 3, block: 1000n, wallClock: () => 0 });
  await coldStart(sim);
  sim.kill(A);
  const successor = sim.node(B);
  assert.ok(await sim.runUntil(() => successor.role === "active", promotionBudget(3)));
  const tokens = await grantMany(sim, B, "crash:", 1500);
  const highest = max(tokens);
  sim.kill(B, { dropInFlight: true });
  const standby = sim.node(C);
  assert.equal(standby.lastRole?.description, `following ${A}`, "it never followed B");
  assert.equal(standby.holder("crash:0"), undefined);
  sim.kill(C);
  const [survivor] = sim.start(C);
  assert.ok(await sim.runUntil(() => survivor.role === "active", 2 * TIMEOUT));
  assert.equal(survivor.lastRole?.description, "promoted");
  const token = await sim.grant(C, "crash:z");
  assert.ok(token > highest, `token ${token} reissued: ${B} issued up to ${highest}`);
});

Deno.test("ClusterNode continues above every node's mark after a full-cluster restart, past 2^60", async () => {
  const sim = new SimCluster({ size: 3, wallClock: () => 0 });
  await coldStart(sim);
  const before = await grantMany(sim, A, "full:", 10);
  for (const address of sim.addresses) sim.kill(address);
  // One node's data directory has a much higher mark (tokens are u64 bigints, not numbers).
  const high = 2n ** 60n + 7n;
  sim.writeMark(C, high);
  sim.start(...sim.addresses);
  await coldStart(sim);
  const after = await grantMany(sim, A, "full:", 10);
  assert.ok(after[0] > high && after[0] > max(before), `token ${after[0]} after the restart`);
  sim.kill(A);
  assert.ok(await sim.runUntil(() => sim.node(B).role === "active", promotionBudget(3)));
  const next = await sim.grant(B, "full:next");
  assert.ok(next > max(after), `token ${next} after the failover`);
});

// ---------------------------------------------------------------------------------------
// Sizes without quorum

Deno.test("ClusterNode of 1 node (peers = itself) serves at once and leave() finds nobody to hand over to", async () => {
  const sim = new SimCluster({ size: 1 });
  const only = sim.node(A);
  assert.deepEqual(only.roles, [{ at: 0, role: "active", description: "single node" }]);
  assert.equal((await sim.waitForOneActive(0)).address, A);
  const t1 = await sim.grant(A, "one:a");
  assert.equal(await sim.request(A, "A one:a 30 0.001"), "A one:a T");
  const waiter = sim.connect(A);
  waiter.send("A one:a 30 0");
  await sim.advance(2);
  assert.equal(only.table.waiting, 1);
  const left = sim.shutdown(A);
  assert.ok(await sim.runUntil(() => only.exited, 10));
  assert.equal(await left, false);
  assert.equal(only.lastRole?.role, "leaving");
  assert.deepEqual(waiter.replies, ["A one:a E shutting down"]);
  assert.equal(sim.sent.length, 0, "a single node sends nothing");
  assert.ok(t1 > 0n);
});

Deno.test("ClusterNode of 4 nodes fails over after a kill -9 of the active", async () => {
  const sim = new SimCluster({ size: 4 });
  await coldStart(sim);
  const held = await sim.grant(A, "four:a");
  await sim.replicated(B, "four:a", held);
  const killedAt = sim.now;
  sim.kill(A);
  assert.ok(await sim.runUntil(() => sim.node(B).role === "active", promotionBudget(4)));
  assert.ok(sim.now - killedAt >= TIMEOUT - HEARTBEAT);
  const first = await sim.grant(B, "four:first");
  assert.ok(first > held);
  assert.equal((await sim.waitForOneActive()).address, B);
  for (const address of [C, D]) {
    assert.equal(sim.node(address).lastRole?.description, `following ${B}`);
  }
  assert.equal(await sim.request(B, "A four:a 30 0.001"), "A four:a T");
  assert.equal(await sim.request(B, `R four:a ${held}`), "R four:a R");
});

// ---------------------------------------------------------------------------------------
// A client rides through

Deno.test("ClusterNode failover lets a client that follows M and retries keep acquiring with growing tokens", async () => {
  const sim = new SimCluster({ size: 3 });
  await coldStart(sim);
  const tokens: bigint[] = [];
  const errors: string[] = [];
  let target = A;
  /** One acquire/release cycle as LockClient does it: follow M, else try the next node. */
  const cycle = async () => {
    for (;;) {
      const reply = (await sim.request(target, "A ride 3 0", 5000)) ?? "(no reply)";
      const grant = /^A ride A (\d+)$/.exec(reply);
      if (grant !== null) {
        tokens.push(BigInt(grant[1]));
        assert.equal(await sim.request(target, `R ride ${grant[1]}`), "R ride R");
        return;
      }
      const redirect = /^A ride M (\S+)$/.exec(reply);
      if (redirect !== null) {
        target = redirect[1];
        continue;
      }
      errors.push(`${sim.now} ${target}: ${reply}`);
      target = sim.addresses[(sim.addresses.indexOf(target) + 1) % sim.addresses.length];
      await sim.advance(50);
    }
  };
  for (let i = 0; i < 20; i++) await cycle();
  const killedAt = sim.now;
  sim.kill(A);
  for (let i = 0; i < 20; i++) await cycle();
  assert.equal(tokens.length, 40);
  assert.ok(increasing(tokens), `tokens ${tokens}`);
  assert.equal(target, B);
  assert.ok(sim.now - killedAt < 2000, `40 cycles done ${sim.now - killedAt} ms after the kill`);
  assert.ok(
    errors.length > 0 && errors.every((e) => / (E no active node|\(no reply\))$/.test(e)),
    String(errors),
  );
});
