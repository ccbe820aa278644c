/**
 * Black-box tests of session-bound locks when two actives meet (docs/protocol.md, "Sessions";
 * docs/cluster.md, "Two actives at once"): two real `server/main.ts` processes with
 * `--session-grace 2`, the active paused with `SIGSTOP` while the standby takes over. A
 * paused node holds its session grace periods still, as its leases, and counts them again
 * from the moment it serves again; the sessions it takes over from the other node's state get
 * their grace too.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Cluster, type Member, replicated, sleep, tokenOf } from "./_cluster.ts";
import { type LineClient, waitFor } from "./_helpers.ts";
import { arrival, newSession } from "./_sessions.ts";

const GRACE_S = 2;
const GRACE_MS = GRACE_S * 1000;
const ARGS = ["--session-grace", String(GRACE_S)];

/** Connections opened by a test, closed at its end. */
const open: LineClient[] = [];

async function closeAll(): Promise<void> {
  await Promise.all(open.splice(0).map((c) => c.close()));
}

/**
 * Runs `fn` on a 2-node cluster with `--session-grace 2` whose first node is active, closing
 * the test's connections at the end.
 */
function withTwo(fn: (first: Member, second: Member, cluster: Cluster) => Promise<void>) {
  return Cluster.run(2, async (cluster) => {
    const [first, second] = [cluster.at(0), cluster.at(1)];
    assert.equal(await cluster.waitForOneActive(), first);
    try {
      await fn(first, second, cluster);
    } finally {
      await closeAll();
    }
  }, { args: ARGS });
}

