/**
 * Black-box tests of the cluster (docs/cluster.md; issue 4): real `server/main.ts` processes on
 * 127.0.0.1 started with the same `--peers` list and the default timings (heartbeat 0.1 s,
 * failover timeout 1 s), killed, stopped, paused and restarted, reached by raw TCP and by
 * `LockClient` given every peer address.
 */

import assert from "node:assert/strict";
import { type Lock, LockClient } from "../mod.ts";
import { LineClient, runMain } from "./_helpers.ts";
import {
  Cluster,
  DATA_DIR_PREFIX,
  firstGrant,
  freePorts,
  type Member,
  replicated,
  sleep,
  tokenOf,
  within,
  withLine,
} from "./_cluster.ts";
import { assertNoUnhandledRejections } from "./_unhandled.ts";

// ---------------------------------------------------------------------------------------
// Local helpers

/** Longest time from the loss of the active to the first grant on its successor. */
const FAILOVER_BUDGET_MS = 2000;

function max(tokens: Iterable<bigint>): bigint {
  let m = 0n;
  for (const t of tokens) if (t > m) m = t;
  return m;
}

/** Pipelines `A <prefix><i> 30 0` for `count` distinct keys; returns every token. */
async function grantMany(client: LineClient, prefix: string, count: number): Promise<bigint[]> {
  await client.write(Array.from({ length: count }, (_, i) => `A ${prefix}${i} 30 0\n`).join(""));
  const lines = await client.readLines(count, 10_000);
  return lines.map((line) => tokenOf(line, line.split(" ")[1]));
}

/** Runs `fn` with LockClients given every peer of `cluster`, closed afterwards. */
async function withClients<T>(
  cluster: Cluster,
  count: number,
  fn: (...clients: LockClient[]) => Promise<T>,
): Promise<T> {
  const clients = Array.from({ length: count }, () => new LockClient(cluster.addresses));
  try {
    return await fn(...clients);
  } finally {
    await Promise.all(clients.map((c) => c.close()));
  }
}

/** Checks the cold start: node 0 active, the others its standbys, ready lines agree. */
async function assertColdStart(cluster: Cluster): Promise<Member> {
  const active = await cluster.waitForOneActive();
  assert.equal(active, cluster.at(0), "the highest-priority node is active after a cold start");
  assert.match(active.readyLine, / as active\b/);
  for (const m of cluster.members.slice(1)) assert.match(m.readyLine, / as standby\b/);
  return active;
}

const SIZES = [3, 2];

// ---------------------------------------------------------------------------------------
// Failover after kill -9

for (const size of SIZES) {
  Deno.test(`cluster (${size} nodes) fails over within 2 s of a kill -9 of the active, keeping tokens and holders`, async () => {
    await Cluster.run(size, async (cluster) => {
      const old = await assertColdStart(cluster);
      const heir = cluster.at(1);
      const before: bigint[] = [];
      let held = 0n;
      await withLine(old, async (c) => {
        held = tokenOf(await c.request("A kill:held 30 0"), "kill:held");
        before.push(held, ...await grantMany(c, "kill:k", 20));
      });
      assert.deepEqual(before, [...before].sort((a, b) => (a < b ? -1 : 1)), "tokens grow");
      // The holder must have reached the successor before the crash (replication is async).
      await replicated(heir, "kill:held", held);

      const killedAt = performance.now();
      await old.kill("SIGKILL");
      const first = await firstGrant(cluster, "kill:first", killedAt);
      console.log(`  ${size} nodes: first grant ${first.elapsedMs.toFixed(0)} ms after kill -9`);
      assert.equal(first.member, heir, "the highest-priority live standby promotes");
      assert.ok(first.elapsedMs < FAILOVER_BUDGET_MS, `first grant after ${first.elapsedMs} ms`);
      assert.ok(first.token > max(before), `${first.token} is not above ${max(before)}`);
      assert.equal(await cluster.waitForOneActive({ not: [old] }), heir);

      await withLine(heir, async (c) => {
        // Still held by the same grant: others get T, the holder's token still works.
        assert.equal(await c.request("A kill:held 30 0.001"), "A kill:held T");
        await withClients(cluster, 1, async (client) => {
          assert.equal(await client.tryAcquire("kill:held"), null);
        });
        assert.equal(await c.request(`X kill:held ${held} 30`), "X kill:held X");
        assert.equal(await c.request(`R kill:held ${held}`), "R kill:held R");
        const again = tokenOf(await c.request("A kill:held 30 0"), "kill:held");
        const later = [again, ...await grantMany(c, "kill:after", 20)];
        for (const t of later) assert.ok(t > max(before) && t > first.token, `token ${t}`);
        assert.deepEqual(later, [...later].sort((a, b) => (a < b ? -1 : 1)));
      });
    });
    await assertNoUnhandledRejections();
  });
}

