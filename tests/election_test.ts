/**
 * Unit tests of the pure election rules of `server/cluster/election.ts` (docs/cluster.md): who
 * promotes, who follows whom, when an active hands over, and whom a leaving active picks.
 * No sockets, no clocks: views in, decisions out.
 */

import assert from "node:assert/strict";
import {
  decide,
  type PeerView,
  type Role,
  type SelfView,
  successor,
} from "../server/cluster/election.ts";

const TIMEOUT = 1000;
const ADDRESSES = ["n0:1", "n1:1", "n2:1", "n3:1"];

/** This node at `priority`, a standby by default, silent active for longer than the timeout. */
function self(priority: number, fields: Partial<SelfView> = {}): SelfView {
  return {
    address: ADDRESSES[priority],
    priority,
    role: "standby",
    synced: false,
    // A node in sync holds a replica; tests set `replica` alone for a stream that stopped.
    replica: fields.synced ?? false,
    floor: 0n,
    activation: undefined,
    sinceActiveMs: TIMEOUT + 1,
    position: 0,
    ...fields,
  };
}

/** A live peer at `priority`. */
function peer(priority: number, role: Role, fields: Partial<PeerView> = {}): PeerView {
  return {
    address: ADDRESSES[priority],
    priority,
    role,
    synced: false,
    replica: fields.synced ?? false,
    floor: 0n,
    activeAddress: undefined,
    activation: undefined,
    position: 0,
    ...fields,
  };
}

const NONE = { kind: "none" };
const PROMOTE = { kind: "promote" };

Deno.test("decide() at a cold start promotes the highest-priority live node once the timeout passed", async (t) => {
  await t.step("does promote node 0 among starting nodes", () => {
    const peers = [peer(1, "starting"), peer(2, "starting")];
    assert.deepEqual(decide(self(0, { role: "starting" }), peers, TIMEOUT), PROMOTE);
  });
  await t.step("does not promote the others", () => {
    const me = self(1, { role: "starting" });
    assert.deepEqual(decide(me, [peer(0, "starting"), peer(2, "starting")], TIMEOUT), NONE);
    const last = self(2, { role: "starting" });
    assert.deepEqual(decide(last, [peer(0, "starting"), peer(1, "starting")], TIMEOUT), NONE);
  });
  await t.step("does promote the highest-priority node that is alive (node 0 is not)", () => {
    const peers = [peer(2, "starting")];
    assert.deepEqual(decide(self(1, { role: "starting" }), peers, TIMEOUT), PROMOTE);
    assert.deepEqual(decide(self(2, { role: "starting" }), [peer(1, "starting")], TIMEOUT), NONE);
  });
  await t.step("does promote a node alone", () => {
    assert.deepEqual(decide(self(2, { role: "starting" }), [], TIMEOUT), PROMOTE);
  });
  await t.step("does treat a standby like a starting node", () => {
    assert.deepEqual(decide(self(0), [peer(1, "standby")], TIMEOUT), PROMOTE);
    assert.deepEqual(decide(self(1), [peer(0, "standby")], TIMEOUT), NONE);
  });
});

Deno.test("decide() never promotes before the failover timeout", async (t) => {
  for (const sinceActiveMs of [0, 1, TIMEOUT / 2, TIMEOUT - 1]) {
    await t.step(`does wait at ${sinceActiveMs} ms`, () => {
      const peers = [peer(1, "starting"), peer(2, "standby")];
      assert.deepEqual(
        decide(self(0, { role: "starting", sinceActiveMs }), peers, TIMEOUT),
        NONE,
      );
      const synced = self(0, { synced: true, activation: "a", sinceActiveMs });
      assert.deepEqual(decide(synced, [], TIMEOUT), NONE);
    });
  }
  await t.step("does promote at exactly the timeout", () => {
    assert.deepEqual(decide(self(0, { sinceActiveMs: TIMEOUT }), [], TIMEOUT), PROMOTE);
  });
});

