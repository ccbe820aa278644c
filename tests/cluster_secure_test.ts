/**
 * A secured cluster (docs/security.md): three real processes where every link is TLS, peers
 * prove the cluster secret (`--peer-secret-file`) and clients present credentials
 * (`--auth-file`). It fails over on kill -9 and hands off on SIGTERM as a plain cluster does,
 * and a peer without the secret (a raw handshake, or a lockd with another secret at a listed
 * address) is refused and logged.
 */

import assert from "node:assert/strict";
import { LockClient } from "../mod.ts";
import { LineClient } from "./_helpers.ts";
import { Cluster, firstGrant, replicated, tokenOf, withLine } from "./_cluster.ts";
import { runLockd } from "./_lockd.ts";
import { testPki, tlsArgs } from "./_tls.ts";

const ADMIN_SECRET = "cluster-admin-Secret-6f2b1e";
const PEER_SECRET = "cluster-peer-Secret-0a9d3c7e55";

interface SecureFiles {
  args: string[];
  caPem: string;
  dir: string;
}

async function secureFiles(): Promise<SecureFiles> {
  const pki = await testPki();
  const dir = await Deno.makeTempDir({ prefix: "lockd-secure-" });
  await Deno.writeTextFile(`${dir}/clients.auth`, `admin ${ADMIN_SECRET} *\n`);
  await Deno.writeTextFile(`${dir}/cluster.secret`, PEER_SECRET + "\n");
  await Deno.writeTextFile(`${dir}/other.secret`, "another-cluster-Secret-123456\n");
  return {
    args: [
      ...tlsArgs(pki),
      "--auth-file",
      `${dir}/clients.auth`,
      "--peer-secret-file",
      `${dir}/cluster.secret`,
    ],
    caPem: pki.caPem,
    dir,
  };
}

/** Opens TLS to `port` and says hello as admin: how the test reaches a secured node. */
function connectAs(caPem: string): (port: number) => Promise<LineClient> {
  return async (port) => {
    const c = await LineClient.connectTls(port, [caPem]);
    await c.send(`HELLO 1 - cluster-test admin ${ADMIN_SECRET}`);
    const reply = await c.readLine(3000).catch(() => null);
    if (reply !== "HELLO - OK") {
      await c.close();
      throw new Error(`hello refused: ${reply}`);
    }
    return c;
  };
}

async function withSecureCluster(fn: (cluster: Cluster, files: SecureFiles) => Promise<void>) {
  const files = await secureFiles();
  try {
    await Cluster.run(3, (cluster) => fn(cluster, files), {
      args: files.args,
      connect: connectAs(files.caPem),
    });
  } finally {
    await Deno.remove(files.dir, { recursive: true });
  }
}

Deno.test("a TLS cluster with a peer secret fails over on kill -9 and hands off on SIGTERM, keeping holders", async () => {
  await withSecureCluster(async (cluster, files) => {
    const first = await cluster.waitForOneActive({ timeoutMs: 8000 });
    assert.equal(first, cluster.at(0));
    const second = cluster.at(1);
    const third = cluster.at(2);
    // Peer links are up and authenticated: the holder reaches both standbys.
    const held = await withLine(
      first,
      async (c) => tokenOf(await c.request("A sec:held 30 0"), "sec:held"),
    );
    await replicated(second, "sec:held", held);
    await replicated(third, "sec:held", held);

    const killedAt = performance.now();
    await first.kill("SIGKILL");
    const grant = await firstGrant(cluster, "sec:first", killedAt);
    assert.equal(grant.member, second);
    assert.ok(grant.token > held);
    assert.equal(await cluster.waitForOneActive({ not: [first], timeoutMs: 8000 }), second);
    await withLine(second, async (c) => {
      assert.equal(await c.request("A sec:held 30 0.001"), "A sec:held T");
      assert.equal(await c.request(`X sec:held ${held} 30`), "X sec:held X");
    });

    // A client over tls:// with every address follows the cluster.
    const client = new LockClient(cluster.addresses.map((a) => `tls://${a}`), {
      caCerts: [files.caPem],
      auth: { name: "admin", secret: ADMIN_SECRET },
    });
    try {
      const lock = await client.acquire("sec:client", { lease: 30 });
      // Graceful handoff of the active: the next node takes over with the holders.
      assert.equal(await second.kill("SIGTERM"), 0);
      assert.equal(
        await cluster.waitForOneActive({ not: [first, second], timeoutMs: 8000 }),
        third,
      );
      await withLine(third, async (c) => {
        assert.equal(await c.request("A sec:held 30 0.001"), "A sec:held T");
        assert.equal(await c.request(`R sec:held ${held}`), "R sec:held R");
      });
      await lock.extend(30);
      await lock.release();
    } finally {
      await client.close();
    }
    for (const m of cluster.members) {
      assert.ok(!m.stderr().includes(PEER_SECRET), "the peer secret never reaches the logs");
      assert.ok(!m.stderr().includes(ADMIN_SECRET), "a client secret never reaches the logs");
      assert.doesNotMatch(m.stderr(), /refused/, "no link was refused");
    }
  });
});

