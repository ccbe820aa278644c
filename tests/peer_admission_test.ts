/**
 * Peer handshakes and the connection cap (docs/protocol.md, "Limits and overload";
 * docs/cluster.md, "Peer protocol"): a connection that opens with `PEER` counts toward
 * `--max-connections` until it is admitted (it proved the cluster secret, or at once without
 * one), must be admitted within 10 s, and a peer address keeps one admitted inbound link.
 * One real node whose other listed peer is down, spoken to over raw TCP.
 */

import assert from "node:assert/strict";
import {
  grantOf,
  LineClient,
  runMain,
  type ServerProcess,
  startServer,
  waitFor,
} from "./_helpers.ts";
import { freePort } from "./_client_fixture.ts";

const PEER_SECRET = "admission-peer-Secret-4c1d9e";

/** A node listed with a second, dead peer (`other`), with `args` added. */
async function withNode(
  args: string[],
  fn: (server: ServerProcess, other: string) => Promise<void>,
): Promise<void> {
  const port = freePort();
  const other = `127.0.0.1:${freePort()}`;
  const dir = await Deno.makeTempDir({ prefix: "lockd-admission-" });
  await Deno.writeTextFile(`${dir}/cluster.secret`, PEER_SECRET + "\n");
  const withSecret = args.map((a) => a === "SECRET" ? `${dir}/cluster.secret` : a);
  const server = await startServer({
    listen: `127.0.0.1:${port}`,
    args: ["--peers", `127.0.0.1:${port},${other}`, ...withSecret],
  });
  try {
    await fn(server, other);
  } finally {
    await server.stop();
    await Deno.remove(server.dataDir, { recursive: true });
    await Deno.remove(dir, { recursive: true });
  }
}

/** Opens a connection whose first line is a peer handshake claiming `address`. */
async function posingAs(port: number, address: string, nonce?: string): Promise<LineClient> {
  const c = await LineClient.connect(port);
  await c.send(`PEER 5 ${address}` + (nonce === undefined ? "" : ` ${nonce}`));
  return c;
}

Deno.test("peer handshakes that prove nothing count toward --max-connections and are closed after 10 s", async () => {
  await withNode(
    ["--peer-secret-file", "SECRET", "--max-connections", "3"],
    async (server, other) => {
      const posers = await Promise.all(
        [0, 1, 2].map(() => posingAs(server.port, other, "ab".repeat(16))),
      );
      try {
        // Each got the node's challenge and says nothing more: the three fill the cap.
        for (const p of posers) assert.match((await p.readLine(3000))!, /^PEERAUTH [0-9a-f]{32} /);
        const refused = await LineClient.connect(server.port);
        assert.deepEqual(await refused.closedByPeer(5000), ["- - E too many connections"]);
        await refused.close();
        for (const p of posers) assert.deepEqual(await p.closedByPeer(15_000), []);
        await waitFor(
          () => /closed 127\.0\.0\.1:\d+: no peer proof within 10 s/.test(server.stderr()),
          "the silent close logged",
        );
        // Their places are free again.
        const client = await LineClient.connect(server.port);
        grantOf((await client.request("A admission:k 10 0"))!, "admission:k");
        await client.close();
      } finally {
        for (const p of posers) await p.close();
      }
    },
  );
});

Deno.test("an admitted peer link leaves the cap to clients, and a newer link from its address closes it", async () => {
  await withNode(["--max-connections", "2"], async (server, other) => {
    const links: LineClient[] = [];
    const clients: LineClient[] = [];
    try {
      // Without a cluster secret a handshake is admitted at once; each newer one from the
      // same address closes the one before, so only the last stays.
      for (let i = 0; i < 4; i++) {
        links.push(await posingAs(server.port, other));
        if (i > 0) assert.deepEqual(await links[i - 1].closedByPeer(5000), [], `link ${i - 1}`);
      }
      assert.equal(await links[3].silentFor(300), true);
      // The open link is not a client's: two clients fit under --max-connections 2.
      for (const key of ["admission:a", "admission:b"]) {
        const c = await LineClient.connect(server.port);
        clients.push(c);
        grantOf((await c.request(`A ${key} 10 0`))!, key);
      }
      const third = await LineClient.connect(server.port);
      assert.deepEqual(await third.closedByPeer(5000), ["- - E too many connections"]);
      await third.close();
    } finally {
      for (const c of [...links, ...clients]) await c.close();
    }
  });
});

Deno.test("a cluster node with --auth-file but no --peer-secret-file warns that peers are not checked", async () => {
  const dir = await Deno.makeTempDir({ prefix: "lockd-admission-auth-" });
  try {
    await Deno.writeTextFile(`${dir}/clients.auth`, "admin admin-Secret-0123456789 *\n");
    await withNode(["--auth-file", `${dir}/clients.auth`], async (server) => {
      await waitFor(
        () => /WARN +--auth-file without --peer-secret-file/.test(server.stderr()),
        "the warning",
      );
    });
    // With the secret, or without --auth-file, nothing is said.
    for (
      const args of [["--peer-secret-file", "SECRET", "--auth-file", `${dir}/clients.auth`], []]
    ) {
      await withNode(args, (server) => {
        assert.doesNotMatch(server.stderr(), /without --peer-secret-file/);
        return Promise.resolve();
      });
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("--peers refuses 0.0.0.0 (or 0) and ::, which no node can dial", async () => {
  for (const unspecified of ["0.0.0.0:7321", "0:7321", "[::]:7321"]) {
    const out = await runMain(["--listen", unspecified, "--peers", `${unspecified},127.0.0.1:1`]);
    assert.equal(out.code, 2);
    assert.match(out.stderr, /--peers lists .*, which no node can dial: .*--advertise/);
  }
});

Deno.test("a handshake of another peer protocol version is refused, and the log says so", async () => {
  await withNode([], async (server, other) => {
    const old = await LineClient.connect(server.port);
    await old.send(`PEER 4 ${other}`);
    assert.deepEqual(await old.closedByPeer(5000), []);
    await old.close();
    await waitFor(
      () =>
        /refused a peer handshake from 127\.0\.0\.1:\d+: PEER: unsupported peer protocol "4" \(this node speaks 5\)/
          .test(server.stderr()),
      "the refusal",
    );
  });
});
