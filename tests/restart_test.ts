/**
 * Black-box tests of restarts and shutdown (docs/protocol.md, "Semantics": token monotonicity; docs/server.md: signals): real
 * `server/main.ts` processes started, stopped and killed on one data directory.
 */

import assert from "node:assert/strict";
import {
  grantOf,
  LineClient,
  MAX_TOKEN,
  type ServerProcess,
  startServer,
  waitFor,
} from "./_helpers.ts";

// ---------------------------------------------------------------------------------------
// Local helpers

/** Acquires `count` distinct keys in one write; returns the highest token. */
async function takeTokens(client: LineClient, prefix: string, count: number): Promise<bigint> {
  await client.write(
    Array.from({ length: count }, (_, i) => `A ${prefix}${i} 30 0\n`).join(""),
  );
  let max = 0n;
  for (const line of await client.readLines(count)) {
    const token = grantOf(line, line.split(" ")[1]);
    if (token > max) max = token;
  }
  return max;
}

/** Runs `fn` with a fresh data directory, removed afterwards. */
async function withDataDir(fn: (dir: string) => Promise<void>): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "lockd-restart-test-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
}

/** Stops `server` (if still running) and closes `clients`, for `finally` blocks. */
async function cleanup(server: ServerProcess | undefined, ...clients: LineClient[]) {
  await Promise.all(clients.map((c) => c.close()));
  await server?.stop();
}

// ---------------------------------------------------------------------------------------

Deno.test("server never reissues tokens after a graceful restart", async (t) => {
  await withDataDir(async (dir) => {
    let max = 0n;

    await t.step("does exit 0 on SIGTERM", async () => {
      const server = await startServer({ dataDir: dir });
      const c = await LineClient.connect(server.port);
      try {
        max = await takeTokens(c, "g1:", 20);
        // A second node cannot use the same data directory meanwhile.
        await assert.rejects(startServer({ dataDir: dir }), /exited with 1/);
        await c.close();
        assert.equal(await server.stop("SIGTERM"), 0, server.stderr());
      } finally {
        await cleanup(server, c);
      }
    });

    await t.step("does continue above every earlier token after SIGTERM", async () => {
      const server = await startServer({ dataDir: dir });
      const c = await LineClient.connect(server.port);
      try {
        const first = grantOf(await c.request("A g2:0 30 0"), "g2:0");
        assert.ok(first > max, `token ${first} after a restart is not above ${max}`);
        max = await takeTokens(c, "g2b:", 20);
        await c.close();
        assert.equal(await server.stop("SIGINT"), 0, server.stderr());
      } finally {
        await cleanup(server, c);
      }
    });

    await t.step("does continue above every earlier token after SIGINT", async () => {
      const server = await startServer({ dataDir: dir });
      const c = await LineClient.connect(server.port);
      try {
        const first = grantOf(await c.request("A g3:0 30 0"), "g3:0");
        assert.ok(first > max, `token ${first} after a restart is not above ${max}`);
        max = await takeTokens(c, "g3b:", 20);
        await c.close();
        // SIGHUP (a closed terminal, a supervisor) is a graceful stop too, not a kill.
        assert.equal(await server.stop("SIGHUP"), 0, server.stderr());
        assert.equal(Deno.readTextFileSync(`${dir}/tokens`).trim(), String(max));
      } finally {
        await cleanup(server, c);
      }
    });

    await t.step("does continue right after the last token after SIGHUP", async () => {
      const server = await startServer({ dataDir: dir });
      const c = await LineClient.connect(server.port);
      try {
        const first = grantOf(await c.request("A g4:0 30 0"), "g4:0");
        assert.equal(first, max + 1n, `token ${first} after SIGHUP is not right after ${max}`);
      } finally {
        await cleanup(server, c);
      }
    });
  });
});

Deno.test("server never reissues tokens after kill -9 mid-traffic", async () => {
  await withDataDir(async (dir) => {
    let maxSeen = 0n;
    for (let round = 0; round < 2; round++) {
      const server = await startServer({ dataDir: dir });
      const c = await LineClient.connect(server.port);
      const odd: string[] = [];
      let batches = 0;
      try {
        // Pipelined traffic until the process dies under it.
        const pump = (async () => {
          try {
            for (let b = 0;; b++) {
              await c.write(
                Array.from({ length: 50 }, (_, i) => `A k${round}:${b}:${i} 30 0\n`).join(""),
              );
              for (let i = 0; i < 50; i++) {
                const line = await c.readLine(3000);
                if (line === null) return;
                const match = /^A \S+ A ([1-9][0-9]*)$/.exec(line);
                if (!match) odd.push(line);
                else if (BigInt(match[1]) <= maxSeen) odd.push(`not increasing: ${line}`);
                else maxSeen = BigInt(match[1]);
              }
              batches++;
            }
          } catch {
            // The connection died with the server.
          }
        })();
        await waitFor(() => batches >= 5, "some traffic");
        const code = await server.stop("SIGKILL");
        assert.notEqual(code, 0);
        await pump;
        assert.deepEqual(odd, [], "unexpected replies");
      } finally {
        await cleanup(server, c);
      }
    }
    const server = await startServer({ dataDir: dir });
    const c = await LineClient.connect(server.port);
    try {
      const token = grantOf(await c.request("A after:kill 30 0"), "after:kill");
      assert.ok(token > maxSeen, `token ${token} after kill -9 is not above ${maxSeen}`);
    } finally {
      await cleanup(server, c);
    }
  });
});

