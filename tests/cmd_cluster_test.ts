/**
 * Black-box tests of the `lockd` subcommands against a 3-node cluster, a server with
 * `--auth-file` and one with TLS (docs/cli.md): status of every node (roles, the active
 * followed, sync state, exit 1 with a node down), locks through the cluster, `lockd run`
 * over every address; 77 for a refused credential or prefix, 66 for an unreadable file;
 * `tls://` with `--ca-file`.
 */

import assert from "node:assert/strict";
import type { NodeStatusResult } from "../mod.ts";
import { Cluster } from "./_cluster.ts";
import { grantOf, LineClient, waitFor, withServer } from "./_helpers.ts";
import { runLockd } from "./_lockd.ts";
import { testPki, tlsArgs } from "./_tls.ts";

Deno.test("lockd status and locks show a 3-node cluster; status exits 1 with a node down", async () => {
  await Cluster.run(3, async (cluster) => {
    const active = await cluster.waitForOneActive({ timeoutMs: 10_000 });
    const servers = ["--servers", cluster.addresses.join(",")];
    const json = async () => {
      const out = await runLockd(["status", "--json", ...servers]);
      return { code: out.code, results: JSON.parse(out.stdout) as NodeStatusResult[] };
    };
    // Standbys report in sync shortly after the cluster settled.
    await waitFor(
      async () => {
        const { results } = await json();
        return results.every((r) =>
          r.status?.role === "active" || r.status?.replication.inSync.length === 1
        );
      },
      "both standbys in sync",
      10_000,
      100,
    );

    const client = await LineClient.connect(active.port);
    try {
      const token = grantOf(await client.request("A c:1 30 0"), "c:1");
      const table = await runLockd(["status", ...servers]);
      assert.equal(table.code, 0, table.stderr);
      const rows = table.stdout.trimEnd().split("\n").slice(1).map((l) => l.split(/ {2,}/));
      assert.equal(rows.length, 3);
      for (const [i, row] of rows.entries()) {
        assert.equal(row[0], cluster.addresses[i]);
        assert.equal(row[1], cluster.at(i) === active ? "active" : "standby", row.join("|"));
        assert.equal(row[2], active.address, "every node follows the active");
        if (cluster.at(i) === active) assert.equal(row[3], "async: 2/2 in sync");
        else assert.equal(row[3], "in sync");
      }
      const activeRow = rows.find((r) => r[0] === active.address)!;
      assert.equal(activeRow[6].trim(), "1", "holders on the active");

      const locks = await runLockd(["locks", "--json", ...servers]);
      assert.equal(locks.code, 0, locks.stderr);
      assert.deepEqual(
        JSON.parse(locks.stdout).map((l: { key: string; token: string }) => [l.key, l.token]),
        [
          ["c:1", String(token)],
        ],
      );
      // lockd run through every address: the request finds the active.
      const run = await runLockd([
        "run",
        "c:2",
        ...servers,
        "--",
        "sh",
        "-c",
        'echo "$LOCKD_TOKEN"',
      ]);
      assert.equal(run.code, 0, run.stderr);
      assert.ok(BigInt(run.stdout.trim()) > token);
    } finally {
      await client.close();
    }

    const standby = cluster.members.find((m) => m !== active)!;
    await standby.kill();
    const partial = await runLockd(["status", ...servers]);
    assert.equal(partial.code, 1, partial.stderr);
    assert.match(partial.stderr, new RegExp(`^lockd status: ${standby.address}: `, "m"));
    const downRow = partial.stdout.split("\n").find((l) => l.startsWith(standby.address))!;
    assert.match(downRow, /^\S+ +unreachable/);
    assert.match(partial.stdout, new RegExp(`^${active.address} +active`, "m"));
    const partialJson = await json();
    assert.equal(partialJson.code, 1);
    assert.ok(partialJson.results.find((r) => r.address === standby.address)?.error);
  });
});

const OPS_SECRET = "ops-Secret-1b2c3d4e5f60";
const ADMIN_SECRET = "admin-Secret-99aa88bb77cc";

