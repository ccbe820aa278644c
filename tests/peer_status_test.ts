/**
 * Unit tests of a cluster node's part of its status and of readiness (issue 13): role,
 * active, replication and peers read from a role machine ({@linkcode clusterStatus}),
 * `/readyz` ({@linkcode clusterReady}), and the replication stream's lag and in-sync list
 * in both modes. Fakes and a fake clock; no sockets.
 *
 * @module
 */

import assert from "node:assert/strict";
import type { Role } from "../server/cluster/election.ts";
import { clusterReady, clusterStatus, type ClusterView } from "../server/cluster/peer_status.ts";
import type { PeerState } from "../server/cluster/peer_views.ts";
import type { PeerMessage } from "../server/cluster/peer_codec.ts";
import type { ClusterContext } from "../server/cluster/ports.ts";
import { ReplicationStream } from "../server/cluster/replication.ts";
import { Owners } from "../server/owners.ts";
import type { Gate } from "../server/session_context.ts";

function peer(address: string, fields: Partial<PeerState> = {}): PeerState {
  return {
    address,
    priority: 1,
    lastHeard: -Infinity,
    role: "starting",
    activeAddress: undefined,
    synced: false,
    syncedSince: Infinity,
    replica: false,
    floor: 0n,
    mark: 0n,
    own: 0n,
    activation: undefined,
    position: 0,
    ...fields,
  };
}

function view(role: Role, gate: Gate, peers: PeerState[], synced = true): ClusterView {
  return {
    role,
    activeAddress: undefined,
    replica: { synced },
    stream: {
      degraded: true,
      inSync: () => ["b:1"],
      lagMs: (address) => address === "b:1" ? 12.6 : undefined,
    },
    peers: {
      addresses: () => peers.map((p) => p.address),
      get: (address) => peers.find((p) => p.address === address),
      isLive: (address, now) => now - (peers.find((p) => p.address === address)!.lastHeard) < 1000,
    },
    gate: () => gate,
  };
}

const SERVE: Gate = { kind: "serve" };
const PARK: Gate = { kind: "park" };
const TO_A: Gate = { kind: "refuse", refusal: { status: "M", text: "a:1" } };
const NO_ACTIVE: Gate = { kind: "refuse", refusal: { status: "E", text: "no active node" } };

Deno.test("clusterStatus() of the active: itself as active, its standbys' lag and who is in sync", () => {
  const peers = [
    peer("b:1", { role: "standby", synced: true, lastHeard: 9_950 }),
    peer("c:1", { role: "standby", lastHeard: 5_000 }),
    peer("d:1"),
  ];
  const status = clusterStatus(view("active", SERVE, peers), "a:1", "sync", 10_000);
  assert.equal(status.role, "active");
  assert.equal(status.active, "a:1");
  assert.deepEqual(status.replication, { mode: "sync", degraded: true, inSync: ["b:1"] });
  assert.deepEqual(status.peers, [
    { address: "b:1", role: "standby", live: true, synced: true, lagMs: 13, lastHeardMs: 50 },
    { address: "c:1", role: "standby", live: false, synced: false, lagMs: null, lastHeardMs: 5000 },
    {
      address: "d:1",
      role: "starting",
      live: false,
      synced: false,
      lagMs: null,
      lastHeardMs: null,
    },
  ]);
});

Deno.test("clusterStatus() of a standby: its own view, the active it redirects to, no lag", () => {
  const peers = [peer("a:1", { role: "active", synced: true, lastHeard: 990 })];
  const status = clusterStatus(view("standby", TO_A, peers), "b:1", "async", 1000);
  assert.equal(status.role, "standby");
  assert.equal(status.active, "a:1");
  assert.deepEqual(status.replication, { mode: "async", degraded: false, inSync: ["b:1"] });
  assert.equal(status.peers[0].lagMs, null);
  const lost = clusterStatus(view("standby", NO_ACTIVE, peers, false), "b:1", "async", 1000);
  assert.equal(lost.active, null, "an active it cannot vouch for is not named");
  assert.deepEqual(lost.replication.inSync, []);
});

Deno.test("clusterReady() is true for a serving active and an in-sync standby only", () => {
  const ready: [Role, Gate, boolean, boolean][] = [
    ["active", SERVE, true, true],
    ["active", PARK, true, false], // frozen: checking for another active
    ["standby", TO_A, true, true],
    ["standby", TO_A, false, false], // not in sync yet
    ["standby", NO_ACTIVE, true, false],
    ["standby", PARK, true, false], // taking over: waiting for the COMMIT
    ["starting", NO_ACTIVE, false, false],
    ["handing-off", PARK, true, false],
    ["leaving", TO_A, true, false],
  ];
  for (const [role, gate, synced, expected] of ready) {
    assert.equal(clusterReady(view(role, gate, [], synced)), expected, `${role} ${gate.kind}`);
  }
});

