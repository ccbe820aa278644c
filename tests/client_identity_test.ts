/**
 * A client's identity (docs/protocol.md, "Sessions and authentication"): its session id has
 * 128 random bits and appears nowhere but in its hellos; its default name, which inspection
 * shows to others, is drawn apart from it.
 */

import assert from "node:assert/strict";
import { defaultClientName, newSessionId } from "../client/identity.ts";
import { FakeServer } from "./_fake_server.ts";
import { readyClient } from "./_fake_client.ts";

Deno.test("session ids are 32 hex digits, every one of them random", () => {
  const ids = Array.from({ length: 64 }, () => newSessionId());
  for (const id of ids) assert.match(id, /^[0-9a-f]{32}$/);
  // A UUID's version and variant digits would take one and four values: 64 draws of a
  // random digit show far more (four or fewer has a chance below 2^-100).
  for (let i = 0; i < 32; i++) {
    const seen = new Set(ids.map((id) => id[i]));
    assert.ok(seen.size > 4, `digit ${i} took only ${[...seen].join(", ")}`);
  }
  assert.equal(new Set(ids).size, ids.length);
});

Deno.test("a LockClient's hellos carry one session on both connections, and a name not taken from it", async () => {
  await using server = await FakeServer.start();
  await using client = await readyClient(server.address);
  await server.until(() =>
    server.connections.every((c) => c.hellos.length === 1) && server.accepted === 2
  );
  const hellos = server.connections.map((c) => c.hellos[0].split(" "));
  const [, , session, name] = hellos[0];
  assert.match(session, /^[0-9a-f]{32}$/);
  assert.equal(hellos[1][2], session);
  assert.match(name, /^client-[0-9a-f]{8}$/);
  assert.ok(!session.includes(name.slice("client-".length)), "the name shows part of the session");
  assert.equal(client.connections, 2);
  assert.match(defaultClientName(), /^client-[0-9a-f]{8}$/);
});