Deno.test("decide() prefers synced standbys over unsynced ones", async (t) => {
  await t.step("does promote a synced node behind an unsynced higher-priority one", () => {
    const me = self(1, { synced: true, activation: "a" });
    assert.deepEqual(decide(me, [peer(0, "starting"), peer(2, "standby")], TIMEOUT), PROMOTE);
  });
  await t.step("does keep an unsynced higher-priority node waiting", () => {
    const peers = [peer(1, "standby", { synced: true, activation: "a" }), peer(2, "standby")];
    assert.deepEqual(decide(self(0, { role: "starting" }), peers, TIMEOUT), NONE);
  });
  await t.step("does pick the highest priority among the synced ones", () => {
    const peers = [
      peer(0, "standby"),
      peer(1, "standby", { synced: true, activation: "a" }),
      peer(3, "standby", { synced: true, activation: "a" }),
    ];
    assert.deepEqual(decide(self(2, { synced: true, activation: "a" }), peers, TIMEOUT), NONE);
    const others = [
      peer(0, "standby"),
      peer(2, "standby", { synced: true, activation: "a" }),
      peer(3, "standby", { synced: true, activation: "a" }),
    ];
    assert.deepEqual(decide(self(1, { synced: true, activation: "a" }), others, TIMEOUT), PROMOTE);
  });
  await t.step("does not let an unsynced node promote past a synced one", () => {
    const peers = [peer(0, "standby", { synced: true, activation: "a" })];
    assert.deepEqual(decide(self(1), peers, TIMEOUT), NONE);
  });
});

Deno.test("decide() makes a standby follow the highest-priority active", async (t) => {
  await t.step("does follow the only active", () => {
    assert.deepEqual(decide(self(2), [peer(0, "standby"), peer(1, "active")], TIMEOUT), {
      kind: "follow",
      address: "n1:1",
    });
  });
  await t.step("does follow the higher-priority of two actives", () => {
    const peers = [peer(3, "active"), peer(1, "active"), peer(2, "active")];
    assert.deepEqual(decide(self(0), peers, TIMEOUT), { kind: "follow", address: "n1:1" });
  });
  await t.step("does follow even a lower-priority active (failback is the active's move)", () => {
    assert.deepEqual(decide(self(0, { role: "starting" }), [peer(2, "active")], TIMEOUT), {
      kind: "follow",
      address: "n2:1",
    });
  });
  await t.step("does follow at once, before the failover timeout", () => {
    const me = self(1, { role: "starting", sinceActiveMs: 0 });
    assert.deepEqual(decide(me, [peer(0, "active")], TIMEOUT), {
      kind: "follow",
      address: "n0:1",
    });
  });
  await t.step("does not follow a node that is handing off or leaving", () => {
    const peers = [peer(0, "handing-off"), peer(1, "leaving")];
    assert.deepEqual(decide(self(2, { sinceActiveMs: 0 }), peers, TIMEOUT), NONE);
  });
});

Deno.test("decide() makes an active step down to a higher-priority active (merge)", async (t) => {
  const me = self(1, { role: "active", synced: true, activation: "mine" });
  await t.step("does hand over with a merge", () => {
    assert.deepEqual(decide(me, [peer(0, "active", { activation: "theirs" })], TIMEOUT), {
      kind: "hand-over",
      address: "n0:1",
      merge: true,
    });
  });
  await t.step("does pick the highest-priority active", () => {
    const low = self(3, { role: "active", synced: true, activation: "mine" });
    const peers = [peer(2, "active"), peer(0, "active"), peer(1, "active")];
    assert.deepEqual(decide(low, peers, TIMEOUT), {
      kind: "hand-over",
      address: "n0:1",
      merge: true,
    });
  });
  await t.step("does prefer a merge into a higher active over a failback", () => {
    const peers = [peer(0, "standby", { synced: true, activation: "mine" })];
    const low = self(2, { role: "active", synced: true, activation: "mine" });
    assert.deepEqual(decide(low, [...peers, peer(1, "active")], TIMEOUT), {
      kind: "hand-over",
      address: "n1:1",
      merge: true,
    });
  });
  await t.step("does stay active beside a lower-priority active", () => {
    assert.deepEqual(decide(me, [peer(2, "active")], TIMEOUT), NONE);
    const top = self(0, { role: "active", synced: true, activation: "mine" });
    assert.deepEqual(decide(top, [peer(1, "active"), peer(2, "active")], TIMEOUT), NONE);
  });
  await t.step("does stay active whatever the timeout", () => {
    const idle = self(0, { role: "active", activation: "mine", sinceActiveMs: 0 });
    assert.deepEqual(decide(idle, [peer(1, "standby")], TIMEOUT), NONE);
    assert.deepEqual(decide({ ...idle, sinceActiveMs: 10 * TIMEOUT }, [], TIMEOUT), NONE);
  });
});