/** A replication stream on a fake clock and network. */
function stream(
  mode: "async" | "sync",
  more: {
    live?: (address: string) => boolean;
    frozen?: () => boolean;
    failoverTimeoutMs?: number;
  } = {},
) {
  let now = 0;
  let streaming = true;
  const warnings: string[] = [];
  const infos: string[] = [];
  const log = {
    debug() {},
    info: (message: string) => infos.push(message),
    warn: (message: string) => warnings.push(message),
    error() {},
  };
  const sent: [string, PeerMessage][] = [];
  const ctx: ClusterContext = {
    table: {
      waiting: 0,
      holders: () => [],
      restore: () => true,
      forget: () => true,
      release: () => true,
      clear() {},
    },
    tokens: {
      last: 0n,
      reserved: 0n,
      announced: 0n,
      block: 1000n,
      raiseTo() {},
      own: 0n,
      owns: () => true,
    },
    owners: new Owners(),
    clock: () => now,
    network: {
      send: (to, message) => sent.push([to, message]),
      broadcast: (to, message) => {
        for (const address of to) sent.push([address, message]);
      },
      up: () => true,
    },
    scheduler: { every: () => () => {}, after: () => () => {} },
  };
  const s = new ReplicationStream(ctx, { streaming: () => streaming, mode, log, ...more });
  const seqs = () =>
    sent.filter(([, m]) => m.type === "SEQ").map(([to, m]) =>
      `${to} ${(m as { seq: number }).seq}`
    );
  return {
    s,
    at: (ms: number) => now = ms,
    seqs,
    warnings,
    infos,
    stopStreaming: () => streaming = false,
  };
}

/** b:1 in sync (it acknowledged batch 1), and batch 2 (a change) waiting for it. */
function heldForB(s: ReplicationStream): void {
  s.snapshot("b:1", "act", 0n);
  s.seal();
  s.acked("b:1", 1);
  s.held("k", 1n, 1000, 0);
  s.seal();
}

Deno.test("async replication numbers a batch each heartbeat, and the acknowledgements give the lag", () => {
  const { s, at, seqs } = stream("async");
  s.check();
  assert.deepEqual(seqs(), [], "nobody to stream to");
  s.snapshot("b:1", "act", 1n);
  assert.equal(s.lagMs("b:1", 0), undefined, "nothing acknowledged since the snapshot");
  assert.deepEqual(s.inSync(), []);
  at(100);
  s.check();
  assert.deepEqual(seqs(), ["b:1 1"]);
  s.acked("b:1", 1);
  assert.equal(s.lagMs("b:1", 150), 0);
  assert.deepEqual(s.inSync(), ["b:1"]);
  at(200);
  s.check(); // batch 2 at 200
  at(300);
  s.check(); // batch 3 at 300
  assert.equal(s.lagMs("b:1", 450), 250, "batch 2 has waited since 200");
  s.acked("b:1", 2);
  assert.equal(s.lagMs("b:1", 450), 150);
  s.acked("b:1", 3);
  assert.equal(s.lagMs("b:1", 450), 0);
  assert.equal(s.lagMs("c:1", 450), undefined, "not streamed to");
  s.remove("b:1");
  assert.equal(s.lagMs("b:1", 450), undefined);
});

Deno.test("sync replication measures the lag per sealed batch and never numbers idle heartbeats", () => {
  const { s, at, seqs } = stream("sync");
  s.snapshot("b:1", "act", 1n);
  s.seal(); // the snapshot's batch
  s.acked("b:1", 1);
  at(100);
  s.check();
  assert.deepEqual(seqs(), ["b:1 1"], "a heartbeat adds no batch in sync mode");
  s.held("k", 1n, 1000, 0);
  s.seal();
  assert.deepEqual(seqs(), ["b:1 1", "b:1 2"]);
  assert.equal(s.lagMs("b:1", 130), 30);
  s.acked("b:1", 2);
  assert.equal(s.lagMs("b:1", 130), 0);
});

