/**
 * The replication loss window at a kill -9 (docs/cluster.md, "Replication and what a
 * failover can lose"): 3,000 pipelined acquires on the active, a kill -9 once the client has
 * read 500 grants, then every grant the client was told about is looked for on the promoted
 * standby. The active writes a change to its standbys before it answers the client, so on
 * loopback nothing acknowledged is lost; with `--replication sync` nothing acknowledged can
 * be lost at all while a standby is in sync, even when the active dies just as that standby
 * reconnects after a short pause of its own.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Cluster, type Member, withLine } from "./_cluster.ts";
import { LineClient, waitFor } from "./_helpers.ts";

const ACQUIRES = 3000;
const KILL_AFTER = 500;

/** Pipelines the acquires, kills the active after `KILL_AFTER` grants, returns what was read. */
async function grantsBeforeKill(active: Member): Promise<Map<string, bigint>> {
  const client = await LineClient.connect(active.port);
  const granted = new Map<string, bigint>();
  try {
    await client.write(
      Array.from({ length: ACQUIRES }, (_, i) => `A loss:${i} 30 0\n`).join(""),
    );
    const take = (line: string | null) => {
      const match = /^A (loss:\d+) A (\d+)$/.exec(line ?? "");
      assert.ok(match, `expected a grant, got ${JSON.stringify(line)}`);
      granted.set(match[1], BigInt(match[2]));
    };
    while (granted.size < KILL_AFTER) take(await client.readLine(5000));
    active.signal("SIGKILL");
    // Every grant the node wrote before it died was told to the client: read them all.
    for (
      let line = await client.readLine(5000);
      line !== null;
      line = await client.readLine(5000)
    ) {
      take(line);
    }
  } finally {
    await client.close();
  }
  return granted;
}

/** How many of `granted` the new active does not hold (it grants them again at once). */
async function lostOn(active: Member, granted: Map<string, bigint>): Promise<number> {
  const client = await LineClient.connect(active.port);
  try {
    const keys = [...granted.keys()];
    await client.write(keys.map((key) => `A ${key} 30 0.001\n`).join(""));
    let lost = 0;
    for (const line of await client.readLines(keys.length, 10_000)) {
      if (/^A \S+ A \d+$/.test(line)) lost++;
      else assert.match(line, /^A \S+ T$/, "a held key answers T to a try-lock");
    }
    return lost;
  } finally {
    await client.close();
  }
}

/**
 * Waits until `active` counts `standby` in sync (it acknowledged the snapshot): a pause or a
 * kill before that would find the active with no standby in sync, answering unheld.
 */
async function inSyncOn(active: Member, standby: Member): Promise<void> {
  await waitFor(
    async () => {
      const status = await withLine(active, (c) => c.request("S -"));
      const json = JSON.parse(status!.slice("S - S ".length));
      return json.replication.inSync.includes(standby.address);
    },
    "the standby in sync on the active",
    5000,
    20,
  );
}

/** Two nodes in sync replication, the second in sync with the first (the active). */
function syncPair(
  fn: (cluster: Cluster, first: Member, second: Member) => Promise<void>,
): Promise<void> {
  return Cluster.run(2, async (cluster) => {
    const [first, second] = cluster.members;
    await cluster.waitForOneActive();
    await second.waitForLog(/ > SNAPEND/, { timeoutMs: 5000 });
    await inSyncOn(first, second);
    await fn(cluster, first, second);
  }, { args: ["--replication", "sync"] });
}

for (const mode of ["async", "sync"] as const) {
  Deno.test(`cluster (--replication ${mode}) loses no acknowledged grant at a kill -9 of the active`, async () => {
    await Cluster.run(2, async (cluster) => {
      const [first, second] = cluster.members;
      await cluster.waitForOneActive();
      // The standby is in sync: its snapshot arrived (LOCKD_TRACE logs the stream).
      await second.waitForLog(/ > SNAPEND/, { timeoutMs: 5000 });
      await inSyncOn(first, second);
      const granted = await grantsBeforeKill(first);
      await first.exited;
      const promoted = await cluster.waitForOneActive({ not: [first], timeoutMs: 5000 });
      assert.equal(promoted, second);
      const lost = await lostOn(second, granted);
      console.error(`loss window (${mode}): ${lost} of ${granted.size} acknowledged grants lost`);
      assert.equal(lost, 0, `${lost} of ${granted.size} acknowledged grants were lost`);
    }, { args: ["--replication", mode], env: { LOCKD_TRACE: "1" } });
  });
}