Deno.test("a peer handshake without the cluster secret is refused and logged", async () => {
  await withSecureCluster(async (cluster, files) => {
    const active = await cluster.waitForOneActive({ timeoutMs: 8000 });
    const standby = cluster.at(1);
    const posing = standby.address;
    // No nonce (a node without --peer-secret-file), then a nonce and a made-up proof.
    let mark = active.logMark();
    const bare = await LineClient.connectTls(active.port, [files.caPem]);
    await bare.send(`PEER 5 ${posing}`);
    assert.deepEqual(await bare.closedByPeer(5000), []);
    await bare.close();
    await active.waitForLog(/refused a peer handshake from 127\.0\.0\.1:\d+: .*no proof/, {
      since: mark,
    });
    mark = active.logMark();
    const guess = await LineClient.connectTls(active.port, [files.caPem]);
    await guess.send(`PEER 5 ${posing} ${"ab".repeat(16)}`);
    const challenge = await guess.readLine(3000);
    assert.match(challenge ?? "", /^PEERAUTH [0-9a-f]{32} [0-9a-f]{64}$/);
    await guess.send(`PEERPROOF ${"00".repeat(32)}`);
    assert.deepEqual(await guess.closedByPeer(5000), []);
    await guess.close();
    await active.waitForLog(/refused a peer handshake from .* did not prove the cluster secret/, {
      since: mark,
    });
    // An address not in --peers is refused before any challenge.
    const stranger = await LineClient.connectTls(active.port, [files.caPem]);
    await stranger.send(`PEER 5 127.0.0.1:1 ${"cd".repeat(16)}`);
    assert.deepEqual(await stranger.closedByPeer(5000), []);
    await stranger.close();
    await active.waitForLog(/refused a peer handshake from .*127\.0\.0\.1:1 is not in --peers/);
    // Repeats are limited per kind of refusal, whatever address or proof each one names.
    mark = active.logMark();
    for (let i = 0; i < 30; i++) {
      const flood = await LineClient.connectTls(active.port, [files.caPem]);
      await flood.send(
        i % 2 === 0 ? `PEER 5 10.9.${i}.1:7321` : `PEER 5 ${posing} ${"ef".repeat(16)}`,
      );
      if (i % 2 === 1) {
        await flood.readLine(3000);
        await flood.send(`PEERPROOF ${i.toString(16).padStart(64, "0")}`);
      }
      await flood.closedByPeer(5000);
      await flood.close();
    }
    const refusals = active.stderr().slice(-(active.logMark() - mark)).split("\n")
      .filter((l) => l.includes("refused a peer handshake"));
    assert.ok(refusals.length <= 1, refusals.join("\n"));
    // The cluster is unchanged.
    assert.equal(await cluster.waitForOneActive(), active);
  });
});

Deno.test("a lockd with another secret at a listed address is refused both ways and changes nothing", async () => {
  await withSecureCluster(async (cluster, files) => {
    const active = await cluster.waitForOneActive({ timeoutMs: 8000 });
    const held = await withLine(
      active,
      async (c) => tokenOf(await c.request("A rogue:held 30 0"), "rogue:held"),
    );
    // Replace node 2 by an impostor: same certificate, same addresses, another secret.
    const seat = cluster.at(2);
    await seat.kill("SIGKILL");
    const { Member } = await import("./_cluster.ts");
    const rogue = new Member(
      9,
      seat.port,
      await Deno.makeTempDir({ prefix: "lockd-rogue-" }),
      [
        "--peers",
        cluster.peers,
        ...files.args.map((a) => a.endsWith("cluster.secret") ? `${files.dir}/other.secret` : a),
      ],
      { LOCKD_TRACE: "1" },
      connectAs(files.caPem),
    );
    try {
      const mark = active.logMark();
      await rogue.start();
      await active.waitForLog(/did not prove the cluster secret/, { since: mark, timeoutMs: 8000 });
      await rogue.waitForLog(/did not prove the cluster secret/, { timeoutMs: 8000 });
      // The real cluster keeps its active and its holder, and never replicates to the rogue.
      assert.equal((await active.probe(1000)).state, "active");
      await withLine(active, async (c) => {
        assert.equal(await c.request("A rogue:held 30 0.001"), "A rogue:held T");
        assert.equal(await c.request(`R rogue:held ${held}`), "R rogue:held R");
      });
      assert.doesNotMatch(rogue.stderr(), / > H rogue:held /);
    } finally {
      await rogue.dispose();
      await Deno.remove(rogue.dataDir, { recursive: true });
    }
  });
});