Deno.test("decide() fails back to a higher-priority standby in sync with the active", async (t) => {
  const me = self(2, { role: "active", synced: true, activation: "mine" });
  await t.step("does hand over without a merge", () => {
    const peers = [peer(0, "standby", { synced: true, activation: "mine" })];
    assert.deepEqual(decide(me, peers, TIMEOUT), {
      kind: "hand-over",
      address: "n0:1",
      merge: false,
    });
  });
  await t.step("does pick the highest-priority synced heir", () => {
    const peers = [
      peer(1, "standby", { synced: true, activation: "mine" }),
      peer(0, "standby", { synced: true, activation: "mine" }),
    ];
    assert.deepEqual(decide(me, peers, TIMEOUT), {
      kind: "hand-over",
      address: "n0:1",
      merge: false,
    });
  });
  await t.step("does skip an unsynced higher-priority standby for a synced one", () => {
    const peers = [
      peer(0, "standby"),
      peer(1, "standby", { synced: true, activation: "mine" }),
    ];
    assert.deepEqual(decide(me, peers, TIMEOUT), {
      kind: "hand-over",
      address: "n1:1",
      merge: false,
    });
  });
  await t.step("does not hand over to a standby that is not in sync yet", () => {
    assert.deepEqual(decide(me, [peer(0, "standby")], TIMEOUT), NONE);
    assert.deepEqual(decide(me, [peer(0, "starting")], TIMEOUT), NONE);
  });
  await t.step("does not hand over to a standby synced with another activation", () => {
    const peers = [peer(0, "standby", { synced: true, activation: "older" })];
    assert.deepEqual(decide(me, peers, TIMEOUT), NONE);
  });
  await t.step("does not hand over to a lower-priority standby", () => {
    const top = self(0, { role: "active", synced: true, activation: "mine" });
    const peers = [peer(1, "standby", { synced: true, activation: "mine" })];
    assert.deepEqual(decide(top, peers, TIMEOUT), NONE);
  });
  await t.step("does not hand over to a synced node that is not a standby", () => {
    for (const role of ["starting", "handing-off", "leaving"] as const) {
      const peers = [peer(0, role, { synced: true, activation: "mine" })];
      assert.deepEqual(decide(me, peers, TIMEOUT), NONE, role);
    }
  });
});

Deno.test("decide() excludes busy nodes (handing off, leaving)", async (t) => {
  for (const role of ["handing-off", "leaving"] as const) {
    await t.step(`does promote past a higher-priority node that is ${role}`, () => {
      const peers = [peer(0, role, { synced: true, activation: "a" }), peer(2, "standby")];
      assert.deepEqual(decide(self(1), peers, TIMEOUT), PROMOTE);
    });
    await t.step(`does not count a synced node that is ${role} as a candidate`, () => {
      // Only busy nodes are synced: among the rest, nobody is, so priority decides.
      const peers = [peer(1, role, { synced: true, activation: "a" }), peer(2, "standby")];
      assert.deepEqual(decide(self(0), peers, TIMEOUT), PROMOTE);
    });
    await t.step(`does nothing while this node is ${role}`, () => {
      const me = self(0, { role, synced: true, activation: "a" });
      assert.deepEqual(decide(me, [], TIMEOUT), NONE);
      assert.deepEqual(decide(me, [peer(1, "active")], TIMEOUT), NONE);
      assert.deepEqual(
        decide(me, [peer(1, "standby", { synced: true, activation: "a" })], TIMEOUT),
        NONE,
      );
    });
  }
});