Deno.test("sync replication logs degraded and in sync again by name, and nothing when it stops streaming", () => {
  const { s, warnings, infos, stopStreaming } = stream("sync");
  s.snapshot("10.0.0.2:7321", "act-1", 0n);
  s.seal();
  s.check();
  assert.equal(s.degraded, true, "the standby has acknowledged nothing yet");
  s.acked("10.0.0.2:7321", 1);
  assert.equal(s.degraded, false);
  s.remove("10.0.0.2:7321");
  assert.equal(s.degraded, true);
  stopStreaming(); // a handoff or demotion: no longer active
  s.check();
  assert.equal(s.degraded, false);
  // Degraded is a warning, back in sync an info line.
  assert.deepEqual(warnings, [
    "replication degraded: no standby in sync, answering without acknowledgements",
    "replication degraded: no standby in sync, answering without acknowledgements",
  ]);
  assert.deepEqual(infos.filter((m) => m.startsWith("replication")), [
    "replication in sync again (10.0.0.2:7321)",
  ]);
});

Deno.test("sync replication holds what no standby acknowledged while the node is frozen", () => {
  // After its own pause, an active hears nobody within the failover timeout: its view, not
  // its standbys, is stale. It must not degrade and release an unacknowledged reply then.
  let frozen = false;
  let live = true;
  const { s, warnings } = stream("sync", { live: () => live, frozen: () => frozen });
  heldForB(s); // batch 2: a reply waits for it
  assert.equal(s.reached(), 1);
  frozen = true;
  live = false;
  assert.equal(s.reached(), 1, "batch 2 is still held");
  s.check();
  assert.equal(s.degraded, false);
  assert.deepEqual(warnings, []);
  frozen = false; // settled, and b:1 is really gone
  assert.equal(s.reached(), Infinity, "degraded: replies go out unacknowledged");
  assert.equal(s.degraded, true);
});

Deno.test("sync replication: a standby in sync whose link dropped holds replies until it syncs again", () => {
  // Its own short pause makes a standby reconnect: answering what only it had acknowledged
  // so far at once would answer changes no live standby has (lost if the active dies next).
  const { s, at, seqs, warnings } = stream("sync", { live: () => true, failoverTimeoutMs: 2000 });
  heldForB(s); // batch 2: a reply waits for it
  assert.equal(s.position(), 2);
  at(100);
  s.remove("b:1");
  assert.equal(s.reached(), 1, "batch 2 is still held");
  assert.equal(s.degraded, false);
  assert.deepEqual(s.inSync(), [], "not in sync for a handover: it gets no stream");
  s.acked("b:1", 2); // an ACK sent before the drop arrives late
  assert.equal(s.reached(), 2);
  s.held("k2", 2n, 1000, 0); // streamed to nobody: its reply waits for the next snapshot
  assert.equal(s.position(), 3);
  at(300);
  s.snapshot("b:1", "act", 0n);
  s.seal();
  assert.deepEqual(seqs().at(-1), "b:1 3", "the snapshot's batch holds every change since");
  assert.equal(s.reached(), 2, "still counted while it catches up");
  s.acked("b:1", 3);
  assert.equal(s.reached(), 3);
  assert.deepEqual(s.inSync(), ["b:1"]);
  at(5000); // long past the grace: it is a plain follower again
  assert.equal(s.reached(), 3);
  assert.deepEqual(warnings, []);
});

Deno.test("sync replication: a dropped standby stops holding replies after the grace, or once it is not live", async (t) => {
  for (const how of ["grace", "live"] as const) {
    await t.step(how, () => {
      let live = true;
      const { s, at, warnings } = stream("sync", { live: () => live, failoverTimeoutMs: 2000 });
      heldForB(s);
      at(100);
      s.remove("b:1");
      at(how === "grace" ? 1099 : 500);
      assert.equal(s.reached(), 1);
      if (how === "grace") at(1100);
      else live = false;
      assert.equal(s.reached(), Infinity, "degraded: replies go out unacknowledged");
      assert.equal(s.degraded, true);
      assert.deepEqual(warnings, [
        "replication degraded: no standby in sync, answering without acknowledgements",
      ]);
    });
  }
  await t.step("a standby not yet in sync is dropped at once", () => {
    const { s } = stream("sync", { live: () => true, failoverTimeoutMs: 2000 });
    s.snapshot("b:1", "act", 0n);
    s.seal();
    s.remove("b:1");
    assert.equal(s.position(), 0);
    assert.equal(s.reached(), Infinity);
  });
  await t.step("async mode never holds", () => {
    const { s } = stream("async", { live: () => true, failoverTimeoutMs: 2000 });
    s.snapshot("b:1", "act", 0n);
    s.check();
    s.acked("b:1", 1);
    s.remove("b:1");
    assert.equal(s.position(), 0);
    assert.equal(s.reached(), Infinity);
  });
});
