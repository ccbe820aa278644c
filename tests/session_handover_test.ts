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
import { DATA_DIR_PREFIX, freePorts, Member, tokenOf } from "./_cluster.ts";
import type { LineClient } from "./_helpers.ts";
import { PeerGate } from "./_peer_gate.ts";
import { arrival, newSession } from "./_sessions.ts";

const GRACE_MS = 2000;

Deno.test("cluster (2 nodes): handovers that are never taken do not postpone a gone session's release", async () => {
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
    const connect = async (member: Member, name: string) => {
      const c = await member.connect();
      lines.push(c);
      const session = newSession();
      assert.equal(await c.request(`HELLO 1 ${session} ${name}`), `HELLO ${session} OK`);
      return c;
    };
    await first.waitForLog(/ is active \(/, { since: 0, timeoutMs: 10_000 });
    await second.waitForLog(/ is standby \(/, { since: 0, timeoutMs: 10_000 });
    first.pause();
    await second.waitForLog(/ is active \(/, { since: second.logMark(), timeoutMs: 5000 });
    const holder = await connect(second, "holder");
    const token = tokenOf(await holder.request("A handover:k 60 0 s"), "handover:k");
    await holder.close(); // the session is gone: its lock goes one grace from now
    const closedAt = performance.now();
    const waiter = await connect(second, "waiter");
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
});