Deno.test("the subcommands exit 77 for a refused credential or prefix, 66 for an unreadable secret file", async () => {
  const dir = await Deno.makeTempDir({ prefix: "lockd-cmd-auth-" });
  try {
    const authFile = `${dir}/clients.auth`;
    await Deno.writeTextFile(authFile, `ops ${OPS_SECRET} jobs:\nadmin ${ADMIN_SECRET} *\n`);
    const secretFile = `${dir}/ops.secret`;
    await Deno.writeTextFile(secretFile, `${OPS_SECRET}\n`);
    await withServer({ args: ["--auth-file", authFile] }, async (server) => {
      const servers = ["--servers", server.address];
      const ops = ["--auth-name", "ops", "--auth-secret-file", secretFile];
      const ok = await runLockd(["run", "jobs:a", ...servers, ...ops, "--", "true"]);
      assert.equal(ok.code, 0, ok.stderr);
      const admin = { LOCKD_AUTH_NAME: "admin", LOCKD_AUTH_SECRET: ADMIN_SECRET };
      // CMD gets the environment without the secret (whatever it prints of it shows none).
      const child = await runLockd([
        "run",
        "jobs:env",
        ...servers,
        "--",
        "sh",
        "-c",
        'echo "${LOCKD_AUTH_SECRET-none} ${LOCKD_AUTH_NAME-none} $LOCKD_KEY"',
      ], admin);
      assert.equal(child.code, 0, child.stderr);
      // The credential went whole (LOCKD_AUTH_NAME too): a lockd command CMD runs is not left
      // with half of one.
      assert.equal(child.stdout, "none none jobs:env\n");
      const acquired = await runLockd(["acquire", "any:key", ...servers], admin);
      assert.equal(acquired.code, 0, acquired.stderr);
      const status = await runLockd(["status", ...servers], admin);
      assert.equal(status.code, 0, status.stderr);
      const locks = await runLockd(["locks", "--json", ...servers], admin);
      assert.equal(JSON.parse(locks.stdout)[0].key, "any:key");

      const outside = await runLockd(["run", "other:a", ...servers, ...ops, "--", "true"]);
      assert.equal(outside.code, 77, outside.stderr);
      assert.match(outside.stderr, /^lockd run: .*prefix/);
      const none = await runLockd(["acquire", "jobs:b", ...servers]);
      assert.equal(none.code, 77, none.stderr);
      assert.match(none.stderr, /authentication .*no credential was given: --auth-name/);
      const missing = await runLockd([
        "acquire",
        "jobs:b",
        ...servers,
        "--auth-name",
        "ops",
        "--auth-secret-file",
        `${dir}/no-such-file`,
      ]);
      assert.equal(missing.code, 66, missing.stderr);
      assert.match(
        missing.stderr,
        /^lockd acquire: --auth-secret-file: cannot read the file it names: no such file/,
      );
      // A secret given there by mistake would be printed with the path: the path is not.
      assert.ok(!missing.stderr.includes("no-such-file"), missing.stderr);

      // Wrong secrets last: the server slows down an address that keeps failing.
      const wrong = { LOCKD_AUTH_NAME: "ops", LOCKD_AUTH_SECRET: "not-the-secret-0000" };
      const refused = await runLockd(["run", "jobs:c", ...servers, "--", "true"], wrong);
      assert.equal(refused.code, 77, refused.stderr);
      assert.match(refused.stderr, /^lockd run: .*authentication failed\n$/);
      assert.ok(!refused.stderr.includes("not-the-secret"), "the secret is never shown");
      const refusedStatus = await runLockd(["status", ...servers], wrong);
      assert.equal(refusedStatus.code, 77, refusedStatus.stderr);
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the subcommands reach a TLS server at tls:// with --ca-file or LOCKD_CA_FILE", async () => {
  const pki = await testPki();
  await withServer({ args: tlsArgs(pki) }, async (server) => {
    const servers = ["--servers", `tls://${server.address}`];
    const run = await runLockd([
      "run",
      "tls:1",
      ...servers,
      "--ca-file",
      pki.caFile,
      "--",
      "sh",
      "-c",
      'echo "$LOCKD_KEY"',
    ]);
    assert.equal(run.code, 0, run.stderr);
    assert.equal(run.stdout, "tls:1\n");
    const status = await runLockd(["status", ...servers], { LOCKD_CA_FILE: pki.caFile });
    assert.equal(status.code, 0, status.stderr);
    assert.match(status.stdout, /active/);
    // Without the CA the certificate is not trusted: no node can be reached.
    const untrusted = await runLockd(["acquire", "tls:2", ...servers]);
    assert.equal(untrusted.code, 69, untrusted.stderr);
  });
});
