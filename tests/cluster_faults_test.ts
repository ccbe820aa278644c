/**
 * Regression tests for cluster faults found in review (docs/protocol.md, "Semantics"; docs/cluster.md):
 * requests parked on a frozen active, merges after SIGSTOP/SIGCONT, FIFO across a handoff,
 * stale handoffs and replicas after a pause, a paused successor on SIGTERM, tokens after a
 * full crash, and a partial partition (peer links held back by a proxy in front of each
 * node). Real `server/main.ts` processes with the default timings (heartbeat 0.1 s, failover
 * timeout 1 s) and `LOCKD_TRACE=1`; waits are on log lines where the nodes print one, and
 * every wait is bounded.
 */

import assert from "node:assert/strict";
import { type Lock, LockClient } from "../mod.ts";
import { LineClient } from "./_helpers.ts";
import {
  Cluster,
  DATA_DIR_PREFIX,
  freePorts,
  Member,
  replicated,
  sleep,
  tokenOf,
  within,
  withLine,
} from "./_cluster.ts";
import { PeerGate } from "./_peer_gate.ts";
import { assertNoUnhandledRejections } from "./_unhandled.ts";

// ---------------------------------------------------------------------------------------
// Local helpers

/** `A <key> 30 0` on `member`: its token. */
function grant(member: Member, key: string, lease = 30): Promise<bigint> {
  return withLine(member, async (c) => tokenOf(await c.request(`A ${key} ${lease} 0`), key));
}

/**
 * Asks `member` alone for `A <prefix>-<n> 30 0` (a fresh key each time) every 10 ms until it
 * grants one; returns the token and the time since `since`.
 */
async function firstGrantOn(
  member: Member,
  prefix: string,
  since: number,
  timeoutMs = 5000,
): Promise<{ token: bigint; elapsedMs: number }> {
  for (let n = 0;; n++) {
    const key = `${prefix}-${n}`;
    const reply = await member.request(`A ${key} 30 0`, 300).catch(() => null);
    const elapsedMs = performance.now() - since;
    if (reply?.startsWith(`A ${key} A `)) return { token: tokenOf(reply, key), elapsedMs };
    if (elapsedMs > timeoutMs) {
      throw new Error(`${member.address} granted nothing within ${timeoutMs} ms (${reply})`);
    }
    await sleep(10);
  }
}

// ---------------------------------------------------------------------------------------
// Requests parked on a frozen active

