/**
 * Inspection of a real lockd node (docs/protocol.md, "Inspection"; docs/client.md,
 * "Inspection" and "Locks across processes"; issue 13): `I`, `S` and `L` over raw TCP
 * against a `server/main.ts` process, the same through `LockClient` (`inspect`, `locks`,
 * `status`), release and extend by token and `Lock.detach()`, credential prefixes with
 * `--auth-file`, and `LockServer`'s methods for the HTTP layer in-process.
 *
 * @module
 */

import assert from "node:assert/strict";
import { LockClient, LockRejectedError } from "../mod.ts";
import {
  keyStateOf,
  locksPageOf,
  type NodeStatus,
  nodeStatusOf,
  parseReply,
} from "../client/codec.ts";
import { LockServer } from "../server/server.ts";
import { Credentials } from "../server/auth.ts";
import { LineClient, startServer, withServer } from "./_helpers.ts";

const SILENT = { debug() {}, info() {}, warn() {}, error() {} };

async function statusOf(client: LineClient): Promise<NodeStatus> {
  const status = nodeStatusOf(parseReply((await client.request("S -"))!)!);
  assert.ok(status, "S - answers a status");
  return status;
}

Deno.test("a node answers I with holder token, name, lease left and waiters, and changes nothing", async () => {
  await withServer({}, async (server, clients) => {
    const holder = await clients.connect();
    assert.equal(await holder.request("HELLO 1 - billing-7@host:42"), "HELLO - OK");
    assert.equal(await holder.request("A orders:17 30 0"), "A orders:17 A 1");
    const waiter = await clients.connect();
    await waiter.send("A orders:17 30 0");
    const watcher = await clients.connect();
    // The waiter's acquire is queued once I reports it: ask until it does.
    let state = keyStateOf(parseReply((await watcher.request("I orders:17"))!)!);
    for (let i = 0; i < 100 && state?.waiters === 0; i++) {
      state = keyStateOf(parseReply((await watcher.request("I orders:17"))!)!);
    }
    assert.equal(state?.held, true);
    assert.equal(state?.token, 1n);
    assert.equal(state?.holder, "billing-7@host:42");
    assert.equal(state?.waiters, 1);
    assert.ok(state!.leaseLeft! > 29 && state!.leaseLeft! <= 30);
    assert.equal(await watcher.request("I orders:18"), "I orders:18 F");
    assert.equal(await watcher.request("R orders:17 1"), "R orders:17 R");
    assert.equal(await waiter.readLine(), "A orders:17 A 2", "the waiter got it: I queued nothing");
    const anonymous = keyStateOf(parseReply((await watcher.request("I orders:17"))!)!);
    assert.equal(anonymous?.holder, undefined, "a holder without hello has no name");
    assert.equal(await watcher.request("I"), "I - E missing key; usage: I <key>");
    const status = await statusOf(watcher);
    assert.equal(status.counts.grants, 2);
    assert.equal(status.counts.releases, 1);
    assert.equal(status.counts.rejections.bad_request, 1);
    assert.equal(status.role, "active");
    assert.equal(status.address, server.address);
    assert.equal(status.holders, 1);
    assert.equal(status.connections, 3);
  });
});

Deno.test("L pages held keys in key order under the reply limit, continuing after a key", async () => {
  await withServer({}, async (_server, clients) => {
    const c = await clients.connect();
    // 60 keys of 200 bytes: about 280 bytes an entry, so a page of 1000 stops near 26.
    const keys = Array.from({ length: 60 }, (_, i) => `big:${String(i).padStart(2, "0")}`)
      .map((k) => k + "x".repeat(200 - k.length));
    await c.write(keys.map((k) => `A ${k} 30 0\n`).join(""));
    await c.readLines(60);
    await c.send("A other 30 0");
    await c.readLine();
    const seen: string[] = [];
    let after = "";
    for (let pages = 0; pages < 10; pages++) {
      const line = (await c.request(`L big: 1000${after}`))!;
      assert.ok(new TextEncoder().encode(line).length < 7600, `${line.length} bytes`);
      const page = locksPageOf(parseReply(line)!)!;
      seen.push(...page.locks.map((l) => l.key));
      if (!page.more) break;
      assert.ok(page.locks.length > 0);
      after = ` ${page.locks.at(-1)!.key}`;
    }
    assert.deepEqual(seen, keys, "every key once, in order, across pages");
    const one = locksPageOf(parseReply((await c.request("L - 1"))!)!)!;
    assert.equal(one.locks.length, 1);
    assert.equal(one.more, true);
    assert.equal(await c.request("L - 1001"), "L - E limit must be a whole number from 1 to 1000");
  });
});

