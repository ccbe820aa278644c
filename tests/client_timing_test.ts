/**
 * `LockClient` timing against a scripted fake server: timers far longer than `setTimeout`
 * can wait (2^31-1 ms) neither fire at once nor spin, and the caller's wait bounds the whole
 * acquire even when no node can queue it (docs/client.md, "Acquires and waits").
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  LockClient,
  type LockClientOptions,
  LockTimeoutError,
  LockUnavailableError,
} from "../mod.ts";
import { delay, FakeServer, lockServer, waitUntil } from "./_fake_server.ts";
import { freePorts } from "./_net.ts";

const DAY_S = 86_400;

async function readyClient(
  servers: string | string[],
  options: LockClientOptions = {},
): Promise<LockClient> {
  const client = new LockClient(servers, { reconnectIntervalMs: 50, ...options });
  await waitUntil(() => client.connected === client.connections, "every connection up");
  return client;
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  assert.fail("expected a rejection");
}

Deno.test("LockClient queues an acquire with a 30-day wait instead of timing it out at once", async () => {
  await using server = await FakeServer.start();
  await using client = await readyClient(server.address);
  let settled = false;
  const acquiring = client.acquire("k", { wait: 30 * DAY_S }).finally(() => settled = true);
  const request = await server.take("A k");
  assert.equal(request.line, `A k 30 ${30 * DAY_S}`);
  await delay(300);
  assert.equal(settled, false, "a 30-day wait must not end within 300 ms");
  await request.reply("A", 11);
  const lock = await acquiring;
  assert.equal(lock.token, 11n);
  server.handler = lockServer();
  await lock.release();
});

Deno.test("LockClient keeps a 30-day lease without firing its signal, renewal or expiry", async () => {
  await using server = await FakeServer.start();
  server.handler = lockServer({ firstToken: 5n });
  await using client = await readyClient(server.address);
  const lock = await client.acquire("k", { lease: 30 * DAY_S, autoExtend: true });
  await delay(300);
  assert.equal(lock.signal.aborted, false, "the signal fired long before the lease ends");
  assert.equal(server.count("X k "), 0, "renewed long before a third of the lease");
  await lock.release();
});

Deno.test("LockClient with 30-day timers does not reconnect or probe in a tight loop", async () => {
  await using server = await FakeServer.start();
  server.handler = lockServer();
  await using client = await readyClient(server.address, {
    reconnectIntervalMs: 30 * DAY_S * 1000,
    staleConnectionMs: 30 * DAY_S * 1000,
  });
  const accepted = server.accepted;
  for (const conn of server.open) await conn.close();
  await waitUntil(() => client.connected === 0, "both connections seen closed");
  await delay(300);
  assert.equal(server.accepted, accepted, "reconnected at once despite a 30-day interval");
});

Deno.test("LockClient bounds acquire(k, { wait: 1 }) by the wait when no node is active", async () => {
  await using server = await FakeServer.start();
  // A standby waiting for a dead higher-priority peer: every request is refused for now.
  server.handler = (r) => void r.reply("E", "no active node");
  await using client = await readyClient(server.address);
  const started = performance.now();
  const error = await rejection(client.acquire("k", { wait: 1 }));
  const elapsed = performance.now() - started;
  assert.ok(error instanceof LockUnavailableError, String(error));
  assert.ok(elapsed >= 900 && elapsed < 1700, `rejected after ${Math.round(elapsed)} ms`);
  assert.ok(server.count("A k ") >= 3, "retried within the wait");
});

Deno.test("LockClient bounds an acquire's wait when the node it is sent to is down", async () => {
  await using standby = await FakeServer.start();
  const [dead] = freePorts(1);
  // Redirected to the active that just died: its connections are refused.
  standby.handler = (r) => void r.reply("M", `127.0.0.1:${dead}`);
  await using client = await readyClient(standby.address);
  const started = performance.now();
  const error = await rejection(client.acquire("k", { wait: 0.5 }));
  const elapsed = performance.now() - started;
  assert.ok(error instanceof LockUnavailableError, String(error));
  assert.ok(elapsed < 1200, `rejected after ${Math.round(elapsed)} ms`);
});

Deno.test("LockClient still answers a queued acquire's T by its wait (the server keeps it queued)", async () => {
  await using server = await FakeServer.start();
  await using client = await readyClient(server.address);
  const started = performance.now();
  const acquiring = client.acquire("k", { wait: 0.4 });
  const request = await server.take("A k");
  // The server answers T when the wait is over, as a lockd node does.
  setTimeout(() => void request.reply("T"), 400);
  const error = await rejection(acquiring);
  assert.ok(error instanceof LockTimeoutError, String(error));
  assert.ok(performance.now() - started < 1000);
});
