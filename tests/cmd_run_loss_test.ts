/**
 * Black-box tests of `lockd run`'s signals and lost locks (docs/cli.md, "lockd run"):
 * SIGTERM, SIGINT and SIGHUP are passed on to the command; a lost lock (released by token
 * from outside, or the server killed) stops the command's whole process group, SIGTERM then
 * SIGKILL after the grace, and exits 70; after a `kill -9` of lockd run its watchdog stops
 * the group the same way, and the server frees the key after the session grace.
 */

import assert from "node:assert/strict";
import { grantOf, waitFor, withServer } from "./_helpers.ts";
import { killGroup, processAlive, script, spawnLockd } from "./_lockd.ts";
import { WATCHDOG_NAME } from "../server/cmd/watchdog.ts";

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
      const child = await run.waitFor(/^child (\d+) token (\d+)/m);
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
      const pid = Number((await run.waitFor(/^child (\d+)/m))[1]);
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

Deno.test("kill -9 of lockd run: the watchdog stops the command and leaves, and the key is freed after the session grace", async () => {
  await withDir(async (dir) => {
    const job = await script(dir, "job.sh", 'echo "child $$"; exec sleep 60');
    await withServer({ args: ["--session-grace", "1"] }, async (server, clients) => {
      // A long kill grace: the watchdog must leave once the group is gone, not wait it out.
      const args = ["run", "crash", "--kill-grace", "600", "--servers", server.address, "--"];
      const run = spawnLockd([...args, job]);
      const pid = Number((await run.waitFor(/^child (\d+)/m))[1]);
      try {
        const watchdog = await watchdogOf(run.child.pid, pid);
        assert.ok(watchdog !== undefined, "lockd run has a watchdog");
        // The watchdog's input (a pipe) is lockd run's alone: CMD holding it would keep the
        // watchdog from ever seeing lockd run die.
        const input = Deno.readLinkSync(`/proc/${watchdog}/fd/0`);
        assert.match(input, /^pipe:/);
        assert.ok(!openFiles(pid).includes(input), `CMD holds ${input}`);
        const waiter = await clients.connect();
        await waiter.send("A crash 5 20");
        assert.ok(await waiter.silentFor(100), "held by lockd run");
        const killedAt = performance.now();
        run.signal("SIGKILL");
        await waitFor(() => !processAlive(pid), "the command to get SIGTERM", 5000);
        await waitFor(() => !processAlive(watchdog), "the watchdog to leave", 5000);
        grantOf(await waiter.readLine(8000), "crash");
        const took = performance.now() - killedAt;
        // Not the 30 s lease: the session's grace (1 s) after its connections closed.
        assert.ok(took >= 900 && took < 8000, `freed after the 1 s grace (${took} ms)`);
        assert.equal(await run.exited, 137);
      } finally {
        killGroup(pid);
        run.signal("SIGKILL"); // a failed check must not leave the run holding its group
        await run.exited;
      }
    });
  });
});

Deno.test("kill -9 of lockd run: a group that ignores SIGTERM gets SIGKILL after the grace", async () => {
  await withDir(async (dir) => {
    const job = await stubbornJob(dir);
    await withServer({}, async (server) => {
      const args = ["run", "crash:2", "--kill-grace", "1", "--servers", server.address, "--"];
      const run = spawnLockd([...args, job]);
      const pid = Number((await run.waitFor(/^child (\d+)/m))[1]);
      const grandchild = Number((await run.waitFor(/grandchild (\d+)/))[1]);
      try {
        const watchdog = await watchdogOf(run.child.pid, pid);
        assert.ok(watchdog !== undefined, "lockd run has a watchdog");
        const killedAt = performance.now();
        run.signal("SIGKILL");
        await run.child.status; // (run.exited waits for the group, which holds its stdout)
        assert.ok(processAlive(pid) && processAlive(grandchild), "SIGTERM is ignored");
        await waitFor(() => !processAlive(pid) && !processAlive(grandchild), "SIGKILL", 5000);
        const took = performance.now() - killedAt;
        assert.ok(took >= 800, `SIGKILL came after the grace (${took} ms)`);
        await waitFor(() => !processAlive(watchdog), "the watchdog to leave", 2000);
      } finally {
        killGroup(pid);
        run.signal("SIGKILL"); // a failed check must not leave the run holding its group
        await run.exited;
      }
    });
  });
});

Deno.test("lockd run dismisses its watchdog when it ends normally: what the command left runs on", async () => {
  await withDir(async (dir) => {
    const job = await script(
      dir,
      "job.sh",
      'sleep 60 >/dev/null 2>&1 & echo "child $$ left $!"; read x',
    );
    await withServer({}, async (server) => {
      const run = spawnLockd(["run", "calm", "--servers", server.address, "--", job]);
      const [, pid, left] = (await run.waitFor(/^child (\d+) left (\d+)/m)).map(Number);
      try {
        const watchdog = await watchdogOf(run.child.pid, pid);
        assert.ok(watchdog !== undefined, "lockd run has a watchdog");
        await run.write("go\n");
        const out = await run.finish();
        assert.equal(out.code, 0, out.stderr);
        await waitFor(() => !processAlive(watchdog), "the watchdog to exit");
        // A watchdog that saw its input end instead of "done" would have stopped the group.
        assert.ok(processAlive(left), "the background process is not stopped");
      } finally {
        killGroup(pid);
      }
    });
  });
});

/**
 * The pid of the watchdog that `lockd run` process `parent` started over group `group`,
 * once it is there (from /proc); `undefined` if none shows within 5 s.
 */
async function watchdogOf(parent: number, group: number): Promise<number | undefined> {
  let found: number | undefined;
  await waitFor(() => (found = findWatchdog(parent, group)) !== undefined, "a watchdog")
    .catch(() => {});
  return found;
}

function findWatchdog(parent: number, group: number): number | undefined {
  for (const entry of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    try {
      const args = Deno.readTextFileSync(`/proc/${entry.name}/cmdline`).split("\0");
      const stat = Deno.readTextFileSync(`/proc/${entry.name}/stat`);
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      // sh -c SCRIPT lockd-run-watchdog TENTHS GROUP
      const name = args.indexOf(WATCHDOG_NAME);
      const armed = name > 0 && args[name + 2] === String(group);
      if (armed && ppid === parent) return Number(entry.name);
    } catch {
      // Exited meanwhile.
    }
  }
  return undefined;
}

/** What the open file descriptors of process `pid` point to (`pipe:[N]`, paths). */
function openFiles(pid: number): string[] {
  const links: string[] = [];
  for (const entry of Deno.readDirSync(`/proc/${pid}/fd`)) {
    try {
      links.push(Deno.readLinkSync(`/proc/${pid}/fd/${entry.name}`));
    } catch {
      // Closed meanwhile.
    }
  }
  return links;
}
