/**
 * `--http` on real cluster nodes (docs/server.md, "HTTP endpoints"; issue 13): `/readyz` is
 * 200 on the active and on a standby in sync with it, 503 on a node still starting; each
 * node's `/healthz`, `/status` and `/metrics` tell its own role; readiness follows a
 * failover.
 *
 * @module
 */

import assert from "node:assert/strict";
import type { NodeStatus } from "../client/codec.ts";
import { Cluster, DATA_DIR_PREFIX, freePorts, Member, replicated, tokenOf } from "./_cluster.ts";
import { waitFor } from "./_helpers.ts";

/** The HTTP base URL from a member's ready line (`, http on http://HOST:PORT/`). */
function baseOf(member: Member): string {
  const match = /, http on (http:\/\/127\.0\.0\.1:\d+\/)$/.exec(member.readyLine);
  assert.ok(match, `ready line without http: ${member.readyLine}`);
  return match[1];
}

/** GET `url`: the status and the JSON body (or the text when it is not JSON). */
async function get(url: string): Promise<{ status: number; body: unknown }> {
  const response = await fetch(url);
  const text = await response.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // Not JSON (the metrics).
  }
  return { status: response.status, body };
}

Deno.test("cluster (2 nodes): /readyz is 200 on the active and the in-sync standby, and follows a failover", async () => {
  await Cluster.run(2, async (cluster) => {
    const active = await cluster.waitForOneActive();
    const standby = cluster.members.find((m) => m !== active)!;
    const [activeBase, standbyBase] = [baseOf(active), baseOf(standby)];
    const token = tokenOf(await active.request("A job:1 30 0"), "job:1");
    await replicated(standby, "job:1", token);
    await waitFor(
      async () => (await get(`${standbyBase}readyz`)).status === 200,
      "the standby ready (in sync)",
    );
    assert.deepEqual(await get(`${activeBase}readyz`), {
      status: 200,
      body: { ready: true, role: "active", address: active.address, active: active.address },
    });
    assert.deepEqual(await get(`${standbyBase}readyz`), {
      status: 200,
      body: { ready: true, role: "standby", address: standby.address, active: active.address },
    });
    assert.deepEqual((await get(`${standbyBase}healthz`)).body, {
      status: "ok",
      role: "standby",
      address: standby.address,
    });
    const status = (await get(`${activeBase}status`)).body as NodeStatus;
    assert.equal(status.role, "active");
    assert.deepEqual(status.peers.map((p) => [p.address, p.role, p.live]), [
      [standby.address, "standby", true],
    ]);
    assert.match(
      (await get(`${standbyBase}metrics`)).body as string,
      /^lockd_role\{role="standby"\} 1$/m,
    );
    // A standby's /locks shows its replica of the active's locks.
    const replica = (await get(`${standbyBase}locks`)).body as { locks: { key: string }[] };
    assert.deepEqual(replica.locks.map((l) => l.key), ["job:1"]);
    // A lease that runs out is counted by the active only, not again by the standby's replica.
    const short = tokenOf(await active.request("A job:short 0.2 0"), "job:short");
    await replicated(standby, "job:short", short);
    const keysOn = async (base: string) =>
      ((await get(`${base}locks`)).body as { locks: { key: string }[] }).locks.map((l) => l.key);
    await waitFor(async () => {
      const counts = ((await get(`${activeBase}status`)).body as NodeStatus).counts;
      return counts.expirations === 1 && (await keysOn(standbyBase)).length === 1;
    }, "the short lease run out on both nodes");
    assert.equal(((await get(`${standbyBase}status`)).body as NodeStatus).counts.expirations, 0);

    await active.kill("SIGKILL");
    await waitFor(async () => {
      const r = await get(`${standbyBase}readyz`);
      return r.status === 200 && (r.body as { role: string }).role === "active";
    }, "the standby promoted and ready");
    assert.equal(((await get(`${standbyBase}status`)).body as NodeStatus).counts.failovers, 1);
  }, { args: ["--http", "127.0.0.1:0"] });
});

Deno.test("cluster: a node still starting answers /healthz 200 and /readyz 503 until its role settles", async () => {
  // Its higher-priority peer never runs: the node listens to peers for one failover
  // timeout (3 s) before it promotes, and /readyz says it is not ready meanwhile.
  const [absent, port, http] = freePorts(3);
  const dataDir = await Deno.makeTempDir({ prefix: DATA_DIR_PREFIX });
  const base = `http://127.0.0.1:${http}/`;
  const member = new Member(1, port, dataDir, [
    "--peers",
    `127.0.0.1:${absent},127.0.0.1:${port}`,
    "--failover-timeout",
    "3",
    "--http",
    `127.0.0.1:${http}`,
  ], {});
  try {
    const started = member.start();
    let health: { status: number; body: unknown } | undefined;
    await waitFor(async () => {
      health = await get(`${base}healthz`).catch(() => undefined);
      return health !== undefined;
    }, "the HTTP endpoints up");
    assert.deepEqual(health, {
      status: 200,
      body: { status: "ok", role: "starting", address: member.address },
    });
    assert.deepEqual(await get(`${base}readyz`), {
      status: 503,
      body: { ready: false, role: "starting", address: member.address, active: null },
    });
    assert.match(
      await started,
      /^listening on \S+ as active, http on http:\/\/127\.0\.0\.1:\d+\/$/,
    );
    assert.deepEqual(await get(`${base}readyz`), {
      status: 200,
      body: { ready: true, role: "active", address: member.address, active: member.address },
    });
  } finally {
    await member.dispose();
    await Deno.remove(dataDir, { recursive: true }).catch(() => {});
  }
});
