/**
 * SIGUSR1 and a lockd node (docs/security.md, "SIGUSR1"): the Deno runtime opens its
 * inspector when it gets one, which lockd cannot prevent, so the node says so in its log
 * (`event=sigusr1`, an ERROR) and goes on serving. The node is stopped right after, which
 * closes the inspector it opened.
 */

import assert from "node:assert/strict";
import { LineClient, startServer, waitFor } from "./_helpers.ts";

Deno.test({
  name: "a node that gets SIGUSR1 logs that the runtime opened its inspector, and keeps serving",
  ignore: Deno.build.os === "windows", // no SIGUSR1 there
  fn: async () => {
    const server = await startServer();
    try {
      server.child.kill("SIGUSR1");
      await waitFor(() => server.stderr().includes("event=sigusr1"), "the SIGUSR1 warning");
      assert.match(
        server.stderr(),
        /ERROR +got SIGUSR1: .*inspector on 127\.0\.0\.1:9229.*restart this node/,
      );
      const c = await LineClient.connect(server.port);
      assert.match((await c.request("A u1 5 0"))!, /^A u1 A \d+$/);
      await c.close();
    } finally {
      assert.equal(await server.stop(), 0, server.stderr());
      await Deno.remove(server.dataDir, { recursive: true });
    }
  },
});