Deno.test("server shuts down gracefully on SIGTERM with queued clients", async () => {
  await withDataDir(async (dir) => {
    const server = await startServer({ dataDir: dir });
    const holder = await LineClient.connect(server.port);
    const waiter = await LineClient.connect(server.port);
    const limited = await LineClient.connect(server.port);
    const idle = await LineClient.connect(server.port);
    let max = 0n;
    try {
      max = grantOf(await holder.request("A gs:1 30 0"), "gs:1");
      await waiter.send("A gs:1 30 0");
      assert.equal(await waiter.request("R probe 1"), "R probe N"); // queued
      await limited.send("A gs:1 30 5");
      assert.equal(await limited.request("R probe 1"), "R probe N"); // queued
      assert.equal(await idle.request("R probe 1"), "R probe N");

      server.child.kill("SIGTERM");
      assert.equal(await waiter.readLine(3000), "A gs:1 E shutting down");
      assert.equal(await limited.readLine(3000), "A gs:1 E shutting down");
      for (const c of [holder, waiter, limited, idle]) {
        assert.deepEqual(await c.closedByPeer(3000), [], "a connection stayed open");
      }
      assert.equal(await server.exited, 0, server.stderr());
    } finally {
      await cleanup(server, holder, waiter, limited, idle);
    }

    // The mark was kept: a restart continues above the last token.
    const again = await startServer({ dataDir: dir });
    const c = await LineClient.connect(again.port);
    try {
      const token = grantOf(await c.request("A gs:1 30 0"), "gs:1");
      assert.ok(token > max, `token ${token} after a graceful stop is not above ${max}`);
    } finally {
      await cleanup(again, c);
    }
  });
});

Deno.test("server keeps tokens above 2^53 exact", async () => {
  await withDataDir(async (dir) => {
    const seed = 2n ** 53n + 1n; // 9007199254740993: not representable as a double
    await Deno.writeTextFile(`${dir}/tokens`, `${seed}\n`);
    const server = await startServer({ dataDir: dir });
    const c = await LineClient.connect(server.port);
    try {
      const first = grantOf(await c.request("A big:1 30 0"), "big:1");
      const second = grantOf(await c.request("A big:2 30 0"), "big:2");
      assert.ok(first > seed, `token ${first} is not above the stored mark ${seed}`);
      assert.ok(second > first);
      // Both work as written: no precision was lost on the way.
      assert.equal(await c.request(`X big:1 ${first} 30`), "X big:1 X");
      assert.equal(await c.request(`R big:1 ${first + 1n}`), "R big:1 N");
      assert.equal(await c.request(`R big:1 ${first}`), "R big:1 R");
      assert.equal(await c.request(`R big:2 ${second}`), "R big:2 R");
    } finally {
      await cleanup(server, c);
    }
  });
});

Deno.test("server issues 2^64-1 as its last token and never wraps", async () => {
  await withDataDir(async (dir) => {
    await Deno.writeTextFile(`${dir}/tokens`, `${MAX_TOKEN - 2n}\n`);
    const server = await startServer({ dataDir: dir });
    const c = await LineClient.connect(server.port);
    try {
      assert.equal(grantOf(await c.request("A end:1 30 0"), "end:1"), MAX_TOKEN - 1n);
      assert.equal(grantOf(await c.request("A end:2 30 0"), "end:2"), MAX_TOKEN);
      assert.match(await c.request("A end:3 30 0") ?? "<eof>", /^A end:3 E \S/);
      // The documented exit status for exhausted tokens (see --help) is 1.
      assert.equal(await server.exited, 1, server.stderr());
    } finally {
      await cleanup(server, c);
    }
    // It refuses to start on an exhausted mark rather than reuse a token.
    let restarted: ServerProcess | undefined;
    try {
      restarted = await startServer({ dataDir: dir });
    } catch (error) {
      assert.match(String(error), /exited with 1/);
    }
    await restarted?.stop();
    assert.equal(restarted, undefined, "the server started with exhausted tokens");
  });
});