Deno.test("LockClient inspects, lists and reports status; release and extend go by token", async () => {
  await withServer({}, async (server) => {
    const a = new LockClient(server.address, { name: "script-a" });
    const b = new LockClient(server.address, { name: "script-b" });
    try {
      const lock = await a.acquire("deploy:web", { lease: 5 });
      await a.acquire("deploy:db", { lease: 5 });
      assert.deepEqual(
        { ...(await b.inspect("deploy:web")), leaseLeft: undefined },
        {
          key: "deploy:web",
          held: true,
          token: lock.token,
          holder: "script-a",
          leaseLeft: undefined,
          waiters: 0,
        },
      );
      assert.deepEqual(await b.inspect("deploy:none"), {
        key: "deploy:none",
        held: false,
        waiters: 0,
      });
      assert.deepEqual((await b.locks({ prefix: "deploy:" })).map((l) => l.key), [
        "deploy:db",
        "deploy:web",
      ]);
      assert.equal((await b.locks({ limit: 1 })).length, 1);
      await assert.rejects(() => b.locks({ limit: 0 }), TypeError);
      await assert.rejects(() => b.inspect("bad key"), TypeError);
      const [report] = await b.status();
      assert.equal(report.address, server.address);
      assert.equal(report.status?.holders, 2);
      assert.equal(report.error, undefined);
      // Another process extends and releases a lock it only knows by key and token.
      lock.detach();
      assert.equal(await b.extend("deploy:web", lock.token, 60), true);
      assert.ok((await b.inspect("deploy:web")).leaseLeft! > 55);
      await a.close(); // releases deploy:db, not the detached deploy:web
      assert.equal((await b.inspect("deploy:db")).held, false);
      assert.equal((await b.inspect("deploy:web")).held, true);
      assert.equal(await b.release("deploy:web", lock.token), true);
      assert.equal(await b.release("deploy:web", lock.token), false);
      assert.equal(await b.extend("deploy:web", lock.token, 1), false);
      await assert.rejects(() => b.release("deploy:web", 0n), TypeError);
      await assert.rejects(() => b.extend("deploy:web", 1n, 0), TypeError);
    } finally {
      await a.close();
      await b.close();
    }
  });
});

Deno.test('LockClient.locks({ prefix: "-" }) lists only the keys starting with -, across pages', async () => {
  await withServer({}, async (server) => {
    const client = new LockClient(server.address);
    try {
      // 30 keys of 200 bytes under "-": more than one page (a page stops near 26 of them).
      const long = Array.from({ length: 30 }, (_, i) => `-${String(i).padStart(2, "0")}`)
        .map((k) => k + "x".repeat(200 - k.length));
      const dash = ["-", "--", "-a", ...long].sort();
      // Around them: keys just before "-" (the greatest one a key can be too) and after.
      const around = [",", ",z", "," + "\uffff".repeat(83), ".", "a", "\u00e9-", "x-"];
      const holding = [];
      for (const key of [...around, ...dash]) holding.push(await client.acquire(key));
      const all = (await client.locks()).map((l) => l.key);
      assert.equal(all.length, dash.length + around.length, "without a prefix: every key");
      const listed = await client.locks({ prefix: "-" });
      assert.deepEqual(listed.map((l) => l.key), dash);
      assert.deepEqual(listed.map((l) => l.held), dash.map(() => true));
      assert.deepEqual((await client.locks({ prefix: "-", limit: 2 })).map((l) => l.key), [
        "-",
        "--",
      ]);
      assert.deepEqual((await client.locks({ prefix: "--" })).map((l) => l.key), ["--"]);
      await holding.find((l) => l.key === "-")!.release();
      assert.deepEqual((await client.locks({ prefix: "-", limit: 2 })).map((l) => l.key), [
        "--",
        "-00" + "x".repeat(197),
      ]);
      await Promise.all(holding.filter((l) => l.key !== "-").map((l) => l.release()));
      assert.deepEqual(await client.locks({ prefix: "-" }), []);
    } finally {
      await client.close();
    }
  });
});

