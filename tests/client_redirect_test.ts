/**
 * `LockClient` following `M` replies to nodes that come and go (docs/client.md, "Retries"):
 * a connection added for a node an `M` named is retired once it is down and unused and an
 * `M` names yet another node, so a cluster whose nodes come back at new addresses does not
 * leave the client one connection per old address, retried for good. The configured
 * addresses' connections stay. Past its wait, an acquire that moved on from a node that went
 * silent follows no `M` (it would go back to that node); one that was answered `M` on its
 * first try follows it.
 */

import assert from "node:assert/strict";
import { LockClient, LockUnavailableError } from "../mod.ts";
import { FakeServer, lockServer, waitUntil } from "./_fake_server.ts";
import { TcpProxy } from "./_proxy.ts";

Deno.test("LockClient retires the connections to redirected-to nodes that are gone, never its own", async () => {
  await using front = await FakeServer.start();
  await using client = new LockClient(front.address, { reconnectIntervalMs: 50 });
  await waitUntil(() => client.connected === 2, "both connections to the configured node");
  let token = 1n;
  for (let round = 0; round < 6; round++) {
    // The active node comes back at a new address each round; the configured one names it.
    const active = await FakeServer.start();
    active.handler = lockServer({ firstToken: token });
    front.handler = (r) => void r.reply("M", active.address);
    const lock = await client.acquire("k", { wait: 5 });
    assert.equal(lock.token, token, `round ${round}: granted by the node the M named`);
    await lock.release();
    token += 10n;
    assert.ok(
      client.connections <= 4,
      `round ${round}: ${client.connections} connections (2 configured, 1 to the new node, at most 1 old one still reconnecting)`,
    );
    await active.close();
    await waitUntil(
      () => client.connected === 2,
      `round ${round}: the old node's connection to drop`,
    );
  }
  assert.ok(client.connections <= 3, `${client.connections} connections at the end`);
  assert.equal(front.accepted, 2, "the configured node's two connections were never replaced");
});

Deno.test("LockClient keeps a redirected-to connection that is still up", async () => {
  await using front = await FakeServer.start();
  await using first = await FakeServer.start();
  await using second = await FakeServer.start();
  first.handler = lockServer({ firstToken: 1n });
  second.handler = lockServer({ firstToken: 100n });
  await using client = new LockClient(front.address, { reconnectIntervalMs: 50 });
  await waitUntil(() => client.connected === 2, "both connections to the configured node");
  front.handler = (r) => void r.reply("M", first.address);
  await (await client.acquire("a")).release();
  // The first node now redirects too: the client adds the second without dropping the first.
  first.handler = (r) => void r.reply("M", second.address);
  const lock = await client.acquire("b");
  assert.equal(lock.token, 100n);
  await lock.release();
  assert.equal(client.connections, 4, "configured two, plus both nodes an M named");
  assert.equal(first.accepted, 1, "the first node's connection was kept");
});

Deno.test("LockClient past an acquire's wait follows no redirect back to the node that went silent", async () => {
  // The node the acquire queued on freezes; the other one still names it as the active (it
  // has not failed over yet). Once the wait is over the client gives up instead of going
  // back to the frozen node again and again until it wakes.
  await using frozen = await FakeServer.start();
  await using standby = await FakeServer.start();
  standby.handler = (r) => void r.reply("M", frozen.address);
  // Frozen from the start for probes: a reply to a probe sent before the acquire, arriving
  // after it, would look like a sign of life.
  frozen.answerPings = false;
  await using client = new LockClient([frozen.address, standby.address]);
  await waitUntil(() => client.connected === 2, "both nodes");
  await assert.rejects(client.acquire("k", { wait: 0.3 }), LockUnavailableError);
  assert.equal(frozen.count("A k"), 1, "sent to the frozen node once, not again after the M");
  assert.equal(standby.count("A k"), 1, "moved on to the other node once");
});

// A fresh client (no latency measured yet) 110 ms one-way from both nodes: its tryAcquire
// (wait 1 ms) goes to the standby first, whose M arrives after the acquire's wait and margin.
// Nothing froze: the redirect is followed, and the live active grants the free key.
Deno.test("LockClient follows an M that answers a fresh client's tryAcquire 220 ms later, past its wait", async () => {
  await using standby = await FakeServer.start();
  await using active = await FakeServer.start();
  const toStandby = TcpProxy.start(standby.port, { delayMs: 110 });
  const toActive = TcpProxy.start(active.port, { delayMs: 110 });
  active.handler = lockServer({ firstToken: 7n });
  standby.handler = (r) => void r.reply("M", toActive.address); // the live active
  const client = new LockClient([toStandby.address, toActive.address]);
  try {
    await waitUntil(() => client.connected === 2, "both connections");
    const started = performance.now();
    let outcome: unknown;
    try {
      outcome = (await client.tryAcquire("k"))?.token;
    } catch (error) {
      outcome = error;
    }
    const ms = Math.round(performance.now() - started);
    assert.equal(standby.count("A k"), 1, "went to the standby first");
    assert.equal(outcome, 7n, `granted by the active the M named; got ${outcome} after ${ms} ms`);
  } finally {
    await client.close();
    await toStandby.close();
    await toActive.close();
  }
});

Deno.test("LockClient past an acquire's wait still follows an M to a node other than the one that went silent", async () => {
  // The active's host died while the acquire was queued on it; by the time the client's probe
  // drops it, the cluster has failed over and the standby names the new active: asking it is
  // the answer, not an error.
  await using dead = await FakeServer.start();
  await using standby = await FakeServer.start();
  await using active = await FakeServer.start();
  active.handler = lockServer({ firstToken: 7n });
  standby.handler = (r) => void r.reply("M", active.address);
  dead.answerPings = false; // host gone (for probes from the start: see the test above)
  await using client = new LockClient([dead.address, standby.address]);
  await waitUntil(() => client.connected === 2, "both nodes");
  const lock = await client.acquire("k", { wait: 0.3 });
  assert.equal(lock.token, 7n, "granted by the new active");
  assert.deepEqual([dead.count("A k"), standby.count("A k")], [1, 1]);
  await lock.release();
});