Deno.test("successor() picks the best live standby for a graceful stop", async (t) => {
  const me = self(0, { role: "active", synced: true, activation: "mine" });
  await t.step("does pick the highest-priority standby in sync with this activation", () => {
    const peers = [
      peer(3, "standby", { synced: true, activation: "mine" }),
      peer(2, "standby", { synced: true, activation: "mine" }),
      peer(1, "standby"),
    ];
    assert.equal(successor(me, peers)?.address, "n2:1");
  });
  await t.step("does treat a standby synced with another activation as unsynced", () => {
    const peers = [
      peer(1, "standby", { synced: true, activation: "older" }),
      peer(3, "standby", { synced: true, activation: "mine" }),
    ];
    assert.equal(successor(me, peers)?.address, "n3:1");
  });
  await t.step("does fall back to the highest-priority unsynced standby or starting node", () => {
    assert.equal(successor(me, [peer(3, "standby"), peer(2, "starting")])?.address, "n2:1");
    assert.equal(successor(me, [peer(1, "starting"), peer(2, "standby")])?.address, "n1:1");
  });
  await t.step("does skip actives and busy nodes", () => {
    const peers = [
      peer(1, "active"),
      peer(2, "handing-off", { synced: true, activation: "mine" }),
      peer(3, "leaving", { synced: true, activation: "mine" }),
    ];
    assert.equal(successor(me, peers), undefined);
    assert.equal(successor(me, [...peers, peer(3, "standby")])?.address, "n3:1");
  });
  await t.step("does return undefined with no live peer", () => {
    assert.equal(successor(me, []), undefined);
  });
  await t.step("does not reorder the caller's array", () => {
    const peers = [peer(2, "standby"), peer(1, "standby")];
    successor(me, peers);
    assert.deepEqual(peers.map((p) => p.priority), [2, 1]);
  });
});

Deno.test("decide() never lets a node that restarted empty win over a replica", async (t) => {
  // The active died: the standbys' streams stopped (not in sync), but they hold its state.
  await t.step("does keep the restarted highest-priority node waiting", () => {
    const me = self(0, { role: "starting" });
    const peers = [peer(1, "standby", { replica: true }), peer(2, "standby", { replica: true })];
    assert.deepEqual(decide(me, peers, TIMEOUT), NONE);
  });
  await t.step("does promote the highest-priority replica", () => {
    const me = self(1, { replica: true });
    const peers = [peer(0, "starting"), peer(2, "standby", { replica: true })];
    assert.deepEqual(decide(me, peers, TIMEOUT), PROMOTE);
  });
});

Deno.test("decide() prefers the replica of the most recent activation", async (t) => {
  // Node 1 was paused while node 2 became active and node 3 replicated it; node 2 died.
  await t.step("does keep the stale higher-priority replica waiting", () => {
    const me = self(1, { replica: true, floor: 100n });
    assert.deepEqual(
      decide(me, [peer(3, "standby", { replica: true, floor: 900n })], TIMEOUT),
      NONE,
    );
  });
  await t.step("does promote the fresher lower-priority replica", () => {
    const me = self(3, { replica: true, floor: 900n });
    assert.deepEqual(
      decide(me, [peer(1, "standby", { replica: true, floor: 100n })], TIMEOUT),
      PROMOTE,
    );
  });
});

Deno.test("decide() prefers, within one activation, the replica that applied its stream furthest", async (t) => {
  // Node 1 lagged (paused, or a slow link) while node 3 acknowledged batches up to 80, which
  // in sync replication let the active answer those grants; then the active died.
  const floor = 500n;
  await t.step("does keep the lagging higher-priority replica waiting", () => {
    const me = self(1, { replica: true, floor, position: 40 });
    const ahead = peer(3, "standby", { replica: true, floor, position: 80 });
    assert.deepEqual(decide(me, [ahead], TIMEOUT), NONE);
  });
  await t.step("does promote the replica that got furthest, though of lower priority", () => {
    const me = self(3, { replica: true, floor, position: 80 });
    const behind = peer(1, "standby", { replica: true, floor, position: 40 });
    assert.deepEqual(decide(me, [behind], TIMEOUT), PROMOTE);
  });
  await t.step("does fall back to priority between replicas equally far", () => {
    const me = self(1, { replica: true, floor, position: 80 });
    const even = peer(3, "standby", { replica: true, floor, position: 80 });
    assert.deepEqual(decide(me, [even], TIMEOUT), PROMOTE);
    assert.deepEqual(
      decide(self(3, { replica: true, floor, position: 80 }), [
        peer(1, "standby", { replica: true, floor, position: 80 }),
      ], TIMEOUT),
      NONE,
    );
  });
  await t.step("does not compare positions across activations (the fresher floor wins)", () => {
    const me = self(1, { replica: true, floor: 900n, position: 1 });
    const older = peer(3, "standby", { replica: true, floor, position: 10_000 });
    assert.deepEqual(decide(me, [older], TIMEOUT), PROMOTE);
  });
});

Deno.test("decide() follows an active that only a peer can hear (partial partition)", () => {
  const me = self(1);
  const relay = peer(2, "standby", { synced: true, activeAddress: ADDRESSES[0] });
  assert.deepEqual(decide(me, [relay], TIMEOUT), { kind: "follow", address: ADDRESSES[0] });
});