/** Pauses `first` and waits until `second` took over. */
async function pauseFor(first: Member, second: Member): Promise<void> {
  first.pause();
  const mark = second.logMark();
  await second.waitForLog(/ is active \(/, { since: mark, timeoutMs: 5000 });
}

/**
 * Asserts that a waiter on `active` gets `key` (above `token`) about one grace after its
 * session's last connection closed at `closedAt`.
 */
async function releasedAfterGrace(active: Member, key: string, token: bigint, closedAt: number) {
  const waiter = await connectAs(active, newSession(), "waiter");
  await waiter.send(`A ${key} 60 15`);
  const granted = await arrival(waiter, 20_000);
  const after = granted.at - closedAt;
  console.log(`  the merged session's lock was released ${after.toFixed(0)} ms after it left`);
  assert.ok(tokenOf(granted.reply, key) > token, "granted with a higher token");
  assert.ok(after < GRACE_MS + 6000, `released ${after.toFixed(0)} ms after it left`);
}

/** Connects to `member` and says hello with `session`. */
async function connectAs(
  member: { connect(): Promise<LineClient> },
  session: string,
  name: string,
): Promise<LineClient> {
  const c = await member.connect();
  open.push(c);
  assert.equal(await c.request(`HELLO 1 ${session} ${name}`), `HELLO ${session} OK`);
  return c;
}

/**
 * A session's last connection to the active `first` closes, `first` is paused and `second`
 * takes over; the session reconnects to `second`. `first` is woken `resumeAfterMs` after the
 * close and merges `second`'s state; the session comes back to it `backAfterMs` after it
 * serves again. Its lock must survive: the grace counts again from the moment `first` serves.
 */
async function pausedInGrace(resumeAfterMs: number, backAfterMs: number): Promise<void> {
  await withTwo(async (first, second, cluster) => {
    const session = newSession();
    const holder = await connectAs(first, session, "holder");
    const token = tokenOf(await holder.request("A pause:k 60 0 s"), "pause:k");
    await replicated(second, "pause:k", token);
    // A waiter on the node about to pause, with a wait longer than the whole test's story.
    const waiter = await connectAs(first, newSession(), "waiter");
    await waiter.send("A pause:k 60 9");
    assert.equal(await waiter.request("R pause:other 1"), "R pause:other N"); // it is queued
    const port = (holder.conn.localAddr as Deno.NetAddr).port;
    const closing = first.logMark();
    await holder.close(); // the session's grace starts on the first node ...
    await first.waitForLog(new RegExp(`:${port} closed the connection`), {
      since: closing,
      timeoutMs: 5000,
    });
    const closedAt = performance.now();
    await pauseFor(first, second); // ... which is paused
    const back = await connectAs(second, session, "holder"); // back in time, on the new active
    await sleep(Math.max(0, closedAt + resumeAfterMs - performance.now()));
    first.resume();
    assert.equal(await cluster.waitForOneActive({ timeoutMs: 5000 }), first, "merged back");
    // Redirected, the session comes back to the first node within a grace of its serving.
    await sleep(backAfterMs);
    await back.close();
    const again = await connectAs(first, session, "holder");
    const answer = await arrival(waiter, 12_000);
    assert.equal(
      answer.reply,
      "A pause:k T",
      "the session kept its lock: the waiter's wait ran out",
    );
    assert.equal(await again.request(`R pause:k ${token}`), "R pause:k R");
  });
}

Deno.test("cluster (2 nodes): an active paused past a session's grace does not release its lock on waking, and the session keeps it by reconnecting", async () => {
  await pausedInGrace(GRACE_MS + 1000, 0);
});

Deno.test("cluster (2 nodes): after a pause shorter than a session's grace, the session has a full grace again to come back", async () => {
  // Woken before its first deadline; back after that deadline but within a grace of serving.
  await pausedInGrace(GRACE_MS * 0.6, GRACE_MS * 0.7);
});

Deno.test("cluster (2 nodes): a bound lock taken while the active was paused is released one grace after its session leaves the merged active", async () => {
  await withTwo(async (first, second, cluster) => {
    await pauseFor(first, second);
    const holder = await connectAs(second, newSession(), "holder");
    const token = tokenOf(await holder.request("A pause:m 60 0 s"), "pause:m");
    first.resume();
    assert.equal(await cluster.waitForOneActive({ timeoutMs: 5000 }), first, "merged back");
    await holder.close(); // its only connection, to the node that is now a standby
    await releasedAfterGrace(first, "pause:m", token, performance.now());
  });
});

Deno.test("cluster (2 nodes): a bound lock merged into an active that already knew its owner is released one grace after its session leaves", async () => {
  await withTwo(async (first, second, cluster) => {
    const session = newSession();
    // The first node learns the session's owner (kept there until the sweep, 60 s later).
    const early = await connectAs(first, session, "holder");
    const earlyToken = tokenOf(await early.request("A pause:pre 60 0 s"), "pause:pre");
    assert.equal(await early.request(`R pause:pre ${earlyToken}`), "R pause:pre R");
    await early.close();
    await pauseFor(first, second);
    const holder = await connectAs(second, session, "holder");
    const token = tokenOf(await holder.request("A pause:m 60 0 s"), "pause:m");
    // Now the second node pauses, and the first serves again on its own, no longer frozen.
    second.pause();
    first.resume();
    const serving = async () => (await first.request("R pause:probe 1")) === "R pause:probe N";
    await waitFor(serving, "the first node serving again", 8000, 50);
    await holder.close(); // the session's only connection, to the paused second node
    const closedAt = performance.now();
    second.resume(); // two actives: the second hands its state over to the first (a merge)
    assert.equal(await cluster.waitForOneActive({ timeoutMs: 8000 }), first, "merged back");
    await releasedAfterGrace(first, "pause:m", token, closedAt);
  });
});

Deno.test("cluster (2 nodes): short freezes of the active, too short for a takeover, do not postpone a gone session's release", async () => {
  // Each pause is noticed as a freeze (over half the failover timeout of 2 s) but is too
  // short for the standby to take over: no client can have gone elsewhere, so the grace
  // runs on as it stood and is not started over at every wake.
  await Cluster.run(2, async (cluster) => {
    const first = cluster.at(0);
    assert.equal(await cluster.waitForOneActive(), first);
    try {
      const holder = await connectAs(first, newSession(), "holder");
      const token = tokenOf(await holder.request("A pause:f 120 0 s"), "pause:f");
      const waiter = await connectAs(first, newSession(), "waiter");
      await holder.close();
      const closedAt = performance.now();
      await waiter.send("A pause:f 120 60");
      let granted: { reply: string; at: number } | undefined;
      const arrived = arrival(waiter, 30_000).then((g) => granted = g);
      // 1.1 s running, 1.3 s paused, for at most 16 s (three graces of running time).
      while (granted === undefined && performance.now() - closedAt < 16_000) {
        await sleep(1100);
        if (granted !== undefined) break;
        first.pause();
        await sleep(1300);
        first.resume();
      }
      const loopEnd = performance.now();
      const got = await arrived;
      console.log(`  released ${(got.at - closedAt).toFixed(0)} ms after the session left`);
      assert.ok(tokenOf(got.reply, "pause:f") > token, `got ${got.reply}`);
      assert.ok(got.at <= loopEnd, "released while the freezes went on");
    } finally {
      await closeAll();
    }
  }, { args: ["--session-grace", "3", "--failover-timeout", "2"] });
});
