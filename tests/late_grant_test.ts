/**
 * Late grants in sync replication (server/late_grant.ts, LockTable.prolong(), and the client
 * socket's `lateGrant` hook): a grant whose reply waited for the standbys gets its lease moved
 * as much later, or is answered `T` if its lease ran out meanwhile.
 */

import assert from "node:assert/strict";
import { Batch } from "../server/batch.ts";
import { LATE_AFTER_MS, lateGrant } from "../server/late_grant.ts";
import { LineSocket } from "../server/line_socket.ts";
import { grab, harness, queue } from "./_lock_table.ts";

Deno.test("LockTable.prolong() moves a grant's lease later and streams it; a wrong token or a lease that ran out changes nothing", () => {
  const h = harness();
  const token = grab(h, "k", 1000);
  h.take();
  h.at(300);
  assert.equal(h.table.prolong("k", token, 300), true);
  assert.deepEqual(h.take(), [`held k ${token} 1300`]);
  assert.equal(h.table.peek("k")?.deadline, 1300);
  assert.equal(h.table.prolong("k", token + 1n, 300), false);
  assert.equal(h.table.prolong("other", token, 300), false);
  assert.deepEqual(h.take(), []);
  // Due but not settled yet (its lease timer was frozen, as during a handoff): it stays over.
  h.at(1300);
  assert.equal(h.table.prolong("k", token, 300), false);
  assert.equal(h.table.peek("k")?.token, token, "not settled by prolong itself");
  h.at(1299);
  assert.equal(h.table.holder("k")?.token, token, "still held before the moved deadline");
  h.at(1300);
  assert.equal(h.table.holder("k"), undefined);
});

Deno.test("lateGrant() moves the lease of a reply held past LATE_AFTER_MS, answers T for one that ran out", () => {
  const h = harness();
  const counts = { grants: 0, releases: 0, extends: 0, expirations: 0, timeouts: 0 };
  const late = lateGrant(h.table, counts);
  const token = grab(h, "k", 1000);
  h.take();
  assert.equal(late("k", token, LATE_AFTER_MS - 0.1), undefined, "a usual acknowledgement");
  assert.deepEqual(h.take(), [], "its lease is left as it is");
  h.at(400);
  assert.equal(late("k", token, 400), undefined);
  assert.equal(h.table.peek("k")?.deadline, 1400, "the lease runs from the reply");

  // A lease that ran out while its reply was held: the key passed on to a waiter.
  const short = grab(h, "s", 100);
  queue(h, "s", 1000, 5000, "w");
  h.take();
  h.at(600);
  h.table.advance();
  assert.ok(h.take().some((l) => l.startsWith("granted w s ")), "s passed on");
  assert.equal(counts.timeouts, 0, "a moved lease is no timeout");
  assert.equal(late("s", short, 600), "A s T", "its client never holds it");
  assert.equal(counts.timeouts, 1, "the T its client got counts as a timeout");
  assert.notEqual(h.table.holder("s")?.token, short);
});

/** A byte stream that records what is written to it, under `name`, in `writes`. */
function recorder(name: string, writes: string[]) {
  return {
    read: () => new Promise<number | null>(() => {}),
    write: (data: Uint8Array) => {
      writes.push(`${name}: ${new TextDecoder().decode(data)}`);
      return Promise.resolve(data.length);
    },
    close() {},
  };
}

const log = { debug() {}, info() {}, warn() {}, error() {} };

/**
 * A client socket whose replies wait for batch 1 until `reached()` says so; its writes are
 * recorded as `client: ...`. `batch` is the server's (a peer link may share it).
 */
function gated(
  reached: () => number,
  late: (key: string, token: bigint, heldMs: number) => string | undefined,
  batch = new Batch(),
) {
  const writes: string[] = [];
  const socket = new LineSocket(recorder("client", writes), "10.0.0.9:5555", {
    line() {},
    closed() {},
  }, {
    batch,
    log,
    replies: { position: () => 1, reached, wait() {} },
    lateGrant: late,
  });
  return { socket, writes };
}

Deno.test("LineSocket asks lateGrant about each held grant as it goes out, and sends what it answers", async () => {
  let reached = 0;
  const calls: string[] = [];
  const { socket, writes } = gated(() => reached, (key, token, heldMs) => {
    calls.push(`${key} ${token} ${heldMs >= 20}`);
    return key === "gone" ? `A ${key} T` : undefined;
  });
  socket.send("A k A 7", "k", 7n);
  socket.send("A gone A 8", "gone", 8n);
  socket.send("R k R"); // not a grant: no call
  socket.flush();
  assert.deepEqual(writes, []);
  await new Promise((resolve) => setTimeout(resolve, 25));
  reached = 1;
  socket.flush();
  assert.deepEqual(calls, ["k 7 true", "gone 8 true"], "held for at least 20 ms");
  assert.deepEqual(writes, ["client: A k A 7\nA gone T\nR k R\n"]);
  socket.close();
});

Deno.test("LineSocket.prolongHeld() moves held grants' leases for the hold so far, then counts it from there", async () => {
  let reached = 0;
  const calls: string[] = [];
  const { socket, writes } = gated(() => reached, (key, token, heldMs) => {
    calls.push(`${key} ${token} ${heldMs >= 20 ? "long" : "short"}`);
    return key === "gone" ? `A ${key} T` : undefined;
  });
  socket.send("A k A 7", "k", 7n);
  socket.send("A gone A 8", "gone", 8n);
  socket.flush();
  await new Promise((resolve) => setTimeout(resolve, 25));
  socket.prolongHeld(); // a handover begins
  assert.deepEqual(calls, ["k 7 long", "gone 8 long"]);
  reached = 1;
  socket.flush();
  assert.deepEqual(calls, ["k 7 long", "gone 8 long", "k 7 short"], "only the rest of the hold");
  assert.deepEqual(writes, ["client: A k A 7\nA gone T\n"]);
  socket.close();
});

Deno.test("LineSocket writes a late grant's moved lease to the standbys before the grant's reply", async () => {
  // In both replication modes a change reaches the standbys no later than its reply reaches
  // the client (docs/cluster.md): the moved lease is a change.
  const batch = new Batch();
  let reached = 0;
  const { socket, writes } = gated(() => reached, () => {
    link.send("H k 7 30000"); // what LockTable.prolong streams
    return undefined;
  }, batch);
  const link = new LineSocket(recorder("standby", writes), "10.0.0.2:7321", {
    line() {},
    closed() {},
  }, { batch, log, urgent: true });
  socket.send("A k A 7", "k", 7n);
  socket.flush();
  await new Promise((resolve) => setTimeout(resolve, 10));
  reached = 1;
  socket.flush();
  assert.deepEqual(writes, ["standby: H k 7 30000\n", "client: A k A 7\n"]);
  socket.close();
  link.close();
});