// ---------------------------------------------------------------------------------------
// Graceful handoff

for (const size of SIZES) {
  Deno.test(`cluster (${size} nodes) hands over on SIGTERM of the active with no client-visible error`, async () => {
    await Cluster.run(size, async (cluster) => {
      const old = await assertColdStart(cluster);
      const heir = cluster.at(1);
      await withClients(cluster, 4, async (holders, ...waiters) => {
        const a = await holders.acquire("term:a", { lease: 30 });
        const b = await holders.acquire("term:b", { lease: 30 });
        // Waiters on term:a, queued one after the other (no event tells that a request is
        // queued, and LockClient may route through a redirect: leave each one time to land).
        const granted: number[] = [];
        const queued: Promise<Lock>[] = [];
        for (const [i, waiter] of waiters.entries()) {
          queued.push(
            waiter.acquire("term:a", { lease: 30, wait: 0 }).then((lock) => {
              granted.push(i);
              return lock;
            }),
          );
          await sleep(100);
        }
        const outcome = Promise.allSettled(queued);

        const exitCode = old.kill("SIGTERM");
        await heir.waitForLog(/is active \(took over from /, { timeoutMs: 3000 });
        assert.equal(await cluster.waitForOneActive({ not: [old], timeoutMs: 3000 }), heir);

        // The holders survived the handoff: their tokens still work on the new active.
        await within(b.extend(30), 5000, "extend on the new active");
        assert.equal(
          await withLine(heir, (c) => c.request(`X term:a ${a.token} 30`)),
          "X term:a X",
        );
        assert.deepEqual(granted, [], "no waiter was granted while term:a is held");

        // Releasing passes term:a down the queue in FIFO order, with growing tokens.
        let previous = a.token;
        let release = a.release();
        for (let i = 0; i < queued.length; i++) {
          await within(release, 5000, "release on the new active");
          const lock = await within(queued[i], 5000, `waiter ${i} granted`);
          assert.ok(lock.token > previous, `waiter ${i}: token ${lock.token} <= ${previous}`);
          previous = lock.token;
          release = lock.release();
        }
        await within(release, 5000, "last release");
        assert.deepEqual(granted, waiters.map((_, i) => i), "FIFO order");
        for (const result of await outcome) assert.equal(result.status, "fulfilled");
        await within(b.release(), 5000, "release of term:b");
        assert.equal(await within(exitCode, 5000, "the old active exits"), 0, "exit code");
      });
    });
    await assertNoUnhandledRejections();
  });
}

// ---------------------------------------------------------------------------------------
// Failback to a restarted higher-priority node

for (const size of SIZES) {
  Deno.test(`cluster (${size} nodes) fails back to the restarted highest-priority node, holders intact`, async () => {
    await Cluster.run(size, async (cluster) => {
      const first = await assertColdStart(cluster);
      const interim = cluster.at(1);
      await first.kill("SIGKILL");
      assert.equal(await cluster.waitForOneActive({ not: [first] }), interim);

      await withClients(cluster, 1, async (client) => {
        const lock = await within(client.acquire("back:a", { lease: 30 }), 5000, "acquire");
        const raw = await withLine(interim, async (c) => {
          const t = tokenOf(await c.request("A back:raw 30 0"), "back:raw");
          return [t, ...await grantMany(c, "back:k", 10)];
        });

        const ready = await first.start();
        assert.match(ready, / as standby\b/, "a returning node starts as a standby");
        // It syncs from the active first, then the active hands over to it.
        const synced = await first.waitForLog(new RegExp(`${interim.address} > SNAPEND`));
        const took = await first.waitForLog(/is active \(took over from /, { timeoutMs: 5000 });
        assert.ok(synced.index < took.index, "synced before taking over");
        assert.equal(await cluster.waitForOneActive(), first);

        await withLine(first, async (c) => {
          assert.equal(await c.request("A back:a 30 0.001"), "A back:a T");
          assert.equal(await c.request("A back:raw 30 0.001"), "A back:raw T");
          assert.equal(await c.request(`X back:raw ${raw[0]} 30`), "X back:raw X");
          assert.equal(await c.request(`R back:raw ${raw[0]}`), "R back:raw R");
          const after = tokenOf(await c.request("A back:after 30 0"), "back:after");
          assert.ok(after > max(raw) && after > lock.token, `token ${after}`);
        });
        await within(lock.extend(30), 5000, "extend after failback");
        await within(lock.release(), 5000, "release after failback");
        assert.equal(
          await withLine(first, (c) => c.request(`X back:a ${lock.token} 30`)),
          "X back:a N",
        );
      });
    });
    await assertNoUnhandledRejections();
  });
}

Deno.test("cluster (3 nodes) keeps its holders when the killed active restarts at once", async () => {
  // A supervisor (systemd Restart=always) brings the crashed active back within the failover
  // timeout, with an empty lock table. docs/cluster.md: the highest-priority live standby promotes,
  // and a returning node never takes over with empty state.
  await Cluster.run(3, async (cluster) => {
    const crashed = await assertColdStart(cluster);
    const held = await withLine(
      crashed,
      async (c) => tokenOf(await c.request("A quick:a 30 0"), "quick:a"),
    );
    await replicated(cluster.at(1), "quick:a", held);
    await replicated(cluster.at(2), "quick:a", held);
    await crashed.restart();
    // The standby with the state takes over, then fails back to the returning node.
    await crashed.waitForLog(/ is active \(/, { timeoutMs: 6000 });
    const active = await cluster.waitForOneActive({ timeoutMs: 3000 });
    await withLine(active, async (c) => {
      assert.equal(
        await c.request("A quick:a 30 0.001"),
        "A quick:a T",
        `the grant ${held} of quick:a was lost when ${crashed.address} came back empty`,
      );
      assert.equal(await c.request(`X quick:a ${held} 30`), "X quick:a X");
      const after = tokenOf(await c.request("A quick:after 30 0"), "quick:after");
      assert.ok(after > held);
    });
  });
  await assertNoUnhandledRejections();
});

// ---------------------------------------------------------------------------------------
// Split brain after SIGSTOP / SIGCONT

for (const size of SIZES) {
  Deno.test(`cluster (${size} nodes) merges back to one active within 2 s after SIGSTOP/SIGCONT of the active`, async () => {
    await Cluster.run(size, async (cluster) => {
      const paused = await assertColdStart(cluster);
      const interim = cluster.at(1);
      const before = await withLine(paused, (c) => grantMany(c, "stop:", 5));
      const [oldToken, bothToken] = before;
      await replicated(interim, "stop:4", before[4]);

      const pausedAt = performance.now();
      paused.pause();
      await interim.waitForLog(/is active \(promoted\)/, { timeoutMs: 3000 });
      const during = await withLine(interim, async (c) => {
        const fresh = tokenOf(await c.request("A stop:new 30 0"), "stop:new");
        // A key the old active still holds in its own table, re-granted during the pause.
        assert.equal(await c.request(`R stop:1 ${bothToken}`), "R stop:1 R");
        const regranted = tokenOf(await c.request("A stop:1 30 0"), "stop:1");
        assert.equal(await c.request("A stop:0 30 0.001"), "A stop:0 T");
        return { fresh, regranted };
      });
      assert.ok(during.fresh > max(before) && during.regranted > during.fresh);
      await sleep(Math.max(0, pausedAt + 1500 - performance.now()));

      const resumedAt = performance.now();
      paused.resume();
      const one = await cluster.waitForOneActive({ timeoutMs: 2000 });
      const mergedMs = performance.now() - resumedAt;
      console.log(`  ${size} nodes: one active ${mergedMs.toFixed(0)} ms after SIGCONT`);
      assert.equal(one, paused, "the higher-priority node wins, the other steps down");

      await withLine(one, async (c) => {
        // The newer grants survived the merge; the older grant of stop:1 did not.
        assert.equal(await c.request("A stop:new 30 0.001"), "A stop:new T");
        assert.equal(await c.request(`X stop:1 ${bothToken} 30`), "X stop:1 N");
        assert.equal(await c.request(`X stop:1 ${during.regranted} 30`), "X stop:1 X");
        assert.equal(await c.request(`X stop:0 ${oldToken} 30`), "X stop:0 X");
        assert.equal(await c.request(`R stop:new ${during.fresh}`), "R stop:new R");
        const after = tokenOf(await c.request("A stop:after 30 0"), "stop:after");
        assert.ok(after > during.regranted, `token ${after} after the merge`);
      });
    });
    await assertNoUnhandledRejections();
  });
}

// ---------------------------------------------------------------------------------------
// Token succession after a burst

Deno.test("cluster (3 nodes) continues above a burst of 1,000 grants after an immediate kill -9", async () => {
  await Cluster.run(3, async (cluster) => {
    const old = await assertColdStart(cluster);
    const tokens = await withLine(old, (c) => grantMany(c, "burst:", 1000));
    const killedAt = performance.now();
    await old.kill("SIGKILL");
    const first = await firstGrant(cluster, "burst:first", killedAt);
    assert.equal(first.member, cluster.at(1));
    assert.ok(first.elapsedMs < FAILOVER_BUDGET_MS, `first grant after ${first.elapsedMs} ms`);
    assert.ok(first.token > max(tokens), `${first.token} is not above ${max(tokens)}`);
  });
  await assertNoUnhandledRejections();
});

Deno.test("cluster (3 nodes) never reuses a token when a standby alone restarts after a full crash", async () => {
  // docs/protocol.md, "Semantics": tokens never go back, across restarts of the whole cluster. A new active
  // announces its reserved mark (its heartbeats carry it, sent as it becomes active) before
  // it issues from it; the standby that heard it must not issue below it after a crash,
  // even if the whole cluster went down before it re-synced from the new active.
  await Cluster.run(3, async (cluster) => {
    const first = await assertColdStart(cluster);
    await first.kill("SIGKILL");
    const successor = await firstGrant(cluster, "crash:first", performance.now());
    await Promise.all([cluster.at(1).kill("SIGKILL"), cluster.at(2).kill("SIGKILL")]);
    assert.equal(successor.member, cluster.at(1));
    const highest = successor.token;

    const survivor = cluster.at(2);
    assert.match(await survivor.start(), / as active\b/);
    const token = await withLine(
      survivor,
      async (c) => tokenOf(await c.request("A crash:z 30 0"), "crash:z"),
    );
    assert.ok(
      token > highest,
      `token ${token} reissued: ${cluster.at(1).address} issued up to ${highest}`,
    );
  });
  await assertNoUnhandledRejections();
});

Deno.test("cluster (3 nodes) continues above every node's mark after a full-cluster restart, past 2^60", async () => {
  await Cluster.run(3, async (cluster) => {
    const old = await assertColdStart(cluster);
    const before = await withLine(old, (c) => grantMany(c, "full:", 10));
    await Promise.all(cluster.members.map((m) => m.kill("SIGKILL")));
    // One node's data directory has a much higher mark (tokens are u64 bigints, not numbers).
    const high = 2n ** 60n + 7n;
    await Deno.writeTextFile(`${cluster.at(2).dataDir}/tokens`, `${high}\n`);
    await Promise.all(cluster.members.map((m) => m.start()));
    const active = await assertColdStart(cluster);
    const after = await withLine(active, (c) => grantMany(c, "full:", 10));
    assert.ok(after[0] > high && after[0] > max(before), `token ${after[0]} after the restart`);
    await active.kill("SIGKILL");
    const next = await firstGrant(cluster, "full:next", performance.now());
    assert.ok(next.token > max(after), `token ${next.token} after the failover`);
  });
  await assertNoUnhandledRejections();
});

// ---------------------------------------------------------------------------------------
// Sizes without quorum

Deno.test("cluster of 1 node (--peers = itself) serves at once and exits 0 on SIGTERM", async () => {
  await Cluster.run(1, async (cluster) => {
    const only = cluster.at(0);
    assert.match(only.readyLine, / as active\b/);
    assert.equal(await cluster.waitForOneActive(), only);
    await withLine(only, async (c) => {
      const t1 = tokenOf(await c.request("A one:a 30 0"), "one:a");
      assert.equal(await c.request("A one:a 30 0.001"), "A one:a T");
      assert.equal(await c.request(`R one:a ${t1}`), "R one:a R");
      const t2 = tokenOf(await c.request("A one:a 30 0"), "one:a");
      assert.ok(t2 > t1);
    });
    await withClients(cluster, 1, async (client) => {
      const lock = await client.acquire("one:b", { lease: 5 });
      await lock.release();
    });
    assert.equal(await only.kill("SIGTERM"), 0);
  });
  await assertNoUnhandledRejections();
});

Deno.test("cluster of 4 nodes fails over after a kill -9 of the active", async () => {
  await Cluster.run(4, async (cluster) => {
    const old = await assertColdStart(cluster);
    const held = await withLine(
      old,
      async (c) => tokenOf(await c.request("A four:a 30 0"), "four:a"),
    );
    await replicated(cluster.at(1), "four:a", held);
    const killedAt = performance.now();
    await old.kill("SIGKILL");
    const first = await firstGrant(cluster, "four:first", killedAt);
    console.log(`  4 nodes: first grant ${first.elapsedMs.toFixed(0)} ms after kill -9`);
    assert.equal(first.member, cluster.at(1));
    assert.ok(first.elapsedMs < FAILOVER_BUDGET_MS, `first grant after ${first.elapsedMs} ms`);
    assert.ok(first.token > held);
    assert.equal(await cluster.waitForOneActive({ not: [old] }), cluster.at(1));
    await withLine(cluster.at(1), async (c) => {
      assert.equal(await c.request("A four:a 30 0.001"), "A four:a T");
      assert.equal(await c.request(`R four:a ${held}`), "R four:a R");
    });
  });
  await assertNoUnhandledRejections();
});

// ---------------------------------------------------------------------------------------
// The client rides through

Deno.test("LockClient given every peer keeps acquiring and releasing across a kill -9 of the active", async () => {
  await Cluster.run(3, async (cluster) => {
    const old = await assertColdStart(cluster);
    await withClients(cluster, 1, async (client) => {
      const tokens: bigint[] = [];
      let slowest = 0;
      let stop = false;
      const goals: { count: number; reached: () => void }[] = [];
      const reach = (count: number) => {
        const { promise, resolve } = Promise.withResolvers<void>();
        goals.push({ count, reached: resolve });
        return within(promise, 10_000, `${count} lock cycles`);
      };
      const loop = (async () => {
        while (!stop) {
          const started = performance.now();
          const lock = await client.acquire("ride", { lease: 3, wait: 0 });
          tokens.push(lock.token);
          await lock.release();
          slowest = Math.max(slowest, performance.now() - started);
          for (const goal of goals.filter((g) => tokens.length >= g.count)) {
            goals.splice(goals.indexOf(goal), 1);
            goal.reached();
          }
        }
      })().finally(() => {
        for (const goal of goals.splice(0)) goal.reached(); // Ends their timers.
      });
      try {
        await Promise.race([reach(20), loop]);
        const atKill = tokens.length;
        old.kill("SIGKILL");
        await Promise.race([reach(atKill + 20), loop]);
      } finally {
        stop = true;
        await loop;
      }
      console.log(`  ${tokens.length} lock cycles, slowest ${slowest.toFixed(0)} ms`);
      for (let i = 1; i < tokens.length; i++) {
        assert.ok(tokens[i] > tokens[i - 1], `token ${i}: ${tokens[i]} <= ${tokens[i - 1]}`);
      }
    });
  });
  await assertNoUnhandledRejections();
});

// ---------------------------------------------------------------------------------------
// Bad cluster flags

Deno.test("main() exits 2 when --peers lacks this node or lists a node twice", async () => {
  const dir = await Deno.makeTempDir({ prefix: DATA_DIR_PREFIX });
  try {
    const [self, other, third] = freePorts(3).map((p) => `127.0.0.1:${p}`);
    const missing = await runMain([
      "--listen",
      self,
      "--data-dir",
      dir,
      "--peers",
      `${other},${third}`,
    ]);
    assert.equal(missing.code, 2, missing.stderr);
    assert.equal(missing.stdout, "");
    assert.ok(missing.stderr.includes(`--peers must contain this node's address ${self}`));

    const twice = await runMain([
      "--listen",
      self,
      "--data-dir",
      dir,
      "--peers",
      `${self},${other},${self}`,
    ]);
    assert.equal(twice.code, 2, twice.stderr);
    assert.match(twice.stderr, new RegExp(`--peers lists ${self} twice`));

    const advertised = await runMain([
      "--listen",
      self,
      "--advertise",
      other,
      "--data-dir",
      dir,
      "--peers",
      `${self},${third}`,
    ]);
    assert.equal(advertised.code, 2, advertised.stderr);
    assert.ok(advertised.stderr.includes(`--peers must contain this node's address ${other}`));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