Deno.test("LockClient.status() reports a node it cannot reach with an error, never rejecting", async () => {
  await withServer({}, async (server) => {
    const probe = await Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const dead = `127.0.0.1:${(probe.addr as Deno.NetAddr).port}`;
    probe.close();
    const client = new LockClient([server.address, dead], { connectTimeoutMs: 500 });
    try {
      const results = await client.status();
      assert.deepEqual(results.map((r) => r.address), [server.address, dead]);
      assert.equal(results[0].status?.role, "active");
      assert.equal(results[1].status, undefined);
      assert.match(results[1].error ?? "", /./);
    } finally {
      await client.close();
    }
  });
});

Deno.test("with --auth-file, inspection needs a hello and I and L stay under the credential's prefix", async () => {
  const dir = await Deno.makeTempDir({ prefix: "lockd-inspect-auth-" });
  const secret = "billing-Secret-0f3a9c71e2";
  await Deno.writeTextFile(
    `${dir}/clients.auth`,
    `billing ${secret} billing:\nadmin ${secret} *\n`,
  );
  const server = await startServer({ args: ["--auth-file", `${dir}/clients.auth`] });
  const billing = new LockClient(server.address, { auth: { name: "billing", secret } });
  const admin = new LockClient(server.address, { auth: { name: "admin", secret } });
  try {
    const raw = await LineClient.connect(server.port);
    assert.equal(await raw.request("S -"), "S - E authentication required");
    await raw.close();
    await billing.acquire("billing:1");
    await admin.acquire("reports:1");
    await assert.rejects(() => billing.inspect("reports:1"), LockRejectedError);
    await assert.rejects(() => billing.locks({ prefix: "reports:" }), LockRejectedError);
    assert.deepEqual((await billing.locks()).map((l) => l.key), ["billing:1"]);
    assert.deepEqual((await admin.locks()).map((l) => l.key), ["billing:1", "reports:1"]);
    // Listing "-" goes by `after` over L -, which stays under the credential's prefix.
    assert.deepEqual(
      await billing.locks({ prefix: "-" }),
      [],
      "no key under billing: starts with -",
    );
    const [report] = await billing.status();
    assert.equal(report.status?.holders, 2, "S is not confined to the prefix");
    assert.equal(report.status?.counts.rejections.prefix, 2);
    assert.equal(report.status?.counts.rejections.auth, 1);
  } finally {
    await billing.close();
    await admin.close();
    await server.stop();
    await Deno.remove(server.dataDir, { recursive: true });
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("LockServer gives the HTTP layer status, locks, metrics and readiness", async () => {
  const dataDir = await Deno.makeTempDir({ prefix: "lockd-inspect-" });
  const server = await LockServer.start({
    port: 0,
    dataDir,
    log: SILENT,
    credentials: () => Credentials.parse(""),
  });
  try {
    assert.equal(server.isReady(), true);
    const c = await LineClient.connect(server.addr.port);
    assert.match((await c.request("S -"))!, / E authentication required$/);
    await c.close();
    assert.deepEqual(server.locks("", 10), { locks: [], more: false });
    assert.throws(() => server.locks("", 0), RangeError);
    assert.equal(server.status().counts.rejections.auth, 1);
    const text = server.metricsText();
    assert.match(text, /^lockd_rejections_total\{reason="auth"\} 1$/m);
    assert.match(text, /^lockd_role\{role="active"\} 1$/m);
    assert.match(text, /^lockd_request_duration_seconds_count \d+$/m);
  } finally {
    await server.shutdown();
    await Deno.remove(dataDir, { recursive: true });
  }
  assert.equal(server.isReady(), false, "not ready once stopped");
  assert.equal(server.status().role, "leaving");
});
