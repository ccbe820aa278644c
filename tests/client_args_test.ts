/**
 * `LockClient` argument checks (docs/client.md): invalid keys, leases and waits are refused
 * with `TypeError` before anything is sent, and leases and waits go out as plain decimal
 * seconds. Against a scripted fake server (tests/_fake_server.ts).
 *
 * Op and resource sanitizers are on (deno.json): each test also checks that the client
 * leaves no timer, socket or pending op behind.
 */

import assert from "node:assert/strict";
import { LockClient, LockRejectedError } from "../mod.ts";
import { delay, FakeServer, lockServer } from "./_fake_server.ts";
import { readyClient, rejection } from "./_fake_client.ts";

Deno.test("LockClient rejects an invalid key, lease or wait with TypeError and sends nothing", async () => {
  await using server = await FakeServer.start();
  await using client = await readyClient(server.address);
  const bad: [string, Record<string, unknown>][] = [
    ["", {}],
    ["a b", {}],
    ["a\nb", {}],
    ["tab\tkey", {}],
    ["x".repeat(251), {}],
    ["é".repeat(126), {}], // 252 bytes
    ["k", { lease: 0 }],
    ["k", { lease: -1 }],
    ["k", { lease: NaN }],
    ["k", { lease: Infinity }],
    ["k", { lease: "30" }],
    ["k", { wait: -1 }],
    ["k", { wait: NaN }],
  ];
  for (const [key, options] of bad) {
    const error = await rejection(client.acquire(key, options));
    assert.ok(error instanceof TypeError, `${JSON.stringify(key)} ${String(options.lease)}`);
  }
  assert.ok(await rejection(client.tryAcquire("a b")) instanceof TypeError);
  assert.ok(await rejection(client.withLock("a b", () => {})) instanceof TypeError);
  // The longest valid key is fine.
  server.handler = lockServer();
  const lock = await client.acquire("é".repeat(125));
  const sent = server.count();
  assert.ok(await rejection(lock.extend(0)) instanceof TypeError);
  assert.ok(await rejection(lock.extend(-1)) instanceof TypeError);
  await delay(30);
  assert.equal(server.count(), sent, "nothing sent for an invalid extend");
  assert.equal(server.count("A "), 1, "only the valid acquire was sent");
  await lock.release();
  // wait: Infinity is "no limit", which the protocol spells 0.
  const forever = await client.acquire("forever", { wait: Infinity });
  assert.equal(server.log.find((r) => r.key === "forever")?.line, "A forever 30 0");
  await forever.release();
});

Deno.test("LockClient writes leases and waits as plain decimal seconds, or refuses them", async () => {
  // docs/protocol.md: lease and wait match [0-9]+(\.[0-9]+)?; a huge number must not go out as "1e+21".
  await using server = await FakeServer.start();
  server.handler = (r) => void r.reply("E", "lease must be at most 86400 seconds");
  await using client = await readyClient(server.address);
  for (const options of [{ lease: 1e21 }, { wait: 1e21 }]) {
    const error = await rejection(client.acquire("k", options));
    assert.ok(error instanceof TypeError || error instanceof LockRejectedError, String(error));
  }
  for (const request of server.lines("A ")) {
    assert.match(request.line, /^A k [0-9]+(\.[0-9]+)? [0-9]+(\.[0-9]+)?$/);
  }
});

Deno.test("LockClient refuses a credential whose secret is missing, instead of sending 'undefined'", () => {
  // As from `secret: Deno.env.get("LOCKD_SECRET")!` with the variable unset.
  const secret = undefined as unknown as string;
  assert.throws(
    () => new LockClient("127.0.0.1:1", { auth: { name: "billing", secret } }),
    (error: unknown) => error instanceof TypeError && /secret must be strings?/.test(error.message),
  );
});

Deno.test("LockClient refuses addresses that are not strings with a TypeError that says so", () => {
  const bad: [unknown, RegExp][] = [
    [
      { servers: ["127.0.0.1:7321"] },
      /addresses first: a string or an array of strings, got an object/,
    ],
    [undefined, /got undefined/],
    [7321, /got a number/],
    [[], /at least one server address/],
    [[7321], /expected a string, got a number/],
    [["127.0.0.1:7321", null], /expected a string, got null/],
  ];
  for (const [servers, message] of bad) {
    // @ts-expect-error: what a JavaScript caller can pass
    assert.throws(() => new LockClient(servers), (error: Error) => {
      assert.ok(error instanceof TypeError, String(error));
      assert.match(error.message, message);
      return true;
    });
  }
  // Any iterable of strings is a list of addresses, as before: its addresses are parsed.
  const set = (...addresses: string[]) => new Set(addresses) as unknown as string[];
  assert.throws(() => new LockClient(set("no such:address")), /Invalid lockd address/);
  const client = new LockClient(set("127.0.0.1:1"), { connectTimeoutMs: 50 });
  return client.close();
});

Deno.test("LockClient takes null options as none, as acquire() does", async () => {
  // @ts-expect-error: what a JavaScript caller can pass
  const client = new LockClient("127.0.0.1:1", null);
  await client.close();
});