Deno.test("cluster fault: a request parked on a frozen active whose connection closed is never granted", async () => {
  // docs/protocol.md, "Semantics": a lock is never granted to a closed connection. The requests reach the active
  // while it is paused (they wait in its socket buffer), their clients give up and close;
  // when it wakes it parks them (it knows it was frozen) until the interim active's state is
  // merged, and must then drop them, not grant them.
  await Cluster.run(2, async (cluster) => {
    const [frozen, interim] = cluster.members;
    assert.equal(await cluster.waitForOneActive(), frozen);
    const held = await grant(frozen, "park:queued");
    await replicated(interim, "park:queued", held);

    frozen.pause();
    for (const line of ["A park:free 30 0", "A park:queued 30 0"]) {
      const gone = await LineClient.connect(frozen.port);
      await gone.send(line);
      await gone.close();
    }
    await interim.waitForLog(/ is active \(promoted\)/, { timeoutMs: 3000 });
    const mark = interim.logMark();
    frozen.resume();
    await interim.waitForLog(/ is standby \(handed over to /, { since: mark, timeoutMs: 3000 });
    assert.equal(await cluster.waitForOneActive({ timeoutMs: 3000 }), frozen);

    await withLine(frozen, async (c) => {
      const free = await c.request("A park:free 30 0.001");
      assert.match(
        free ?? "",
        /^A park:free A \d+$/,
        "park:free was granted to a closed connection",
      );
      assert.equal(await c.request(`R park:queued ${held}`), "R park:queued R");
      const next = await c.request("A park:queued 30 0.001");
      assert.match(
        next ?? "",
        /^A park:queued A \d+$/,
        "park:queued passed to a closed connection's parked acquire",
      );
    });
  });
  await assertNoUnhandledRejections();
});

// ---------------------------------------------------------------------------------------
// Merge after SIGSTOP / SIGCONT

Deno.test("cluster fault: a lock released on the interim active stays released after the paused active's return", async () => {
  // The paused active still holds its grant; the interim active (a replica of it) saw the
  // grant and released it. The merge must not resurrect it: the key is free and the old
  // token answers N. A grant nobody touched survives the merge.
  await Cluster.run(2, async (cluster) => {
    const [paused, interim] = cluster.members;
    assert.equal(await cluster.waitForOneActive(), paused);
    const released = await grant(paused, "zombie:released");
    const kept = await grant(paused, "zombie:kept");
    await replicated(interim, "zombie:kept", kept);

    paused.pause();
    await interim.waitForLog(/ is active \(promoted\)/, { timeoutMs: 3000 });
    await withLine(interim, async (c) => {
      assert.equal(await c.request(`R zombie:released ${released}`), "R zombie:released R");
      // Granted and released again on the interim active: free there.
      const again = tokenOf(await c.request("A zombie:released 30 0.001"), "zombie:released");
      assert.equal(await c.request(`R zombie:released ${again}`), "R zombie:released R");
    });
    const mark = interim.logMark();
    paused.resume();
    await interim.waitForLog(/ is standby \(handed over to /, { since: mark, timeoutMs: 3000 });
    assert.equal(await cluster.waitForOneActive({ timeoutMs: 3000 }), paused);

    await withLine(paused, async (c) => {
      assert.equal(
        await c.request(`X zombie:released ${released} 30`),
        "X zombie:released N",
        "the released grant came back after the merge",
      );
      const after = await c.request("A zombie:released 30 0.001");
      assert.match(after ?? "", /^A zombie:released A \d+$/, "zombie:released is still held");
      assert.equal(await c.request(`X zombie:kept ${kept} 30`), "X zombie:kept X");
    });
  });
  await assertNoUnhandledRejections();
});

// ---------------------------------------------------------------------------------------
// FIFO across a graceful handoff

Deno.test("cluster fault: SIGTERM handoff keeps FIFO when clients connected in the reverse of their queue order", async () => {
  // Waiters are redirected with `M` and resend to the successor: the redirects must go out
  // in each key's queue order, not in the order the connections were accepted.
  await Cluster.run(2, async (cluster) => {
    const [old, heir] = cluster.members;
    assert.equal(await cluster.waitForOneActive(), old);
    const n = 5;
    const clients: LockClient[] = [];
    try {
      // Connections accepted in order 0..n-1: each client gets a grant through the active
      // before the next one is made.
      for (let i = 0; i < n; i++) {
        const client = new LockClient(cluster.addresses);
        clients.push(client);
        const warm = await within(client.acquire(`fifo:warm${i}`, { lease: 5 }), 5000, "warm");
        await warm.release();
      }
      const held = await grant(old, "fifo:k");
      // Queued in order n-1..0 (no event tells that a request is queued: leave each one time
      // to land before the next is sent).
      const order: number[] = [];
      const waiters: Promise<Lock>[] = [];
      for (let i = n - 1; i >= 0; i--) {
        waiters.push(
          clients[i].acquire("fifo:k", { lease: 30, wait: 0 }).then(async (lock) => {
            order.push(i);
            await lock.release();
            return lock;
          }),
        );
        await sleep(100);
      }
      const outcome = Promise.allSettled(waiters);

      assert.equal(await within(old.kill("SIGTERM"), 5000, "the active exits"), 0);
      await heir.waitForLog(/ is active \(took over from /, { timeoutMs: 3000 });
      await sleep(200); // The redirected waiters resend to the successor.
      assert.deepEqual(order, [], "a waiter was granted while fifo:k is held");
      assert.equal(await withLine(heir, (c) => c.request(`R fifo:k ${held}`)), "R fifo:k R");

      const results = await within(outcome, 10_000, "every waiter granted");
      for (const result of results) assert.equal(result.status, "fulfilled", String(result));
      assert.deepEqual(order, Array.from({ length: n }, (_, j) => n - 1 - j), "FIFO order");
    } finally {
      await Promise.all(clients.map((c) => c.close()));
    }
  });
  await assertNoUnhandledRejections();
});

Deno.test("cluster fault: failback keeps FIFO for waiters whose clients reconnect to the returning node at different times", async () => {
  // The interim active redirects its waiters to the returning node with `M`, in queue order.
  // A client not yet reconnected there (it retries every 3 s, each on its own schedule)
  // would resend late and lose its place: the failback waits until every client can be back.
  await Cluster.run(3, async (cluster) => {
    const [first, interim] = cluster.members;
    assert.equal(await cluster.waitForOneActive(), first);
    await first.kill("SIGKILL");
    assert.equal(await cluster.waitForOneActive({ not: [first] }), interim);
    const n = 6;
    const clients: LockClient[] = [];
    try {
      const held = await grant(interim, "fb:k");
      const order: number[] = [];
      const waiters: Promise<Lock>[] = [];
      for (let i = 0; i < n; i++) {
        // Clients made 300 ms apart: their retries towards the dead node are out of phase.
        const client = new LockClient(cluster.addresses);
        clients.push(client);
        waiters.push(
          client.acquire("fb:k", { lease: 30, wait: 0 }).then(async (lock) => {
            order.push(i);
            await lock.release();
            return lock;
          }),
        );
        await sleep(300);
      }
      const outcome = Promise.allSettled(waiters);

      await first.start();
      await first.waitForLog(/ is active \(took over from /, { timeoutMs: 10_000 });
      await sleep(200); // The redirected waiters resend to the returning node.
      assert.deepEqual(order, [], "a waiter was granted while fb:k is held");
      assert.equal(await withLine(first, (c) => c.request(`R fb:k ${held}`)), "R fb:k R");

      const results = await within(outcome, 10_000, "every waiter granted");
      for (const result of results) assert.equal(result.status, "fulfilled", String(result));
      assert.deepEqual(order, Array.from({ length: n }, (_, i) => i), "FIFO order");
    } finally {
      await Promise.all(clients.map((c) => c.close()));
    }
  });
  await assertNoUnhandledRejections();
});

// ---------------------------------------------------------------------------------------
// SIGTERM of the active while its best successor is paused

Deno.test("cluster fault: a standby paused during the active's SIGTERM does not obey the stale HANDOFF", async () => {
  // The active hands over to the paused standby (the HANDOFF waits in its socket), gives up
  // and exits; another node takes over and a lock is released there. When the paused
  // standby wakes, the HANDOFF of a node that has left is old news: obeying it would bring
  // the released lock back.
  await Cluster.run(3, async (cluster) => {
    const [leaving, paused, other] = cluster.members;
    assert.equal(await cluster.waitForOneActive(), leaving);
    const held = await grant(leaving, "stale:h");
    await Promise.all([replicated(paused, "stale:h", held), replicated(other, "stale:h", held)]);

    paused.pause();
    assert.equal(await within(leaving.kill("SIGTERM"), 5000, "the active exits"), 0);
    await other.waitForLog(/ is active \(/, { timeoutMs: 3000 });
    await withLine(other, async (c) => {
      assert.equal(await c.request(`R stale:h ${held}`), "R stale:h R");
    });
    const mark = paused.logMark();
    paused.resume();
    // It syncs from the active, which then fails back to it (higher priority).
    const took = await paused.waitForLog(/ is active \((.*)\)/, { since: mark, timeoutMs: 5000 });
    assert.notEqual(
      took[1],
      `took over from ${leaving.address}`,
      "the woken standby obeyed the HANDOFF of a node that had left",
    );
    assert.equal(await cluster.waitForOneActive({ timeoutMs: 3000 }), paused);
    await withLine(paused, async (c) => {
      assert.equal(await c.request(`X stale:h ${held} 30`), "X stale:h N");
      const after = await c.request("A stale:h 30 0.001");
      assert.match(after ?? "", /^A stale:h A \d+$/, "the released lock came back");
    });
  });
  await assertNoUnhandledRejections();
});

Deno.test("cluster fault: SIGTERM with a paused first successor hands over to the next one well under 1 s", async () => {
  // The best standby is paused: the leaving active must not wait a failover timeout for it,
  // nor leave without a handover; it tries the next standby, which takes over with the
  // holders.
  await Cluster.run(3, async (cluster) => {
    const [leaving, paused, next] = cluster.members;
    assert.equal(await cluster.waitForOneActive(), leaving);
    const held = await grant(leaving, "gap:held");
    await replicated(next, "gap:held", held);

    paused.pause();
    const termAt = performance.now();
    const exited = leaving.kill("SIGTERM");
    const first = await firstGrantOn(next, "gap:first", termAt);
    console.log(`  first grant on the next standby ${first.elapsedMs.toFixed(0)} ms after SIGTERM`);
    assert.equal(await within(exited, 5000, "the active exits"), 0);
    await next.waitForLog(/ is active \(/, { timeoutMs: 1000 });
    assert.match(
      next.stderr(),
      new RegExp(`is active \\(took over from ${leaving.address.replaceAll(".", "\\.")}\\)`),
      `the next standby was not handed over to (first grant ${
        first.elapsedMs.toFixed(0)
      } ms after SIGTERM)`,
    );
    assert.ok(first.elapsedMs < 800, `first grant ${first.elapsedMs.toFixed(0)} ms after SIGTERM`);
    assert.ok(first.token > held);
    await withLine(next, async (c) => {
      assert.equal(await c.request(`X gap:held ${held} 30`), "X gap:held X");
    });
  });
  await assertNoUnhandledRejections();
});

// ---------------------------------------------------------------------------------------
// Elections among replicas

Deno.test("cluster fault: a stale higher-priority replica does not beat a fresher one", async () => {
  // B is paused while A is active (its replica stays A's); A dies, C takes over, grants, and
  // the grant reaches D; C dies and B wakes. B has the higher priority but a replica that
  // missed C's activation: D's must win, and the grant survive.
  await Cluster.run(4, async (cluster) => {
    const [a, b, c, d] = cluster.members;
    assert.equal(await cluster.waitForOneActive(), a);
    b.pause();
    await a.kill("SIGKILL");
    await c.waitForLog(/ is active \(promoted\)/, { timeoutMs: 3000 });
    const fresh = await grant(c, "rep:fresh", 60);
    await replicated(d, "rep:fresh", fresh);

    await c.kill("SIGKILL");
    const mark = b.logMark();
    b.resume();
    // D (fresh replica) promotes; B (higher priority) syncs from it, and D fails back to B.
    const took = await b.waitForLog(/ is active \((.*)\)/, { since: mark, timeoutMs: 6000 });
    const active = await cluster.waitForOneActive({ timeoutMs: 3000 });
    await withLine(active, async (line) => {
      assert.equal(
        await line.request("A rep:fresh 30 0.001"),
        "A rep:fresh T",
        `the grant ${fresh} was lost: the stale replica won`,
      );
      assert.equal(await line.request(`X rep:fresh ${fresh} 30`), "X rep:fresh X");
      const after = tokenOf(await line.request("A rep:after 30 0"), "rep:after");
      assert.ok(after > fresh, `token ${after} after ${fresh}`);
    });
    assert.equal(took[1], `took over from ${d.address}`, "how the stale replica became active");
  });
  await assertNoUnhandledRejections();
});

// ---------------------------------------------------------------------------------------
// Tokens after a full crash

Deno.test("cluster fault: after a full crash, the node that died first comes back alone above every token issued", async () => {
  // docs/protocol.md, "Semantics": tokens never go back, across failover and restarts. A dies first and misses
  // B's and C's activations; then the whole cluster is down and A alone comes back. It
  // never heard of the later tokens: the wall-clock floor must put it above them.
  await Cluster.run(3, async (cluster) => {
    const [a, b, c] = cluster.members;
    assert.equal(await cluster.waitForOneActive(), a);
    const issued: bigint[] = [await grant(a, "crash:a")];
    await a.kill("SIGKILL");
    await b.waitForLog(/ is active \(promoted\)/, { timeoutMs: 3000 });
    issued.push(await grant(b, "crash:b"));
    await b.kill("SIGKILL");
    await c.waitForLog(/ is active \(promoted\)/, { timeoutMs: 3000 });
    issued.push(await grant(c, "crash:c"));
    await c.kill("SIGKILL");

    assert.match(await a.start(), / as active\b/);
    const back = await grant(a, "crash:back");
    const highest = issued.reduce((m, t) => (t > m ? t : m), 0n);
    assert.ok(
      back > highest,
      `token ${back} reissued after the full crash: tokens up to ${highest} were issued (${
        issued.join(", ")
      })`,
    );
  });
  await assertNoUnhandledRejections();
});

Deno.test("cluster fault: a standby that cannot save its token mark when promoted stops with a fatal line, not a crash", async () => {
  // docs/server.md, "Logs": a data directory that fails later is a fatal stop (event=fatal,
  // exit 1). A directory where the synchronous mark's temp file goes makes every write of
  // the mark fail, as a full disk would.
  await Cluster.run(2, async (cluster) => {
    const [a, b] = cluster.members;
    assert.equal(await cluster.waitForOneActive(), a);
    await b.waitForLog(/ is standby /);
    await Deno.mkdir(`${b.dataDir}/tokens.tmp-sync`);
    await a.kill("SIGKILL");
    assert.equal(await b.exited, 1);
    assert.match(
      b.stderr(),
      /ERROR +Cannot write the token mark in .*; stopping event=fatal/,
    );
    assert.doesNotMatch(b.stderr(), /Uncaught/);
  });
});

// ---------------------------------------------------------------------------------------
// Partial partition

Deno.test("cluster fault: a partial partition (A and B cut, both reach C) does not make B active", async () => {
  // B cannot hear the active A, but C hears both: A is alive, so B must not promote a
  // second active (C's heartbeats name A as live). After the heal, A is the one active and
  // its grants are intact.
  const ports = freePorts(3);
  const gates = ports.map((port) => new PeerGate(port));
  const peers = gates.map((g) => g.address).join(",");
  const members: Member[] = [];
  try {
    for (const [i, port] of ports.entries()) {
      const dataDir = await Deno.makeTempDir({ prefix: DATA_DIR_PREFIX });
      members.push(
        new Member(i, port, dataDir, ["--advertise", gates[i].address, "--peers", peers], {
          LOCKD_TRACE: "1",
        }),
      );
    }
    await Promise.all(members.map((m) => m.start()));
    const [a, b, c] = members;
    const [gateA, gateB] = gates;
    const roles = async () => {
      const probes = await Promise.all(members.map((m) => m.probe()));
      return probes.map((p) => p.state === "standby" ? `M ${p.active}` : p.state).join(" | ");
    };
    const settled = `active | M ${gateA.address} | M ${gateA.address}`;
    const waitRoles = async (want: (r: string) => boolean, what: string) => {
      const until = performance.now() + 5000;
      for (let r = await roles();; r = await roles()) {
        if (want(r)) return r;
        if (performance.now() > until) throw new Error(`${what}; last roles: ${r}`);
        await sleep(25);
      }
    };
    try {
      await waitRoles((r) => r === settled, "A active, B and C following it");
      const held = await grant(a, "asym:held");
      await Promise.all([replicated(b, "asym:held", held), replicated(c, "asym:held", held)]);

      const markB = b.logMark();
      gateB.hold(gateA.address);
      gateA.hold(gateB.address);
      // B stops hearing A; after a failover timeout (and then some) it would have promoted
      // if it went by what it hears itself. C still hears A and says so.
      await sleep(1700);
      const during = await b.request("A asym:split 30 0", 500);
      assert.doesNotMatch(during ?? "", /^A asym:split A /, "B granted during the partition");
      assert.doesNotMatch(
        b.stderr().slice(markB),
        / is active \(/,
        "B became active during the partition",
      );
      // B even sends its clients to A, which it knows is alive through C.
      assert.equal(await roles(), settled);
      const split = await grant(a, "asym:split");

      for (const gate of gates) gate.heal();
      await waitRoles((r) => r === settled, "one active after the heal");
      await withLine(a, async (line) => {
        assert.equal(await line.request(`X asym:held ${held} 30`), "X asym:held X");
        assert.equal(await line.request(`X asym:split ${split} 30`), "X asym:split X");
        assert.equal(await line.request("A asym:split 30 0.001"), "A asym:split T");
      });
    } catch (error) {
      await Promise.all(members.map((m) => m.dispose()));
      if (error instanceof Error) {
        error.message += "\n" +
          members.map((m) => `==== ${m.address} stderr ====\n${m.stderr()}`).join("\n");
      }
      throw error;
    }
  } finally {
    await Promise.all(members.map((m) => m.dispose()));
    await Promise.all(gates.map((g) => g.close()));
    await Promise.all(
      members.map((m) => Deno.remove(m.dataDir, { recursive: true }).catch(() => {})),
    );
  }
  await assertNoUnhandledRejections();
});
