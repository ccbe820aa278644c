/**
 * A handover that keeps failing must not postpone the release of a gone session's locks
 * (docs/protocol.md, "Sessions"): two real processes behind peer gates (tests/_peer_gate.ts)
 * with `--session-grace 2`. The second node took over while the first was paused; when the
 * first wakes, the second hears it but the first never hears the second (one direction held
 * back), so the second's handover to it is never taken, again and again.
 *
 * @module
 */

import assert from "node:assert/strict";
import { DATA_DIR_PREFIX, freePorts, Member, sleep, tokenOf } from "./_cluster.ts";
import type { LineClient } from "./_helpers.ts";
import { PeerGate } from "./_peer_gate.ts";
import { arrival, newSession } from "./_sessions.ts";

const GRACE_MS = 2000;

/** Two nodes behind peer gates, started with `--session-grace 2`; cleans up after `fn`. */
async function withGates(
  fn: (first: Member, second: Member, gates: PeerGate[], lines: LineClient[]) => Promise<void>,
): Promise<void> {
  const ports = freePorts(2);
  const gates = ports.map((port) => new PeerGate(port));
  const peers = gates.map((g) => g.address).join(",");
  const members: Member[] = [];
  const lines: LineClient[] = [];
  try {
    for (const [i, port] of ports.entries()) {
      const dataDir = await Deno.makeTempDir({ prefix: DATA_DIR_PREFIX });
      const args = ["--advertise", gates[i].address, "--peers", peers, "--session-grace", "2"];
      members.push(new Member(i, port, dataDir, args, { LOCKD_TRACE: "1" }));
    }
    await Promise.all(members.map((m) => m.start()));
    const [first, second] = members;
    await first.waitForLog(/ is active \(/, { since: 0, timeoutMs: 10_000 });
    await second.waitForLog(/ is standby \(/, { since: 0, timeoutMs: 10_000 });
    await fn(first, second, gates, lines);
  } catch (error) {
    if (error instanceof Error) {
      error.message += "\n" + members.map((m) => `==== ${m.address}\n${m.stderr()}`).join("\n");
    }
    throw error;
  } finally {
    await Promise.all(lines.map((c) => c.close()));
    await Promise.all(members.map((m) => m.dispose()));
    await Promise.all(gates.map((g) => g.close()));
    await Promise.all(
      members.map((m) => Deno.remove(m.dataDir, { recursive: true }).catch(() => {})),
    );
  }
}

/** Connects to `member` and says hello as `session` (a new one unless given). */
async function connect(
  lines: LineClient[],
  member: Member,
  name: string,
  session = newSession(),
): Promise<LineClient> {
  const c = await member.connect();
  lines.push(c);
  assert.equal(await c.request(`HELLO 1 ${session} ${name}`), `HELLO ${session} OK`);
  return c;
}

Deno.test("cluster (2 nodes): handovers that are never taken do not postpone a gone session's release", async () => {
  await withGates(async (first, second, gates, lines) => {
    first.pause();
    await second.waitForLog(/ is active \(/, { since: second.logMark(), timeoutMs: 5000 });
    const holder = await connect(lines, second, "holder");
    const token = tokenOf(await holder.request("A handover:k 60 0 s"), "handover:k");
    await holder.close(); // the session is gone: its lock goes one grace from now
    const closedAt = performance.now();
    const waiter = await connect(lines, second, "waiter");
    await waiter.send("A handover:k 60 12");
    const mark = second.logMark();
    gates[0].hold(gates[1].address); // what the second node sends the first is held back
    first.resume();
    const granted = await arrival(waiter, 15_000);
    const after = granted.at - closedAt;
    console.log(`  released ${after.toFixed(0)} ms after the session left`);
    assert.ok(tokenOf(granted.reply, "handover:k") > token, `got ${granted.reply}`);
    assert.ok(after < GRACE_MS + 3000, `released ${after.toFixed(0)} ms after the session left`);
    assert.match(second.stderr().slice(mark), /handing-off/, "the second node tried a handover");
  });
});

Deno.test("cluster (2 nodes): a woken active whose merge is not taken stays parked: no release, no grant", async () => {
  await withGates(async (first, second, gates, lines) => {
    let mark = second.logMark();
    await first.kill("SIGKILL");
    await second.waitForLog(/ is active \(/, { since: mark, timeoutMs: 5000 });
    const session = newSession();
    const holder = await connect(lines, second, "holder", session);
    const token = tokenOf(await holder.request("A handover:p 60 0 s"), "handover:p");
    const waiter = await connect(lines, second, "waiter");
    await waiter.send("A handover:p 60 30"); // queued: also holds the failback off for 3.5 s
    await first.start(); // back empty: a standby that syncs from the second
    await first.waitForLog(/ is standby \(/, { since: 0, timeoutMs: 5000 });
    const port = (holder.conn.localAddr as Deno.NetAddr).port;
    const closing = second.logMark();
    await holder.close(); // the session leaves the second node: its grace runs out in 2 s
    await second.waitForLog(new RegExp(`:${port} closed the connection`), {
      since: closing,
      timeoutMs: 5000,
    });
    const closedAt = performance.now();
    second.pause();
    mark = first.logMark();
    await first.waitForLog(/ is active \(/, { since: mark, timeoutMs: 5000 });
    const back = await connect(lines, first, "holder", session); // back in time, on the active
    await sleep(Math.max(0, closedAt + 2600 - performance.now())); // the old deadline passed
    gates[0].hold(gates[1].address); // the woken second node's handover cannot reach the first
    const woken = second.logMark();
    second.resume();
    await second.waitForLog(/did not take over in time/, { since: woken, timeoutMs: 5000 });
    // Parked until its state is merged: it neither releases the session nor grants.
    assert.equal(await waiter.readLine(1500).catch(() => null), null, "the woken node granted");
    gates[0].heal();
    await second.waitForLog(/ is standby \(/, { since: woken, timeoutMs: 8000 });
    assert.equal(
      await back.request(`R handover:p ${token}`),
      "R handover:p R",
      "the lock was kept",
    );
  });
});
