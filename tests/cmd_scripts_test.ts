/**
 * Black-box tests of `lockd acquire`, `release`, `extend`, `status` and `locks` against one
 * real node (docs/cli.md): the round trip of a lock taken by one process and released by
 * another, and the tables and JSON of status and locks.
 */

import assert from "node:assert/strict";
import type { KeyInfo } from "../client/codec.ts";
import type { NodeStatusResult } from "../mod.ts";
import { freePorts } from "./_net.ts";
import { grantOf, withServer } from "./_helpers.ts";
import { runLockd } from "./_lockd.ts";

Deno.test("lockd acquire prints the token and leaves the lock held; release and extend act by token", async () => {
  await withServer({}, async (server, clients) => {
    const servers = ["--servers", server.address];
    const acquired = await runLockd(["acquire", "deploy", "--lease", "60", ...servers]);
    assert.equal(acquired.code, 0, acquired.stderr);
    assert.match(acquired.stdout, /^[1-9][0-9]*\n$/);
    assert.equal(acquired.stderr, "");
    const token = acquired.stdout.trim();
    // Held after the process exited (detached, not session-bound), with its lease.
    const other = await clients.connect();
    const info = (await other.request("I deploy"))!.split(" ");
    assert.equal(info[3], token);
    assert.ok(Number(info[4]) > 55, `lease left ${info[4]}`);
    assert.match(info[6], /^lockd-acquire@/);
    assert.equal(await other.request("A deploy 5 0.2"), "A deploy T");
    // Busy: the wait runs out (75).
    const busy = await runLockd(["acquire", "deploy", "--wait", "0.2", ...servers]);
    assert.equal(busy.code, 75, busy.stderr);
    assert.equal(busy.stdout, "");
    assert.match(busy.stderr, /^lockd acquire: .*deploy.*\n$/);

    const extended = await runLockd(["extend", "deploy", token, "600", ...servers]);
    assert.equal(extended.code, 0, extended.stderr);
    assert.equal(extended.stdout + extended.stderr, "");
    assert.ok(Number((await other.request("I deploy"))!.split(" ")[4]) > 590);

    const released = await runLockd(["release", "deploy", token, ...servers]);
    assert.equal(released.code, 0, released.stderr);
    assert.equal(released.stdout + released.stderr, "");
    assert.equal(await other.request("I deploy"), "I deploy F");

    // That token holds nothing now: 1, with a message.
    const again = await runLockd(["release", "deploy", token, ...servers]);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /^lockd release: "deploy" is not held with token \d+\n$/);
    const late = await runLockd(["extend", "deploy", token, "10", ...servers]);
    assert.equal(late.code, 1);
    assert.match(late.stderr, /^lockd extend: .*lost/);
    // A lock taken by another client can be released by its token.
    const theirs = grantOf(await other.request("A theirs 30 0"), "theirs");
    const freed = await runLockd(["release", "theirs", String(theirs), ...servers]);
    assert.equal(freed.code, 0, freed.stderr);
  });
});

Deno.test("lockd acquire, release and extend exit 69 with no server and 64 on bad usage", async () => {
  const [port] = freePorts(1);
  const servers = ["--servers", `127.0.0.1:${port}`];
  for (const args of [["acquire", "k"], ["release", "k", "1"], ["extend", "k", "1", "5"]]) {
    const out = await runLockd([...args, ...servers]);
    assert.equal(out.code, 69, `${args}: ${out.stderr}`);
    assert.match(out.stderr, new RegExp(`^lockd ${args[0]}: [^\\n]+\\n$`));
  }
  for (
    const args of [
      ["acquire"],
      ["acquire", "k", "--lease", "x"],
      ["release", "k"],
      ["release", "k", "01"],
      ["extend", "k", "1"],
      ["extend", "k", "1", "-5"],
      ["status", "--bogus"],
      ["locks", "--limit", "0"],
      ["status", "--servers", "not an address"],
    ]
  ) {
    const out = await runLockd(args);
    assert.equal(out.code, 64, `${args}: ${out.stderr}`);
    assert.equal(out.stdout, "");
    assert.match(out.stderr, new RegExp(`^lockd ${args[0]}: [^\\n]+\\n$`), args.join(" "));
  }
  // A bridge releases a lock when its connection closes and relays only that connection's
  // grants: refused before connecting (nothing listens on the port).
  for (const args of [["acquire", "k"], ["release", "k", "1"], ["extend", "k", "1", "5"]]) {
    const out = await runLockd([...args, "--servers", `127.0.0.1:1,ws://127.0.0.1:${port}/`]);
    assert.equal(out.code, 64, `${args}: ${out.stderr}`);
    assert.equal(out.stdout, "");
    assert.match(out.stderr, new RegExp(`^lockd ${args[0]}: needs lockd's own addresses .*bridge`));
  }
  for (const name of ["acquire", "release", "extend", "status", "locks"]) {
    const help = await runLockd([name, "--help"]);
    assert.equal(help.code, 0);
    assert.match(help.stdout, new RegExp(`^NAME\\n {4}lockd ${name} - `));
    const viaHelp = await runLockd(["help", name]);
    assert.equal(viaHelp.stdout, help.stdout);
  }
});

