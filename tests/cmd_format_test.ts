/**
 * Unit tests of `lockd status` and `lockd locks` output (docs/cli.md): the tables, the JSON
 * and the exit status of `status`, from made-up results. No processes, no sockets.
 */

import assert from "node:assert/strict";
import type { KeyState, NodeStatus, NodeStatusResult } from "../mod.ts";
import {
  formatLag,
  locksJson,
  locksTable,
  renderTable,
  statusJson,
  statusTable,
} from "../server/cmd/format.ts";
import { activesOf, statusExit } from "../server/cmd/inspect.ts";
import { nodeStatus } from "./_status_fixture.ts";

/** A node status with the given parts (the rest zero). */
function node(parts: Partial<NodeStatus> & Pick<NodeStatus, "address" | "role">): NodeStatus {
  return nodeStatus({ active: parts.address, ...parts });
}

const A = "10.0.0.1:7321";
const B = "10.0.0.2:7321";
const C = "10.0.0.3:7321";

/** A 3-node cluster's answers: A active, B in sync, C down. */
function cluster(): NodeStatusResult[] {
  const peer = (address: string, lagMs: number | null) => ({
    address,
    role: "standby" as const,
    live: lagMs !== null,
    synced: lagMs !== null,
    lagMs,
    lastHeardMs: 10,
  });
  return [
    {
      address: A,
      status: node({
        address: A,
        role: "active",
        replication: { mode: "async", degraded: false, inSync: [B] },
        peers: [peer(B, 3), peer(C, null)],
        connections: 4,
        holders: 2,
        waiters: 1,
        tokens: { last: "41", mark: "2000000" },
      }),
    },
    {
      address: B,
      status: node({
        address: B,
        role: "standby",
        active: A,
        replication: { mode: "async", degraded: false, inSync: [B] },
        tokens: { last: "41", mark: "2000000" },
      }),
    },
    { address: C, error: "No usable connection to 10.0.0.3:7321: Connection refused" },
  ];
}

Deno.test("renderTable() aligns columns, numbers right, without trailing spaces", () => {
  assert.equal(
    renderTable(["KEY", "N", "X"], [["a", "1", ""], ["long", "100", "y"]], [
      "left",
      "right",
      "left",
    ]),
    "KEY     N  X\na       1\nlong  100  y",
  );
});

Deno.test("statusTable() shows role, active, sync, lag and counts of every node", () => {
  const lines = statusTable(cluster()).split("\n");
  assert.equal(lines.length, 4);
  assert.match(lines[0], /^NODE +ROLE +ACTIVE +SYNC +LAG +CONNS +HOLDERS +WAITERS +MARK$/);
  assert.match(
    lines[1],
    /^10\.0\.0\.1:7321 +active +10\.0\.0\.1:7321 +async: 1\/2 in sync +- +4 +2 +1 +2000000$/,
  );
  assert.match(
    lines[2],
    /^10\.0\.0\.2:7321 +standby +10\.0\.0\.1:7321 +in sync +3ms +0 +0 +0 +2000000$/,
  );
  assert.match(lines[3], /^10\.0\.0\.3:7321 +unreachable +- +- +- +- +- +- +-$/);
});

Deno.test("statusTable() shows a single node, a degraded active and a refused credential", () => {
  const single = statusTable([{ address: A, status: node({ address: A, role: "active" }) }]);
  assert.match(
    single.split("\n")[1],
    /^10\.0\.0\.1:7321 +active +10\.0\.0\.1:7321 +- +- +0 +0 +0 +1000000$/,
  );
  const degraded = statusTable([{
    address: A,
    status: node({
      address: A,
      role: "active",
      replication: { mode: "sync", degraded: true, inSync: [] },
      peers: [],
    }),
  }, {
    address: B,
    status: node({
      address: B,
      role: "standby",
      active: null,
      replication: { mode: "sync", degraded: false, inSync: [] },
    }),
  }]);
  assert.match(degraded, /sync: 0\/0 in sync, degraded/);
  assert.match(degraded.split("\n")[2], /standby +none +catching up/);
  const refused = statusTable([{
    address: A,
    error: 'lockd rejected S "-": authentication failed',
  }]);
  assert.match(refused.split("\n")[1], /^10\.0\.0\.1:7321 +refused/);
});

Deno.test("statusJson() is the results array as JSON", () => {
  const results = cluster();
  assert.deepEqual(JSON.parse(statusJson(results)), results);
});

Deno.test("statusExit() is 0 when all answered, 1 when some did, 69 or 77 when none did", () => {
  const all = cluster().slice(0, 2);
  assert.equal(statusExit(all), 0);
  assert.equal(statusExit(cluster()), 1);
  assert.equal(statusExit([{ address: A, error: "Connection refused" }]), 69);
  assert.equal(
    statusExit([{ address: A, error: 'lockd rejected S "-": authentication failed' }]),
    77,
  );
});

Deno.test("statusExit() is 1 when every node answered but two are active", () => {
  const [a, b] = cluster();
  const bActive = { address: B, status: node({ address: B, role: "active" }) };
  assert.deepEqual(activesOf([a, b]), [A]);
  assert.deepEqual(activesOf([a, bActive]), [A, B]);
  assert.equal(statusExit([a, bActive]), 1);
});

Deno.test("locksTable() and locksJson() show key, token, holder, lease left, waiters", () => {
  const locks: KeyState[] = [
    {
      key: "orders:17",
      held: true,
      token: 18446744073709551615n,
      holder: "billing-7",
      leaseLeft: 29.512,
      waiters: 2,
    },
    { key: "orders:2", held: true, token: 5n, leaseLeft: 0.25, waiters: 0 },
  ];
  const lines = locksTable(locks).split("\n");
  assert.match(lines[0], /^KEY +TOKEN +HOLDER +LEASE LEFT +WAITERS$/);
  assert.match(lines[1], /^orders:17 +18446744073709551615 +billing-7 +29\.5s +2$/);
  assert.match(lines[2], /^orders:2 +5 +- +0\.3s +0$/);
  assert.equal(locksTable([]), "KEY  TOKEN  HOLDER  LEASE LEFT  WAITERS");
  assert.deepEqual(JSON.parse(locksJson(locks)), [
    {
      key: "orders:17",
      token: "18446744073709551615",
      holder: "billing-7",
      leaseLeftSeconds: 29.512,
      waiters: 2,
    },
    { key: "orders:2", token: "5", holder: null, leaseLeftSeconds: 0.25, waiters: 0 },
  ]);
  assert.equal(locksJson([]), "[]");
});

Deno.test("formatLag() is milliseconds under a second, then seconds", () => {
  assert.equal(formatLag(0), "0ms");
  assert.equal(formatLag(250.4), "250ms");
  assert.equal(formatLag(1500), "1.5s");
});
