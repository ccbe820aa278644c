/**
 * Black-box tests of the server's log (docs/server.md, "Logs"): real `server/main.ts`
 * processes, their stderr read line by line. Every line has a timestamp and a level,
 * `--log-format json` gives one JSON object per line, `--log-level` filters, and a dropped
 * connection is logged with its reason.
 */

import assert from "node:assert/strict";
import { Cluster } from "./_cluster.ts";
import {
  LineClient,
  runToExit,
  type ServerProcess,
  type StartOptions,
  startServer,
  waitFor,
} from "./_helpers.ts";

/** A text log line: time, level padded to 5, the message. */
const TEXT_LINE = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO |WARN |ERROR) \S/;

/** Runs `fn` against a fresh server, stops it with SIGTERM, and returns its stderr lines. */
async function withServer(
  options: StartOptions,
  fn: (server: ServerProcess) => Promise<void>,
): Promise<string[]> {
  const server = await startServer(options);
  try {
    assert.match(server.ready, /^listening on 127\.0\.0\.1:\d+ as active$/, "the ready line");
    await fn(server);
  } finally {
    const code = await server.stop("SIGTERM");
    await Deno.remove(server.dataDir, { recursive: true });
    assert.equal(code, 0, server.stderr());
  }
  return server.stderr().split("\n").filter((line) => line !== "");
}

/** Waits until the server's stderr matches `pattern`. */
function logged(server: ServerProcess, pattern: RegExp): Promise<void> {
  return waitFor(() => pattern.test(server.stderr()), `${pattern} in the log`);
}

/** Sends a line over 4096 bytes; resolves once the server answered and closed. */
async function tooLong(server: ServerProcess): Promise<void> {
  const c = await LineClient.connect(server.port);
  try {
    await c.send(`A ${"k".repeat(5000)} 5 0`);
    assert.deepEqual(await c.closedByPeer(), ["- - E line too long"]);
  } finally {
    await c.close();
  }
}

Deno.test("text log: every stderr line has a timestamp and a level; a long line's drop is logged", async () => {
  const lines = await withServer({}, async (server) => {
    await tooLong(server);
    await logged(server, /dropping 127\.0\.0\.1:\d+: a line over 4096 bytes/);
  });
  assert.ok(lines.length >= 4, lines.join("\n"));
  for (const line of lines) assert.match(line, TEXT_LINE);
  const find = (pattern: RegExp) => {
    const found = lines.find((line) => pattern.test(line));
    assert.ok(found, `${pattern} in:\n${lines.join("\n")}`);
    return found;
  };
  assert.match(
    find(/data directory/),
    /INFO {2}data directory "[^"]+": fencing tokens continue after 0 \(reserved up to \d+\)/,
  );
  assert.match(
    find(/a line over 4096 bytes/),
    / WARN {2}dropping 127\.0\.0\.1:\d+: a line over 4096 bytes event=drop remote=127\.0\.0\.1:\d+ reason=line-too-long$/,
  );
  assert.match(
    find(/shutting down/),
    / INFO {2}shutting down \(SIGTERM\) event=shutdown signal=SIGTERM$/,
  );
  assert.match(find(/stopped;/), / INFO {2}stopped; token mark \d+ saved/);
  // The timestamps are now, in UTC, and in order.
  const times = lines.map((line) => Date.parse(line.slice(0, 24)));
  assert.ok(times.every((t, i) => i === 0 || t >= times[i - 1]), "in order");
  assert.ok(Math.abs(Date.now() - times.at(-1)!) < 60_000, "now");
  // Normal closes and debug details are not at info.
  assert.ok(!lines.some((line) => / DEBUG /.test(line)), lines.join("\n"));
});

