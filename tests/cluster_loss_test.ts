/**
 * The replication loss window at a kill -9 (docs/cluster.md, "Replication and what a
 * failover can lose"): 3,000 pipelined acquires on the active, a kill -9 once the client has
 * read 500 grants, then every grant the client was told about is looked for on the promoted
 * standby. The active writes a change to its standbys before it answers the client, so on
 * loopback nothing acknowledged is lost; with `--replication sync` nothing acknowledged can
 * be lost at all while a standby is in sync.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Cluster, type Member } from "./_cluster.ts";
import { LineClient } from "./_helpers.ts";

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

for (const mode of ["async", "sync"] as const) {
  Deno.test(`cluster (--replication ${mode}) loses no acknowledged grant at a kill -9 of the active`, async () => {
    await Cluster.run(2, async (cluster) => {
      const [first, second] = cluster.members;
      await cluster.waitForOneActive();
      // The standby is in sync: its snapshot arrived (LOCKD_TRACE logs the stream).
      await second.waitForLog(/ > SNAPEND/, { timeoutMs: 5000 });
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
