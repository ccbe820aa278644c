/**
 * The peer handshake's proofs (docs/security.md, "Peers"): both ends sign the link's nonces
 * and both addresses, so a proof made for one link, side or pair of nodes fails for any other,
 * and a process listening at a listed address cannot relay a handshake between two nodes.
 * The pure handshake first, then the relay against two real nodes.
 */

import assert from "node:assert/strict";
import {
  AcceptorHandshake,
  acceptorProof,
  dialerProof,
  newNonce,
  sameProof,
} from "../server/cluster/peer_auth.ts";
import type { LineHandler } from "../server/line_socket.ts";
import { type ServerProcess, startServer, waitFor } from "./_helpers.ts";
import { freePort } from "./_client_fixture.ts";

const SECRET = "peer-auth-Secret-7e1f04c2a9";
const A = "10.0.0.1:7321", B = "10.0.0.2:7321", C = "10.0.0.3:7321";

/** An acceptor's side of the handshake at `self`, for a dialer claiming `dialer`. */
function acceptor(self: string, dialer: string, dialerNonce: string) {
  const sent: string[] = [];
  const events: string[] = [];
  const peer: LineHandler = { line: (t) => events.push(`line ${t}`), closed() {} };
  const handshake = new AcceptorHandshake({
    secret: SECRET,
    dialer,
    self,
    dialerNonce,
    remote: "test",
    send: (line) => sent.push(line),
    close: () => events.push("closed"),
    refused: (why) => events.push(`refused ${why}`),
    accepted: () => {
      events.push("accepted");
      return peer;
    },
  });
  const [, nonce, proof] = sent[0].split(" ");
  return { handshake, nonce, proof, events };
}

Deno.test("a genuine handshake passes both checks", () => {
  const dialerNonce = newNonce();
  const c = acceptor(C, A, dialerNonce);
  const ends = { dialer: A, acceptor: C };
  assert.ok(sameProof(acceptorProof(SECRET, dialerNonce, c.nonce, ends), c.proof));
  c.handshake.line(`PEERPROOF ${dialerProof(SECRET, dialerNonce, c.nonce, ends)}`);
  c.handshake.line("HB x");
  assert.deepEqual(c.events, ["accepted", "line HB x"]);
});

Deno.test("a handshake relayed to another node fails at the dialer and at the acceptor", () => {
  // A dials C's address; whoever listens there passes A's line to B and B's answer back.
  const dialerNonce = newNonce();
  const b = acceptor(B, A, dialerNonce);
  const meant = { dialer: A, acceptor: C };
  // A checks that the answer comes from the node it dialled: B's proof is for A → B.
  assert.ok(!sameProof(acceptorProof(SECRET, dialerNonce, b.nonce, meant), b.proof));
  // Had A answered anyway, its proof names C, and B refuses it.
  b.handshake.line(`PEERPROOF ${dialerProof(SECRET, dialerNonce, b.nonce, meant)}`);
  assert.deepEqual(b.events, [`refused ${A} did not prove the cluster secret`, "closed"]);
});

Deno.test("a proof is bound to its side, its nonces, its addresses and the secret", () => {
  const n1 = newNonce(), n2 = newNonce();
  const ends = { dialer: A, acceptor: B };
  const base = dialerProof(SECRET, n1, n2, ends);
  assert.match(base, /^[0-9a-f]{64}$/);
  for (
    const other of [
      acceptorProof(SECRET, n1, n2, ends),
      dialerProof(SECRET, n2, n1, ends),
      dialerProof(SECRET, n1, newNonce(), ends),
      dialerProof(SECRET, n1, n2, { dialer: B, acceptor: A }),
      dialerProof(SECRET, n1, n2, { dialer: A, acceptor: C }),
      dialerProof(SECRET + "x", n1, n2, ends),
    ]
  ) assert.ok(!sameProof(base, other));
});

/** Reads lines from `conn` as they come. */
function lines(conn: Deno.Conn): () => Promise<string | null> {
  const decoder = new TextDecoder();
  const chunk = new Uint8Array(4096);
  let buffer = "";
  return async () => {
    for (;;) {
      const nl = buffer.indexOf("\n");
      if (nl >= 0) {
        const line = buffer.slice(0, nl);
        buffer = buffer.slice(nl + 1);
        return line;
      }
      const n = await conn.read(chunk).catch(() => null);
      if (n === null) return null;
      buffer += decoder.decode(chunk.subarray(0, n), { stream: true });
    }
  };
}

Deno.test("a process at a listed address cannot relay a node's handshake to another node", async () => {
  const [pa, pb, pc] = [freePort(), freePort(), freePort()];
  const dir = await Deno.makeTempDir({ prefix: "lockd-relay-" });
  await Deno.writeTextFile(`${dir}/secret`, SECRET + "\n");
  const peers = `127.0.0.1:${pa},127.0.0.1:${pb},127.0.0.1:${pc}`;
  const args = ["--peers", peers, "--peer-secret-file", `${dir}/secret`];
  // C is down; its port is the relay's, which never saw the secret.
  const relay = Deno.listen({ hostname: "127.0.0.1", port: pc });
  const nodes: ServerProcess[] = [];
  const write = (conn: Deno.Conn, line: string) =>
    conn.write(new TextEncoder().encode(line + "\n"));
  const closeQuietly = (conn: Deno.Conn) => {
    try {
      conn.close();
    } catch {
      // Closed already.
    }
  };
  try {
    nodes.push(await startServer({ listen: `127.0.0.1:${pb}`, args }));
    // The relay passes A's handshake with "C" to B and B's answer back, and reports what A
    // sends after it (a genuine dialer would send its proof).
    const relayed = (async () => {
      for (;;) {
        const fromA = await relay.accept();
        const readA = lines(fromA);
        const hello = await readA();
        if (hello === null || !hello.startsWith(`PEER 5 127.0.0.1:${pa} `)) {
          closeQuietly(fromA); // B's dial to "C"
          continue;
        }
        const toB = await Deno.connect({ hostname: "127.0.0.1", port: pb });
        await write(toB, hello);
        const challenge = await lines(toB)();
        assert.match(challenge ?? "", /^PEERAUTH /);
        await write(fromA, challenge!);
        // A genuine dialer answers at once; this one should close without a word.
        let timer: ReturnType<typeof setTimeout> | undefined;
        const next = await Promise.race([
          readA(),
          new Promise<string>((resolve) => timer = setTimeout(resolve, 5000, "(still open)")),
        ]);
        clearTimeout(timer);
        closeQuietly(fromA);
        closeQuietly(toB);
        return next;
      }
    })();
    nodes.push(await startServer({ listen: `127.0.0.1:${pa}`, args }));
    // A sees that the answer is not C's: it sends no proof and closes.
    assert.equal(await relayed, null);
    await waitFor(
      () =>
        new RegExp(`peer 127\\.0\\.0\\.1:${pc} did not prove the cluster secret`)
          .test(nodes[1].stderr()),
      "A's refusal",
    );
  } finally {
    relay.close();
    for (const node of nodes) {
      await node.stop();
      await Deno.remove(node.dataDir, { recursive: true });
    }
    await Deno.remove(dir, { recursive: true });
  }
});