Deno.test("--log-format json: one JSON object per line; a refused connection has its reason", async () => {
  const lines = await withServer(
    { args: ["--log-format", "json", "--max-connections", "1"] },
    async (server) => {
      const first = await LineClient.connect(server.port);
      try {
        // Served: the first connection counts against the cap.
        assert.match((await first.request("A log:k 5 0"))!, /^A log:k A \d+$/);
        const second = await LineClient.connect(server.port);
        try {
          assert.deepEqual(await second.closedByPeer(), ["- - E too many connections"]);
        } finally {
          await second.close();
        }
        await logged(server, /too many connections/);
      } finally {
        await first.close();
      }
    },
  );
  const records = lines.map((line) => {
    try {
      return JSON.parse(line);
    } catch {
      assert.fail(`not JSON: ${line}`);
    }
  });
  for (const record of records) {
    assert.match(record.time, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    assert.ok(["debug", "info", "warn", "error"].includes(record.level), record.level);
    assert.equal(typeof record.msg, "string");
  }
  const refused = records.find((r) => r.reason === "too-many-connections");
  assert.ok(refused, lines.join("\n"));
  assert.equal(refused.level, "warn");
  assert.equal(refused.event, "drop");
  assert.match(refused.remote, /^127\.0\.0\.1:\d+$/);
  assert.match(refused.msg, /^refused a connection from 127\.0\.0\.1:\d+: too many connections/);
  const start = records.find((r) => r.event === "start");
  assert.ok(start, lines.join("\n"));
  assert.equal(start.last, "0", "tokens are strings in JSON: 64 bits do not fit a double");
});

Deno.test("--log-level warn hides info lines and keeps warnings", async () => {
  const lines = await withServer({ args: ["--log-level", "warn"] }, async (server) => {
    await tooLong(server);
    await logged(server, /a line over 4096 bytes/);
  });
  assert.equal(lines.length, 1, lines.join("\n"));
  assert.match(lines[0], / WARN {2}dropping 127\.0\.0\.1:\d+: a line over 4096 bytes/);
});

Deno.test("LOCKD_LOG_LEVEL=debug and LOCKD_TRACE=1 log debug lines; LOCKD_LOG_FORMAT applies", async (t) => {
  const envs: Record<string, string>[] = [{ LOCKD_LOG_LEVEL: "debug" }, { LOCKD_TRACE: "1" }];
  for (const env of envs) {
    await t.step(JSON.stringify(env), async () => {
      const lines = await withServer(
        { env: { ...env, LOCKD_LOG_FORMAT: "json" } },
        async (server) => {
          const c = await LineClient.connect(server.port);
          assert.match((await c.request("A log:d 5 0"))!, /^A log:d A \d+$/);
          await c.close();
          await logged(server, /closed the connection/);
        },
      );
      const records = lines.map((line) => JSON.parse(line));
      const reserved = records.find((r) => r.event === "tokens-reserved");
      assert.equal(reserved?.level, "debug", lines.join("\n"));
      assert.match(reserved.msg, /^reserved fencing tokens up to \d+ in "/);
      const closed = records.find((r) => r.event === "closed");
      assert.equal(closed?.level, "debug");
      assert.match(closed.msg, /^127\.0\.0\.1:\d+ closed the connection$/);
    });
  }
});

Deno.test("a fatal error at start is an error line in the chosen format, exit 1", async () => {
  const dir = await Deno.makeTempDir({ prefix: "lockd-log-" });
  try {
    Deno.writeTextFileSync(`${dir}/tokens`, "garbage\n");
    const text = await runToExit(["--listen", "127.0.0.1:0", "--data-dir", dir]);
    assert.equal(text.code, 1, text.stderr);
    assert.match(text.stderr, /^\S+Z ERROR The token mark "[^"]+" is corrupt/);
    const json = await runToExit([
      "--listen",
      "127.0.0.1:0",
      "--data-dir",
      dir,
      "--log-format=json",
    ]);
    assert.equal(json.code, 1, json.stderr);
    const lines = json.stderr.split("\n").filter((line) => line !== "");
    assert.equal(lines.length, 1, json.stderr);
    const record = JSON.parse(lines[0]);
    assert.equal(record.level, "error");
    assert.equal(record.event, "fatal");
    assert.match(record.msg, /is corrupt/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a bad --log-format or --log-level is a usage error (exit 2)", async () => {
  for (const args of [["--log-format", "xml"], ["--log-level", "loud"]]) {
    const out = await runToExit(args);
    assert.equal(out.code, 2, out.stderr);
    assert.match(out.stderr, new RegExp(`^lockd: ${args[0]} must be `));
  }
});

Deno.test("a cluster logs JSON lines: roles, links, and a failover naming the lost active", async () => {
  await Cluster.run(2, async (cluster) => {
    const active = await cluster.waitForOneActive({ timeoutMs: 5000 });
    const heir = cluster.members.find((m) => m !== active)!;
    const mark = heir.logMark();
    await active.kill("SIGKILL");
    const lost = active.address.replaceAll(".", "\\.");
    await heir.waitForLog(new RegExp(`"msg":"failover: the active ${lost} was lost`), {
      since: mark,
      timeoutMs: 5000,
    });
    await heir.waitForLog(/"msg":"[^"]* is active \(promoted\)"/, { since: mark });
    const records = heir.stderr().split("\n").filter((l) => l !== "").map((line) => {
      try {
        return JSON.parse(line);
      } catch {
        assert.fail(`not JSON: ${line}`);
      }
    });
    const failover = records.find((r) => r.event === "failover");
    assert.equal(failover.level, "warn");
    assert.equal(failover.peer, active.address);
    assert.equal(failover.msg, `failover: the active ${active.address} was lost`);
    const roles = records.filter((r) => r.event === "role").map((r) => r.role);
    assert.deepEqual(roles.slice(-1), ["active"], JSON.stringify(roles));
    assert.ok(records.some((r) => r.event === "link-up" && r.peer === active.address));
    assert.ok(records.some((r) => r.event === "link-down" && r.peer === active.address));
    // LOCKD_TRACE=1 (set for every test cluster): the peer messages are debug lines too.
    assert.ok(records.some((r) => r.level === "debug" && / > /.test(r.msg)));
  }, { args: ["--log-format", "json"] });
});

Deno.test("a peer that dies again and again soon after starting: a few lines, its last death not hidden, its return logged", async () => {
  await Cluster.run(2, async (cluster) => {
    const active = await cluster.waitForOneActive({ timeoutMs: 5000 });
    const other = cluster.members.find((m) => m !== active)!;
    const mark = active.logMark();
    for (let i = 0; i < 4; i++) {
      if (!other.running) await other.start();
      await new Promise((resolve) => setTimeout(resolve, 300));
      await other.kill("SIGKILL");
    }
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const peer = JSON.stringify(other.address);
    const linkLines = () =>
      active.stderr().slice(-(active.logMark() - mark)).split("\n")
        .filter((l) => l.includes(`"peer":${peer}`) && /"event":"link-/.test(l))
        .map((l) => JSON.parse(l));
    const dead = linkLines();
    assert.ok(dead.length >= 1 && dead.length <= 4, JSON.stringify(dead));
    // The last word on a dead peer is not that its link is up.
    assert.notEqual(dead.at(-1).event, "link-up", JSON.stringify(dead));
    assert.match(dead.at(-1).msg, /down|closed within/);
    // Once it stays up, that is logged, with the brief links before it.
    await other.start();
    await active.waitForLog(new RegExp(`link to peer ${other.address.replaceAll(".", "\\.")} up`), {
      since: mark,
      timeoutMs: 5000,
    });
  }, { args: ["--log-format", "json"] });
});
