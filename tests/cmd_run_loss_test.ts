/**
 * Black-box tests of `lockd run`'s signals and lost locks (docs/cli.md, "lockd run"):
 * SIGTERM, SIGINT and SIGHUP are passed on to the command; a lost lock (released by token
 * from outside, or the server killed) stops the command's whole process group, SIGTERM then
 * SIGKILL after the grace, and exits 70; a `kill -9` of lockd run frees the key after the
 * server's session grace.
 */

import assert from "node:assert/strict";
import { grantOf, waitFor, withServer } from "./_helpers.ts";
import { killGroup, processAlive, script, spawnLockd } from "./_lockd.ts";

/** A temp dir for the test's scripts, removed afterwards. */
async function withDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "lockd-run-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("lockd run passes SIGTERM, SIGINT and SIGHUP on to the command", async () => {
  await withDir(async (dir) => {
    const job = await script(
      dir,
      "traps.sh",
      [
        "trap 'echo got TERM; exit 11' TERM",
        "trap 'echo got INT; exit 12' INT",
        "trap 'echo got HUP; exit 13' HUP",
        "echo ready",
        "while :; do sleep 0.05; done",
      ].join("\n"),
    );
    await withServer({}, async (server, clients) => {
      for (const [signal, code] of [["SIGTERM", 11], ["SIGINT", 12], ["SIGHUP", 13]] as const) {
        const run = spawnLockd(["run", "sig", "--servers", server.address, "--", job]);
        await run.waitFor(/ready/);
        run.signal(signal);
        const out = await run.finish();
        assert.equal(out.code, code, `${signal}: ${out.stderr}`);
        assert.match(out.stdout, new RegExp(`got ${signal.slice(3)}`));
        assert.doesNotMatch(out.stderr, /lockd run:/, "nothing to report of its own");
      }
      const other = await clients.connect();
      assert.equal(await other.request("I sig"), "I sig F", "released after each");
    });
  });
});

Deno.test("lockd run ends its wait for the lock on SIGINT, exit 130", async () => {
  await withServer({}, async (server, clients) => {
    const holder = await clients.connect();
    grantOf(await holder.request("A queued 30 0"), "queued");
    const run = spawnLockd(["run", "queued", "--servers", server.address, "--", "true"]);
    const watcher = await clients.connect();
    // Queued once the server counts a waiter.
    await waitFor(
      async () => (await watcher.request("I queued"))!.split(" ")[5] === "1",
      "lockd run to queue",
    );
    run.signal("SIGINT");
    const out = await run.finish();
    assert.equal(out.code, 130, out.stderr);
    assert.equal(out.stdout, "");
  });
});

/** A job that ignores SIGTERM and starts a grandchild that ignores it too; prints both pids. */
async function stubbornJob(dir: string): Promise<string> {
  return await script(
    dir,
    "stubborn.sh",
    [
      "trap '' TERM",
      `sh -c 'echo "grandchild $$"; while :; do sleep 0.05; done' &`,
      'echo "child $$ token $LOCKD_TOKEN"',
      "while :; do sleep 0.05; done",
    ].join("\n"),
  );
}

Deno.test("lockd run stops the whole group after a release from outside: SIGTERM, SIGKILL after the grace, exit 70", async () => {
  await withDir(async (dir) => {
    const job = await stubbornJob(dir);
    await withServer({}, async (server, clients) => {
      const run = spawnLockd([
        "run",
        "lost:1",
        "--lease",
        "1",
        "--kill-grace",
        "1",
        "--servers",
        server.address,
        "--",
        job,
      ]);
      const child = await run.waitFor(/child (\d+) token (\d+)/);
      const grandchild = Number((await run.waitFor(/grandchild (\d+)/))[1]);
      const [pid, token] = [Number(child[1]), child[2]];
      try {
        assert.ok(processAlive(pid) && processAlive(grandchild));
        const other = await clients.connect();
        assert.equal(await other.request(`R lost:1 ${token}`), "R lost:1 R");
        // The next renewal (a third of the lease) is answered N.
        await run.waitFor(
          /lockd run: .*lost.*extend answered N.*SIGKILL after 1 s/,
          5000,
          "stderr",
        );
        const lostAt = performance.now();
        // Both ignore SIGTERM: they are still there until the grace ends.
        assert.ok(processAlive(pid) && processAlive(grandchild), "SIGTERM is ignored");
        const out = await run.finish();
        const took = run.exitedAt! - lostAt;
        assert.equal(out.code, 70, out.stderr);
        assert.ok(took >= 800, `SIGKILL came after the grace (${took} ms)`);
        assert.ok(took < 4000, `and soon after it (${took} ms)`);
        assert.ok(!processAlive(pid), "the command is gone");
        assert.ok(!processAlive(grandchild), "its grandchild is gone too");
      } finally {
        killGroup(pid);
      }
    });
  });
});

Deno.test("lockd run stops the command and exits 70 when its only server dies", async () => {
  await withDir(async (dir) => {
    const job = await script(dir, "job.sh", 'echo "child $$"; exec sleep 60');
    await withServer({}, async (server) => {
      const run = spawnLockd(["run", "lost:2", "--servers", server.address, "--", job]);
      const pid = Number((await run.waitFor(/child (\d+)/))[1]);
      try {
        await server.stop("SIGKILL");
        const out = await run.finish();
        assert.equal(out.code, 70, out.stderr);
        assert.match(out.stderr, /^lockd run: .*lost.*stopping the command/m);
        assert.ok(!processAlive(pid), "the command is gone");
      } finally {
        killGroup(pid);
      }
    });
  });
});

Deno.test("kill -9 of lockd run frees the key after the server's session grace", async () => {
  await withDir(async (dir) => {
    const job = await script(dir, "job.sh", 'echo "child $$"; exec sleep 60');
    await withServer({ args: ["--session-grace", "1"] }, async (server, clients) => {
      const run = spawnLockd(["run", "crash", "--servers", server.address, "--", job]);
      const pid = Number((await run.waitFor(/child (\d+)/))[1]);
      try {
        const waiter = await clients.connect();
        await waiter.send("A crash 5 20");
        assert.ok(await waiter.silentFor(100), "held by lockd run");
        const killedAt = performance.now();
        run.signal("SIGKILL");
        grantOf(await waiter.readLine(8000), "crash");
        const took = performance.now() - killedAt;
        // Not the 30 s lease: the session's grace (1 s) after its connections closed.
        assert.ok(took >= 900 && took < 8000, `freed after the 1 s grace (${took} ms)`);
      } finally {
        killGroup(pid); // The command could not be told; it holds lockd run's stdout.
        await run.exited;
      }
    });
  });
});
