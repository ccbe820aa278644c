/**
 * Sync replication's acknowledgements on the standby side (server/cluster/replica.ts,
 * docs/cluster.md "Replication modes"): an `ACK` dropped while the standby's link to the
 * active was down is sent again when the link comes back, since the active holds every reply
 * until it hears one and no later batch may come while all clients wait.
 */

import assert from "node:assert/strict";
import { Replica } from "../server/cluster/replica.ts";
import type { ClusterContext } from "../server/cluster/ports.ts";
import type { PeerMessage } from "../server/cluster/peer_codec.ts";

/** A replica whose links are up or down at will, recording what it sends. */
function replicaWithLinks() {
  const sent: { to: string; message: PeerMessage }[] = [];
  let up = true;
  const ctx = {
    table: { clear() {} },
    owners: { clear() {} },
    tokens: { raiseTo() {} },
    clock: () => 0,
    network: {
      send: (to: string, message: PeerMessage) => up && sent.push({ to, message }),
      broadcast() {},
      up: () => up,
    },
    scheduler: { every: () => () => {}, after: () => () => {} },
  } as unknown as ClusterContext;
  const replica = new Replica(ctx, { synced() {}, retryMs: 1000 });
  return { replica, sent, setUp: (value: boolean) => up = value };
}

Deno.test("a standby acknowledges its last batch again when its link to the active comes back", () => {
  const { replica, sent, setUp } = replicaWithLinks();
  replica.begin("act-1", 0n, 1n);
  replica.end("act-1");
  replica.batch("10.0.0.1:7321", 1);
  assert.deepEqual(sent.map((s) => s.message), [{ type: "ACK", seq: 1 }]);
  setUp(false);
  replica.batch("10.0.0.1:7321", 2); // dropped: the link is down
  setUp(true);
  replica.reacknowledge("10.0.0.2:7321"); // not its active: nothing
  replica.reacknowledge("10.0.0.1:7321");
  assert.deepEqual(sent.map((s) => s.message), [{ type: "ACK", seq: 1 }, { type: "ACK", seq: 2 }]);
  assert.equal(sent[1].to, "10.0.0.1:7321");
  // Out of sync (the stream broke), or before any batch of a new snapshot: nothing to repeat.
  replica.interrupted();
  replica.reacknowledge("10.0.0.1:7321");
  replica.begin("act-2", 0n, 2n);
  replica.end("act-2");
  replica.reacknowledge("10.0.0.1:7321");
  assert.equal(sent.length, 2);
});

Deno.test("a standby's position starts at its snapshot's batch, follows its acknowledgements and outlives the stream", () => {
  const { replica } = replicaWithLinks();
  assert.equal(replica.position, 0);
  // Taken after batch 7: a standby that just synced ranks with one that acknowledged 7.
  replica.begin("act-1", 0n, 1n, 7);
  assert.equal(replica.position, 7);
  replica.end("act-1");
  replica.batch("10.0.0.1:7321", 9);
  assert.equal(replica.position, 9);
  replica.interrupted(); // the active died: its state, and how far it got, are what is left
  assert.equal(replica.position, 9);
  replica.drop();
  assert.equal(replica.position, 0);
});
