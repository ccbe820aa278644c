/**
 * Tests of the fencing-token high-water mark in the real server process (docs/protocol.md,
 * "Semantics"): a restart after kill -9 starts above the reserved block, one after SIGTERM
 * continues right after the last token, and main exits 1 with a clear message on a corrupt
 * mark, an unusable data dir, a dir another lockd uses, and after granting the last token.
 * `TokenStore` in-process: tokens_test.ts and tokens_errors_test.ts. Helpers:
 * tests/_tokens.ts.
 */

import assert from "node:assert/strict";
import { MAX_TOKEN } from "../client/codec.ts";
import { LineClient, runToExit, startServer } from "./_helpers.ts";
import { readMark, withTempDir } from "./_tokens.ts";

Deno.test("TokenStore.open() after a crash starts above the reserved block (real process, kill -9)", async () => {
  const dataDir = await Deno.makeTempDir({ prefix: "lockd-tokens-" });
  try {
    const first = await startServer({ dataDir });
    let issued: bigint[] = [];
    try {
      const client = await LineClient.connect(first.port);
      try {
        for (const key of ["a", "b", "c"]) {
          const reply = await client.request(`A ${key} 60 0`);
          const match = /^A \S+ A (\d+)$/.exec(reply ?? "");
          assert.ok(match, `reply ${reply}`);
          issued = [...issued, BigInt(match[1])];
        }
      } finally {
        await client.close();
      }
    } finally {
      await first.stop("SIGKILL");
    }
    assert.deepEqual(issued, [1n, 2n, 3n]);
    const mark = BigInt(readMark(dataDir).trim());
    assert.ok(mark >= 3n, `the mark on disk (${mark}) covers every token issued`);
    assert.equal(mark, 1_000_000n, "the mark is the reserved block");
    const second = await startServer({ dataDir });
    try {
      const client = await LineClient.connect(second.port);
      try {
        const reply = await client.request("A a 60 0");
        const match = /^A a A (\d+)$/.exec(reply ?? "");
        assert.ok(match, `reply ${reply}`);
        assert.equal(BigInt(match[1]), mark + 1n, "the next token is right above the mark");
      } finally {
        await client.close();
      }
    } finally {
      assert.equal(await second.stop(), 0, second.stderr());
    }
    assert.equal(readMark(dataDir), `${mark + 1n}\n`);
  } finally {
    await Deno.remove(dataDir, { recursive: true });
  }
});

Deno.test("TokenStore.close() through SIGTERM lets the next start continue right after the last token", async () => {
  const dataDir = await Deno.makeTempDir({ prefix: "lockd-tokens-" });
  try {
    const first = await startServer({ dataDir });
    try {
      const client = await LineClient.connect(first.port);
      try {
        assert.equal(await client.request("A a 60 0"), "A a A 1");
        assert.equal(await client.request("A b 60 0"), "A b A 2");
      } finally {
        await client.close();
      }
    } finally {
      assert.equal(await first.stop("SIGTERM"), 0, first.stderr());
    }
    assert.equal(readMark(dataDir), "2\n");
    const second = await startServer({ dataDir });
    try {
      const client = await LineClient.connect(second.port);
      try {
        assert.equal(await client.request("A a 60 0"), "A a A 3");
      } finally {
        await client.close();
      }
    } finally {
      assert.equal(await second.stop("SIGTERM"), 0, second.stderr());
    }
  } finally {
    await Deno.remove(dataDir, { recursive: true });
  }
});

Deno.test("main exits 1 with a clear message on a corrupt token mark", async () => {
  await withTempDir(async (dir) => {
    Deno.writeTextFileSync(`${dir}/tokens`, "not a number\n");
    const result = await runToExit(["--listen", "127.0.0.1:0", "--data-dir", dir]);
    assert.equal(result.timedOut, false, "lockd must not start with a corrupt mark");
    assert.equal(result.code, 1, result.stderr);
    assert.equal(result.stdout, "");
    assert.match(result.stderr, /^\S+Z ERROR /, "a timestamped error line");
    assert.match(result.stderr, /corrupt/);
    assert.ok(result.stderr.includes(`${dir}/tokens`), result.stderr);
    assert.match(result.stderr, /number above every token/);
    assert.ok(!/^\s+at /m.test(result.stderr), "no stack trace");
    assert.equal(readMark(dir), "not a number\n", "the file is left for the operator");
  });
});

