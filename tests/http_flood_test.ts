/**
 * A flood of connections on `--http` or `--bridge` that runs the node out of file
 * descriptors costs that listener a pause, never the node: Deno's HTTP server stops for good
 * when an accept fails, and lockd listens again (serveLasting in client/bridge/deno.ts). Before,
 * the failure was an uncaught rejection that ended the process and its locks.
 */

import assert from "node:assert/strict";
import { grantOf, LineClient, startServer, waitFor } from "./_helpers.ts";

/** Opens connections to `port` until one fails (the listener stopped) or `max` are open. */
async function flood(port: number, max: number): Promise<Deno.Conn[]> {
  const open: Deno.Conn[] = [];
  for (let i = 0; i < max; i++) {
    try {
      open.push(await Deno.connect({ hostname: "127.0.0.1", port }));
    } catch {
      break;
    }
  }
  return open;
}

/** Whether a GET of `url` gets any HTTP answer. */
async function answers(url: string): Promise<boolean> {
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(2000) });
    await response.body?.cancel();
    return true;
  } catch {
    return false;
  }
}

Deno.test("a connection flood on --http or --bridge that exhausts file descriptors does not stop the node", async () => {
  const server = await startServer({
    args: ["--http", "127.0.0.1:0", "--bridge", "127.0.0.1:0"],
    fdLimit: 160,
  });
  try {
    const ports = /bridge on ws:\/\/127\.0\.0\.1:(\d+)\/, http on http:\/\/127\.0\.0\.1:(\d+)\//
      .exec(server.ready);
    assert.ok(ports, server.ready);
    const [bridgePort, httpPort] = [Number(ports[1]), Number(ports[2])];
    const holder = await LineClient.connect(server.port);
    try {
      const token = grantOf(await holder.request("A precious 120 0"), "precious");
      const count = (pattern: RegExp) => server.stderr().split(pattern).length - 1;
      // Whichever listener's accept fails first stops (the runtime's accepts share the limit).
      // Stops are told at most once every 10 s, and each told stop's end once it listens again.
      const stops = () => count(/stopped accepting connections/);
      const relistens = () => count(/(?:--http on 127\.0\.0\.1:\d+|lockd bridge): listening again/);
      for (const port of [httpPort, bridgePort]) {
        const conns = await flood(port, 400);
        assert.ok(conns.length < 400, `the flood of ${port} ran the node out of descriptors`);
        for (const conn of conns) conn.close();
        // Back within the doubling wait (1 s, then 2 s for a second stop soon after).
        for (const each of [httpPort, bridgePort]) {
          await waitFor(
            () => answers(`http://127.0.0.1:${each}/healthz`),
            `port ${each} to answer again`,
            10_000,
            100,
          );
        }
      }
      assert.ok(stops() >= 1, server.stderr());
      await waitFor(() => relistens() === stops(), "each told stop's end");
      assert.match((await holder.request("I precious"))!, new RegExp(`^I precious I ${token} `));
    } finally {
      await holder.close();
    }
  } finally {
    await server.stop();
    await Deno.remove(server.dataDir, { recursive: true }).catch(() => {});
  }
});