Deno.test("lockd locks lists key, token, holder, lease left and waiters, as a table and JSON", async () => {
  await withServer({}, async (server, clients) => {
    const servers = ["--servers", server.address];
    const holder = await clients.connect();
    assert.equal(await holder.request("HELLO 1 - billing-7"), "HELLO - OK");
    const t1 = grantOf(await holder.request("A orders:17 30 0"), "orders:17");
    const t2 = grantOf(await holder.request("A orders:2 30 0"), "orders:2");
    grantOf(await holder.request("A reports 30 0"), "reports");
    const waiter = await clients.connect();
    await waiter.send("A orders:17 30 20");
    assert.ok(await waiter.silentFor(100));

    const table = await runLockd(["locks", "--prefix", "orders:", ...servers]);
    assert.equal(table.code, 0, table.stderr);
    const lines = table.stdout.trimEnd().split("\n");
    assert.match(lines[0], /^KEY +TOKEN +HOLDER +LEASE LEFT +WAITERS$/);
    assert.match(lines[1], new RegExp(`^orders:17 +${t1} +billing-7 +(29|30)\\.\\ds +1$`));
    assert.match(lines[2], new RegExp(`^orders:2 +${t2} +billing-7 +(29|30)\\.\\ds +0$`));
    assert.equal(lines.length, 3);

    const json = await runLockd(["locks", "--json", ...servers]);
    assert.equal(json.code, 0, json.stderr);
    const locks: KeyInfo[] = JSON.parse(json.stdout);
    assert.deepEqual(locks.map((l) => [l.key, l.token, l.holder, l.waiters]), [
      ["orders:17", String(t1), "billing-7", 1],
      ["orders:2", String(t2), "billing-7", 0],
      ["reports", String(t2 + 1n), "billing-7", 0],
    ]);
    assert.ok(locks.every((l) => l.leaseLeftSeconds > 29 && l.leaseLeftSeconds <= 30));

    const limited = await runLockd(["locks", "--limit", "1", "--json", ...servers]);
    assert.equal(JSON.parse(limited.stdout).length, 1);
    assert.match(limited.stderr, /more keys are held: these are the first 1 \(raise --limit/);
    const all = await runLockd(["locks", "--limit", "3", "--json", ...servers]);
    assert.equal(JSON.parse(all.stdout).length, 3);
    assert.equal(all.stderr, "");
    const none = await runLockd(["locks", "--prefix", "nothing:", "--json", ...servers]);
    assert.deepEqual(JSON.parse(none.stdout), []);
  });
});

Deno.test("lockd status shows a single node as a table and JSON; 69 when it is down", async () => {
  await withServer({}, async (server, clients) => {
    const servers = ["--servers", server.address];
    const holder = await clients.connect();
    grantOf(await holder.request("A s:1 30 0"), "s:1");
    const table = await runLockd(["status", ...servers]);
    assert.equal(table.code, 0, table.stderr);
    assert.equal(table.stderr, "");
    const lines = table.stdout.trimEnd().split("\n");
    assert.match(lines[0], /^NODE +ROLE +ACTIVE +SYNC +LAG +CONNS +HOLDERS +WAITERS +MARK$/);
    const row = lines[1].split(/ +/);
    assert.deepEqual(row.slice(0, 5), [server.address, "active", server.address, "-", "-"]);
    assert.ok(Number(row[5]) >= 1, "connections");
    assert.deepEqual(row.slice(6, 8), ["1", "0"]);
    assert.match(row[8], /^[1-9][0-9]*$/);

    const json = await runLockd(["status", "--json", ...servers]);
    assert.equal(json.code, 0, json.stderr);
    const results: NodeStatusResult[] = JSON.parse(json.stdout);
    assert.equal(results.length, 1);
    assert.equal(results[0].address, server.address);
    assert.equal(results[0].status?.role, "active");
    assert.equal(results[0].status?.holders, 1);
  });
  const [port] = freePorts(1);
  const down = await runLockd(["status", "--servers", `127.0.0.1:${port}`]);
  assert.equal(down.code, 69, down.stderr);
  assert.equal(down.stdout, "");
  assert.match(down.stderr, new RegExp(`^lockd status: 127\\.0\\.0\\.1:${port}: `));
  const downJson = await runLockd(["status", "--json", "--servers", `127.0.0.1:${port}`]);
  assert.equal(downJson.code, 69);
  assert.ok(JSON.parse(downJson.stdout)[0].error);
});
