/**
 * An acquire given up (its signal aborted) while the client still waits for a connection is
 * never sent (docs/client.md, "Acquires and waits"): it would otherwise queue on the server for a
 * caller who left, take its turn in the FIFO queue and burn a grant and a token.
 */

import assert from "node:assert/strict";
import { LockClient } from "../mod.ts";
import { connectTcp } from "../client/tcp.ts";
import type { Connect } from "../client/transport.ts";
import { delay } from "./_fake_server.ts";
import { waitFor, withServer } from "./_helpers.ts";

Deno.test("LockClient never sends an acquire aborted while its connection was still coming up", async () => {
  await withServer({}, async (server) => {
    const address = `127.0.0.1:${server.port}`;
    const holder = new LockClient(address);
    const slow: Connect = async (to, handlers, signal) => {
      await delay(300);
      return connectTcp(to, handlers, signal);
    };
    const late = new LockClient(address, { connect: slow });
    try {
      const held = await holder.acquire("abort:connecting", { lease: 30 });
      const controller = new AbortController();
      const acquiring = late.acquire("abort:connecting", { wait: 0, signal: controller.signal });
      setTimeout(() => controller.abort(), 50);
      await assert.rejects(acquiring, { name: "AbortError" });
      await waitFor(() => late.connected === 2, "the slow client's connections up");
      // Both of its connections have said hello and probed: an acquire sent with them would
      // be queued by now.
      assert.equal((await holder.inspect("abort:connecting")).waiters, 0);
      await held.release();
      assert.equal((await holder.inspect("abort:connecting")).held, false);
    } finally {
      await late.close();
      await holder.close();
    }
  });
});