Deno.test("main exits 1 with a clear message on an unusable data dir", async () => {
  await withTempDir(async (dir) => {
    Deno.writeTextFileSync(`${dir}/file`, "x");
    const dataDir = `${dir}/file/data`;
    const result = await runToExit(["--listen", "127.0.0.1:0", "--data-dir", dataDir]);
    assert.equal(result.timedOut, false, "lockd must not start without its data dir");
    assert.equal(result.code, 1, result.stderr);
    assert.equal(result.stdout, "");
    assert.match(result.stderr, /^\S+Z ERROR /, "a timestamped error line");
    assert.ok(result.stderr.includes(dataDir), result.stderr);
    assert.match(result.stderr, /--data-dir/);
    assert.ok(!/^\s+at /m.test(result.stderr), "no stack trace");
  });
});

Deno.test("main exits 1 when another lockd uses the data dir", async () => {
  const dataDir = await Deno.makeTempDir({ prefix: "lockd-tokens-" });
  try {
    const first = await startServer({ dataDir });
    try {
      const result = await runToExit(["--listen", "127.0.0.1:0", "--data-dir", dataDir]);
      assert.equal(result.timedOut, false, "a second lockd must not start on the same dir");
      assert.equal(result.code, 1, result.stderr);
      assert.equal(result.stdout, "");
      assert.match(result.stderr, /in use/);
    } finally {
      assert.equal(await first.stop(), 0, first.stderr());
    }
  } finally {
    await Deno.remove(dataDir, { recursive: true });
  }
});

Deno.test("main grants the last token 2^64-1, then answers E and exits 1", async () => {
  const dataDir = await Deno.makeTempDir({ prefix: "lockd-tokens-" });
  try {
    Deno.writeTextFileSync(`${dataDir}/tokens`, `${MAX_TOKEN - 1n}\n`);
    const server = await startServer({ dataDir });
    try {
      const client = await LineClient.connect(server.port);
      try {
        assert.equal(await client.request("A k1 60 0"), "A k1 A 18446744073709551615");
        // Three requests read at once: each is refused, and the node stops once.
        await client.write("A k2 60 0\nA k3 60 0\nA k4 60 0\n");
        const replies = await client.readLines(3);
        for (const [i, reply] of replies.entries()) {
          assert.match(reply, new RegExp(`^A k${i + 2} E \\S.*exhausted`));
        }
        // The server stops on its own and closes the connection.
        assert.deepEqual(await client.closedByPeer(), []);
      } finally {
        await client.close();
      }
    } finally {
      // It should exit by itself; kill it if it is still running after a while.
      let timer: ReturnType<typeof setTimeout> | undefined;
      await Promise.race([
        server.exited,
        new Promise<void>((resolve) => {
          timer = setTimeout(() => {
            server.child.kill("SIGKILL");
            resolve();
          }, 10_000);
        }),
      ]);
      clearTimeout(timer);
    }
    const code = await server.exited;
    assert.equal(code, 1, server.stderr());
    assert.match(server.stderr(), /exhausted/);
    assert.equal(server.stderr().split("; stopping").length, 2, server.stderr());
    assert.equal(server.stderr().split("stopped; token mark").length, 2, server.stderr());
    assert.equal(readMark(dataDir), `${MAX_TOKEN}\n`);
    // And it will not start again on that mark.
    const again = await runToExit(["--listen", "127.0.0.1:0", "--data-dir", dataDir]);
    assert.equal(again.timedOut, false);
    assert.equal(again.code, 1, again.stderr);
    assert.equal(again.stdout, "");
    assert.match(again.stderr, /exhausted/);
  } finally {
    await Deno.remove(dataDir, { recursive: true });
  }
});
