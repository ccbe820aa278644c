/**
 * Black-box tests of `lockd run` (docs/cli.md, "lockd run") against a real server: the
 * command gets `LOCKD_KEY` and `LOCKD_TOKEN`, runs without a shell, holds the lock while it
 * runs and releases it the moment it exits, and lockd run exits with its status; 75, 69,
 * 127 and 126 when it cannot run the command under the lock.
 */

import assert from "node:assert/strict";
import { freePorts } from "./_net.ts";
import { grantOf, withServer } from "./_helpers.ts";
import { cleanEnv, runLockd, script, spawnLockd } from "./_lockd.ts";
import { withheldVariables } from "../server/cmd/run.ts";

Deno.test("lockd run passes LOCKD_KEY and LOCKD_TOKEN and exits with the command's status", async () => {
  await withServer({}, async (server, clients) => {
    const servers = ["--servers", server.address];
    const ok = await runLockd([
      "run",
      "jobs:env",
      ...servers,
      "--",
      "sh",
      "-c",
      'echo "$LOCKD_KEY $LOCKD_TOKEN"',
    ]);
    assert.equal(ok.code, 0, ok.stderr);
    assert.match(ok.stdout, /^jobs:env [1-9][0-9]*\n$/);
    assert.equal(ok.stderr, "");
    // The token was a real grant: the next one is larger.
    const first = BigInt(ok.stdout.trim().split(" ")[1]);
    const probe = await clients.connect();
    const next = grantOf(await probe.request("A jobs:env 5 1"), "jobs:env");
    assert.ok(next > first, `${next} > ${first}`);
    assert.equal(await probe.request(`R jobs:env ${next}`), "R jobs:env R");

    const three = await runLockd(["run", "jobs:env", ...servers, "--", "sh", "-c", "exit 3"]);
    assert.equal(three.code, 3, three.stderr);
    assert.equal(three.stdout, "");
    // Died of a signal: 128 + its number, as a shell reports it.
    const term = await runLockd(["run", "jobs:env", ...servers, "--", "sh", "-c", "kill -TERM $$"]);
    assert.equal(term.code, 143, term.stderr);
    const kill = await runLockd(["run", "jobs:env", ...servers, "--", "sh", "-c", "kill -KILL $$"]);
    assert.equal(kill.code, 137, kill.stderr);
    // Nothing stays held after any of them.
    assert.equal(await probe.request("I jobs:env"), "I jobs:env F");
  });
});