Deno.test("cluster (--replication sync) loses no acknowledged grant when the active dies as its briefly paused standby reconnects", async () => {
  // A standby paused for more than half the failover timeout (not a whole one) reconnects on
  // waking, which drops the active's stream link to it. The replies held for it must keep
  // waiting for its new snapshot's acknowledgement, not go out at the drop: the active is
  // killed right then, and the standby, promoted, must hold every grant a client was told of.
  await syncPair(async (cluster, first, second) => {
    const client = await LineClient.connect(first.port);
    const granted = new Map<string, bigint>();
    let mark = 0;
    const loop = (async () => {
      for (let i = 0; i < 100_000; i++) {
        await client.write(`A pause:${i} 30 0\n`);
        const match = /^A (pause:\d+) A (\d+)$/.exec(await client.readLine(5000) ?? "");
        if (match === null) return; // the active died
        granted.set(match[1], BigInt(match[2]));
      }
    })();
    try {
      while (granted.size < 50) await new Promise((resolve) => setTimeout(resolve, 5));
      mark = first.logMark();
      second.pause();
      await new Promise((resolve) => setTimeout(resolve, 700));
      second.resume();
      await first.waitForLog(/event=link-down/, { since: mark, timeoutMs: 5000 });
      first.signal("SIGKILL");
      await loop;
    } finally {
      await client.close();
    }
    await first.exited;
    assert.doesNotMatch(first.stderr().slice(mark), /replication degraded/);
    const promoted = await cluster.waitForOneActive({ not: [first], timeoutMs: 5000 });
    assert.equal(promoted, second);
    const lost = await lostOn(second, granted);
    assert.equal(lost, 0, `${lost} of ${granted.size} acknowledged grants were lost`);
  });
});

Deno.test("cluster (--replication sync) answers T to a grant whose lease ran out while its reply waited for the standby", async () => {
  // The standby is paused: the grant of a 0.2 s lease waits for its acknowledgement longer
  // than the lease, which runs out on the server and passes the key to a waiter. Both replies
  // go out when the standby wakes; the first client must not be told it holds the key then.
  await syncPair(async (_cluster, first, second) => {
    const [short, waiter] = await Promise.all([
      LineClient.connect(first.port),
      LineClient.connect(first.port),
    ]);
    try {
      second.pause();
      await short.write("A late:k 0.2 5\n");
      await new Promise((resolve) => setTimeout(resolve, 50));
      await waiter.write("A late:k 30 5\n");
      await new Promise((resolve) => setTimeout(resolve, 400));
      second.resume();
      assert.equal(await short.readLine(5000), "A late:k T");
      assert.match(await waiter.readLine(5000) ?? "", /^A late:k A \d+$/);
    } finally {
      await Promise.all([short.close(), waiter.close()]);
    }
  });
});

Deno.test("cluster (--replication sync) hands over a grant whose reply waited with its lease moved for the wait", async () => {
  // The standby is paused: a grant's reply waits for it. The active is stopped (SIGTERM)
  // meanwhile and hands over to that standby once it wakes. The successor must hold the lease
  // as the client dates it (from the reply), not shorter by the time the reply waited.
  await syncPair(async (cluster, first, second) => {
    const client = await LineClient.connect(first.port);
    try {
      second.pause();
      await client.write("A moved:k 5 0\n");
      await new Promise((resolve) => setTimeout(resolve, 300));
      first.signal("SIGTERM"); // leave(): the handover waits for the paused standby
      await new Promise((resolve) => setTimeout(resolve, 100));
      second.resume();
      assert.match(await client.readLine(5000) ?? "", /^A moved:k A \d+$/);
      const repliedAt = performance.now();
      await cluster.waitForOneActive({ not: [first], timeoutMs: 5000 });
      const info = await withLine(second, async (c) => {
        await c.write("I moved:k\n");
        return await c.readLine(5000);
      });
      const left = Number(/^I moved:k I \d+ ([\d.]+) /.exec(info ?? "")?.[1]);
      const dated = 5 - (performance.now() - repliedAt) / 1000; // the client's view, at most
      assert.ok(
        left > dated - 0.15,
        `lease left ${left} s on the successor, the client dates ${dated}`,
      );
    } finally {
      await client.close();
    }
  });
});
