/**
 * PeerLink's own TLS handshake (server/cluster/peer_link.ts): stop() ends a dial stuck in
 * its handshake (a frozen peer whose kernel accepted the connection) quietly, and only a
 * TLS failure (a certificate it does not trust) is logged, never a peer that hung up.
 */

import assert from "node:assert/strict";
import { Batch } from "../server/batch.ts";
import { PeerLink } from "../server/cluster/peer_link.ts";
import { capturingLogger } from "./_logger.ts";
import { waitFor } from "./_helpers.ts";

Deno.test("PeerLink.stop() during its TLS handshake, then the peer hanging up, logs nothing", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  const held: Deno.Conn[] = [];
  const accepting = (async () => {
    for await (const conn of listener) held.push(conn);
  })();
  const log = capturingLogger();
  const link = new PeerLink(`127.0.0.1:${port}`, { hostname: "127.0.0.1", port }, {
    self: "127.0.0.1:1",
    retryMs: 200,
    connectTimeoutMs: 3000,
    batch: new Batch(),
    log,
    tls: { caCerts: [] },
    onUp: () => {},
    onDown: () => {},
  });
  try {
    link.start();
    await waitFor(() => held.length === 1, "the dial to reach the peer");
    await link.stop();
    for (const conn of held) conn.close(); // The peer hangs up after the stop.
    // A dial that retried, or a line logged, would show within a retry interval.
    await new Promise((resolve) => setTimeout(resolve, 400));
    assert.equal(held.length, 1, "no dial after stop()");
    assert.deepEqual(log.lines.filter((l) => !l.startsWith("debug")), []);
  } finally {
    listener.close();
    await accepting;
  }
});
