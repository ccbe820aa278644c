/**
 * `freezeVerdict()` (docs/cluster.md, "Two actives at once"): what a node that was frozen
 * does next, from the peers it has heard since. Pure, no sockets.
 */

import assert from "node:assert/strict";
import { FreezeDetector, freezeVerdict, type FreezeView } from "../server/cluster/freeze.ts";

const SELF = "a:7001";

/** A peer heard since the freeze: a standby following this node, at its floor and mark. */
function follower(
  overrides: Partial<FreezeView["fresh"][number]> = {},
): FreezeView["fresh"][number] {
  const address = `c:${7100 + peersMade++}`;
  return { address, role: "standby", activeAddress: SELF, floor: 100n, mark: 1000n, ...overrides };
}

let peersMade = 0;

function view(overrides: Partial<FreezeView> = {}): FreezeView {
  return {
    active: true,
    fresh: [follower(), follower()],
    peers: 2,
    waited: false,
    self: SELF,
    floor: 100n,
    reserved: 1000n,
    ...overrides,
  };
}

Deno.test("freezeVerdict() waits for a first word, then a standby resumes", () => {
  assert.equal(freezeVerdict(view({ fresh: [] })), "wait");
  assert.equal(freezeVerdict(view({ active: false, fresh: [] })), "wait");
  assert.equal(freezeVerdict(view({ active: false, fresh: [follower()] })), "resume");
  assert.equal(freezeVerdict(view({ active: false, fresh: [], waited: true })), "resume");
});

Deno.test("freezeVerdict() resumes an active that heard every peer, or waited a failover timeout", () => {
  assert.equal(freezeVerdict(view()), "resume");
  assert.equal(freezeVerdict(view({ fresh: [follower()] })), "wait");
  assert.equal(freezeVerdict(view({ fresh: [follower()], waited: true })), "resume");
  // A peer at its own floor, or below: nothing later happened.
  assert.equal(
    freezeVerdict(view({ fresh: [follower({ floor: 100n }), follower({ floor: 5n })] })),
    "resume",
  );
});

Deno.test("freezeVerdict() parks an active while another node is active: its state is to be merged", () => {
  for (
    const other of [
      follower({ role: "active", activeAddress: "b:7002", floor: 200n }),
      follower({ role: "handing-off", activeAddress: "b:7002" }),
      follower({ activeAddress: "b:7002", floor: 200n }), // a standby naming another active
    ]
  ) {
    assert.equal(freezeVerdict(view({ fresh: [other] })), "parked");
    assert.equal(freezeVerdict(view({ fresh: [other, follower()] })), "parked");
    assert.equal(freezeVerdict(view({ fresh: [other], waited: true })), "parked");
  }
});

Deno.test("freezeVerdict() steps an active down for a later activation nobody active is left to hand over", () => {
  const later = follower({ floor: 200n, activeAddress: undefined });
  // Not every peer heard yet: parked (the later activation's active may still speak).
  assert.equal(freezeVerdict(view({ fresh: [later] })), "parked");
  // Every peer heard, or a failover timeout passed, and none is active: step down.
  assert.equal(freezeVerdict(view({ fresh: [later, follower()] })), "step-down");
  assert.equal(freezeVerdict(view({ fresh: [later], waited: true })), "step-down");
  // A follower of this node with a later floor counts the same.
  assert.equal(
    freezeVerdict(view({ fresh: [follower({ floor: 101n }), follower()] })),
    "step-down",
  );
});

Deno.test("freezeVerdict() parks an active while a peer knows tokens above its reserved mark", () => {
  // The heartbeat raises its tokens above a follower's mark; until then it does not serve.
  const higher = follower({ mark: 1001n });
  assert.equal(freezeVerdict(view({ fresh: [higher, follower()] })), "parked");
  assert.equal(freezeVerdict(view({ fresh: [higher], waited: true })), "parked");
  assert.equal(freezeVerdict(view({ fresh: [follower({ mark: 1000n }), follower()] })), "resume");
});

Deno.test("freezeVerdict() asks again after a merge: the merged node no longer counts, a later activation still does", () => {
  const merged = follower({ address: "b:7002", role: "active", activeAddress: "b:7002" });
  assert.equal(freezeVerdict(view({ fresh: [merged, follower()] })), "parked");
  const after = { merged: new Set(["b:7002"]) };
  assert.equal(freezeVerdict(view({ fresh: [merged, follower()], ...after })), "resume");
  // A third node holds a later activation than the merged one: step down once all are heard.
  const later = follower({ address: "d:7004", floor: 300n, activeAddress: undefined });
  assert.equal(freezeVerdict(view({ fresh: [merged, later], peers: 3, ...after })), "parked");
  assert.equal(freezeVerdict(view({ fresh: [merged, later], peers: 2, ...after })), "step-down");
  assert.equal(
    freezeVerdict(view({ fresh: [merged, later], peers: 3, waited: true, ...after })),
    "step-down",
  );
});

Deno.test("FreezeDetector gapMs is the longest pause since the freeze was noticed", () => {
  const freeze = new FreezeDetector(0, 500);
  freeze.ticked(100);
  assert.equal(freeze.check(2600), true); // paused 2.5 s
  assert.equal(freeze.gapMs, 2500);
  assert.equal(freeze.check(3300), true); // paused again, 0.7 s, before it settled
  assert.equal(freeze.gapMs, 2500, "the long pause still counts");
  freeze.clear();
  freeze.ticked(4000);
  assert.equal(freeze.check(4700), true); // a new freeze, after the first settled
  assert.equal(freeze.gapMs, 700);
});