Deno.test("a cluster with --peer-secret-file on one node only says so a few times, not at every redial", async () => {
  const dir = await Deno.makeTempDir({ prefix: "lockd-half-" });
  await Deno.writeTextFile(`${dir}/cluster.secret`, PEER_SECRET + "\n");
  try {
    await Cluster.run(2, async (cluster) => {
      await cluster.waitForOneActive({ timeoutMs: 8000 });
      // Node 1 comes back with a secret; node 0 has none. Each redials every heartbeat. (Its
      // link is logged up once it lasted a second: killed before, it would count as brief.)
      const seat = cluster.at(1);
      const seatAddress = seat.address.replaceAll(".", "\\.");
      await cluster.at(0).waitForLog(new RegExp(`link to peer ${seatAddress} up`));
      await seat.kill("SIGKILL");
      const { Member } = await import("./_cluster.ts");
      const secured = new Member(1, seat.port, await Deno.makeTempDir({ prefix: "lockd-half-" }), [
        "--peers",
        cluster.peers,
        "--peer-secret-file",
        `${dir}/cluster.secret`,
      ], {});
      const plain = cluster.at(0);
      try {
        const mark = plain.logMark();
        await secured.start();
        // Both say what is wrong...
        await plain.waitForLog(/this node has no --peer-secret-file/, { since: mark });
        await plain.waitForLog(/closed within 1 s of opening.*--peer-secret-file/, { since: mark });
        await secured.waitForLog(/offered no proof of the cluster secret/);
        // ...and then hold their peace: about 30 redials in 3 s, a few lines at most.
        const [plainMark, securedMark] = [plain.logMark(), secured.logMark()];
        await new Promise((resolve) => setTimeout(resolve, 3000));
        const lines = (text: string) =>
          text.split("\n").filter((l) => /peer-refused|link-up|link-down|link-brief/.test(l));
        const fromPlain = lines(plain.stderr().slice(-(plain.logMark() - plainMark)));
        const fromSecured = lines(secured.stderr().slice(-(secured.logMark() - securedMark)));
        assert.ok(
          fromPlain.length <= 4,
          `node 0 logged ${fromPlain.length}:\n${fromPlain.join("\n")}`,
        );
        assert.ok(
          fromSecured.length <= 4,
          `node 1 logged ${fromSecured.length}:\n${fromSecured.join("\n")}`,
        );
        // Both serve as active: lockd status names the split brain and exits 1.
        await secured.waitForLog(/is active/, { timeoutMs: 10_000 });
        const status = await runLockd(["status", "--servers", cluster.addresses.join(",")]);
        assert.equal(status.code, 1, status.stderr);
        assert.match(status.stderr, /lockd status: 2 nodes are active \(.*\): a split brain/);
      } finally {
        await secured.dispose();
        await Deno.remove(secured.dataDir, { recursive: true });
      }
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a TLS cluster without --tls-ca says why its peer handshakes fail", async () => {
  const pki = await testPki();
  // The nodes' certificates come from a private CA that they are not told to trust.
  const args = ["--tls-cert", pki.certFile, "--tls-key", pki.keyFile];
  await Cluster.run(2, async (cluster) => {
    const peer = cluster.at(1).address.replaceAll(".", "\\.");
    await cluster.at(0).waitForLog(
      new RegExp(
        `TLS handshake with peer ${peer} failed: .*UnknownIssuer.*--tls-ca.*event=link-tls-failed`,
      ),
    );
  }, { args, connect: (port) => LineClient.connectTls(port, [pki.caPem]) });
});