Deno.test("lockd run runs the command directly: no shell reads its arguments", async () => {
  const dir = await Deno.makeTempDir({ prefix: "lockd-run-" });
  try {
    const echo = await script(dir, "args.sh", `for a in "$@"; do printf '<%s>\\n' "$a"; done`);
    await withServer({}, async (server) => {
      const marker = `${dir}/injected`;
      const args = ["a;b", `$(touch ${marker})`, "`touch " + marker + "`", "*", "'q'", "x y", ""];
      const out = await runLockd(["run", "k", "--servers", server.address, "--", echo, ...args]);
      assert.equal(out.code, 0, out.stderr);
      assert.equal(out.stdout, args.map((a) => `<${a}>\n`).join(""));
      await assert.rejects(Deno.stat(marker), Deno.errors.NotFound);
      // Without '--': the command starts at the first argument after the key.
      const bare = await runLockd(["run", "k", "--servers", server.address, echo, "--lease", "1"]);
      assert.equal(bare.code, 0, bare.stderr);
      assert.equal(bare.stdout, "<--lease>\n<1>\n");
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("lockd run holds the lock while the command runs and releases it as it exits", async () => {
  const dir = await Deno.makeTempDir({ prefix: "lockd-run-" });
  try {
    const job = await script(dir, "job.sh", 'echo "token $LOCKD_TOKEN"; read code; exit "$code"');
    await withServer({}, async (server, clients) => {
      const run = spawnLockd(["run", "jobs:held", "--servers", server.address, "--", job]);
      const token = BigInt((await run.waitFor(/token (\d+)/))[1]);
      const other = await clients.connect();
      assert.equal(await other.request("A jobs:held 5 0.2"), "A jobs:held T");
      const info = (await other.request("I jobs:held"))!.split(" ");
      assert.equal(info[3], String(token));
      assert.match(info[6], /^lockd-run@[^:]+:\d+$/, "the holder's default name");
      // A waiter queued behind the command gets the key as soon as the command exits.
      const waiter = await clients.connect();
      await waiter.send("A jobs:held 5 20");
      assert.ok(await waiter.silentFor(100), "queued while the command runs");
      await run.write("4\n");
      // Within 3 s: not the 5 s session grace nor the 30 s lease, the release itself.
      const grant = await waiter.readLine(3000);
      assert.ok(grantOf(grant, "jobs:held") > token);
      assert.equal((await run.finish()).code, 4);
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("lockd run exits 75 when the wait runs out, without running the command", async () => {
  await withServer({}, async (server, clients) => {
    const holder = await clients.connect();
    grantOf(await holder.request("A busy 30 0"), "busy");
    const started = performance.now();
    const out = await runLockd([
      "run",
      "busy",
      "--wait",
      "0.3",
      "--servers",
      server.address,
      "--",
      "sh",
      "-c",
      "echo ran",
    ]);
    assert.equal(out.code, 75, out.stderr);
    assert.equal(out.stdout, "");
    assert.match(out.stderr, /^lockd run: .*"busy".*0\.3 s\n$/);
    assert.ok(performance.now() - started >= 300);
  });
});

Deno.test("lockd run exits 69 when no server can be reached", async () => {
  const [port] = freePorts(1);
  const out = await runLockd(["run", "k", "--servers", `127.0.0.1:${port}`, "--", "true"]);
  assert.equal(out.code, 69, out.stderr);
  assert.equal(out.stdout, "");
  assert.match(out.stderr, /^lockd run: .*127\.0\.0\.1:\d+/);
  // LOCKD_SERVERS is the default of --servers.
  const env = await runLockd(["run", "k", "--", "true"], { LOCKD_SERVERS: `127.0.0.1:${port}` });
  assert.equal(env.code, 69, env.stderr);
});

Deno.test("lockd run exits 127 for a missing command, 126 for one it cannot execute", async () => {
  const dir = await Deno.makeTempDir({ prefix: "lockd-run-" });
  try {
    const plain = `${dir}/not-executable`;
    await Deno.writeTextFile(plain, "#!/bin/sh\necho hi\n");
    await withServer({}, async (server, clients) => {
      const servers = ["--servers", server.address];
      const missing = await runLockd(["run", "k", ...servers, "--", `${dir}/no-such-command`]);
      assert.equal(missing.code, 127, missing.stderr);
      assert.match(missing.stderr, /^lockd run: .*no-such-command.*not found\n$/);
      const onPath = await runLockd(["run", "k", ...servers, "--", "no-such-command-lockd"]);
      assert.equal(onPath.code, 127, onPath.stderr);
      const denied = await runLockd(["run", "k", ...servers, "--", plain]);
      assert.equal(denied.code, 126, denied.stderr);
      assert.match(denied.stderr, /cannot execute/);
      const dirAsCommand = await runLockd(["run", "k", ...servers, "--", dir]);
      assert.equal(dirAsCommand.code, 126, dirAsCommand.stderr);
      // The lock taken for the command was released.
      const other = await clients.connect();
      assert.equal(await other.request("I k"), "I k F");
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("lockd run exits 64 on a bad command line, naming the problem on one line", async () => {
  for (
    const args of [
      ["run"],
      ["run", "k"],
      ["run", "k", "--lease", "0", "--", "true"],
      ["run", "k", "--bogus", "--", "true"],
      ["run", "k", "--secret", "x", "--", "true"],
    ]
  ) {
    const out = await runLockd(args);
    assert.equal(out.code, 64, `${args}: ${out.stderr}`);
    assert.equal(out.stdout, "");
    assert.match(out.stderr, /^lockd run: [^\n]+\n$/, args.join(" "));
  }
  const help = await runLockd(["run", "--help"]);
  assert.equal(help.code, 0);
  assert.match(help.stdout, /^NAME\n {4}lockd run - /);
  assert.equal(help.stderr, "");
});

Deno.test("lockd run passes CMD every variable byte for byte, even one that is not UTF-8", async () => {
  await withServer({}, async (server) => {
    // The shell sets a value with the byte 0xff, which no JavaScript string can hold.
    const main = new URL("../server/main.ts", import.meta.url).pathname;
    const out = await new Deno.Command("sh", {
      args: [
        "-c",
        'BADV=$(printf "a\\377b"); export BADV; exec "$@"',
        "sh",
        Deno.execPath(),
        "run",
        "-A",
        main,
        "run",
        "jobs:bytes",
        "--servers",
        server.address,
        "--",
        "sh",
        "-c",
        'printf "%s" "$BADV" | od -An -tx1',
      ],
      env: cleanEnv(),
      clearEnv: true,
    }).output();
    assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
    assert.equal(new TextDecoder().decode(out.stdout).trim(), "61 ff 62");
  });
});

Deno.test("withheldVariables() takes out the secrets, and a credential from the environment whole", () => {
  const env = (vars: Record<string, string>) => (name: string) => vars[name];
  assert.deepEqual(withheldVariables(env({})), ["LOCKD_AUTH_SECRET", "LOCKD_BEARER"]);
  assert.deepEqual(
    withheldVariables(env({ LOCKD_AUTH_NAME: "ops", LOCKD_AUTH_SECRET: "pw" })),
    ["LOCKD_AUTH_SECRET", "LOCKD_BEARER", "LOCKD_AUTH_NAME"],
  );
  // A credential read from a file stays usable by the lockd commands CMD runs.
  assert.deepEqual(
    withheldVariables(env({ LOCKD_AUTH_NAME: "ops", LOCKD_AUTH_SECRET_FILE: "/s" })),
    ["LOCKD_AUTH_SECRET", "LOCKD_BEARER"],
  );
});
