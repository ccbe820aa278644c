/**
 * Tests of the fencing-token high-water mark (docs/protocol.md, "Semantics"): `TokenStore` in-process, then the
 * real server process for crashes, corrupt or unusable data directories and exhaustion.
 */

import assert from "node:assert/strict";
import { MAX_TOKEN } from "../client/codec.ts";
import { DataDirError, TokensExhaustedError, TokenStore } from "../server/tokens.ts";
import { LineClient, runToExit, startServer, waitFor } from "./_helpers.ts";

/** Runs `fn` with a fresh temp dir, removed afterwards. */
async function withTempDir(fn: (dir: string) => Promise<void> | void): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "lockd-tokens-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

function readMark(dir: string): string {
  return Deno.readTextFileSync(`${dir}/tokens`);
}

/** Asserts that `fn` throws an instance of `type`; returns the error. */
function throwsA<E extends Error>(fn: () => unknown, type: new (...args: never[]) => E): E {
  let caught: unknown;
  try {
    fn();
  } catch (error) {
    caught = error;
  }
  assert.ok(
    caught instanceof type,
    `expected ${type.name}, got ${caught instanceof Error ? caught.stack : String(caught)}`,
  );
  return caught;
}

Deno.test("TokenStore.open() on a fresh dir starts at 1", async () => {
  await withTempDir(async (dir) => {
    const store = TokenStore.open(dir);
    try {
      assert.equal(store.last, 0n);
      assert.equal(store.next(), 1n);
      assert.equal(store.last, 1n);
      assert.equal(store.next(), 2n);
    } finally {
      await store.close();
    }
  });
});

Deno.test("TokenStore.open() creates a missing data dir, parents included", async () => {
  await withTempDir(async (dir) => {
    const data = `${dir}/a/b/c`;
    const store = TokenStore.open(data);
    try {
      assert.equal(store.next(), 1n);
      assert.ok(Deno.statSync(data).isDirectory);
    } finally {
      await store.close();
    }
    assert.equal(readMark(data), "1\n");
  });
});

Deno.test("TokenStore.open() reserves a block on disk before issuing anything", async () => {
  await withTempDir(async (dir) => {
    const store = TokenStore.open(dir, { block: 1000n });
    try {
      assert.equal(store.reserved, 1000n);
      assert.equal(readMark(dir), "1000\n");
      assert.equal(store.next(), 1n);
    } finally {
      await store.close();
    }
  });
  await withTempDir(async (dir) => {
    const store = TokenStore.open(dir);
    try {
      assert.equal(store.reserved, 1_000_000n, "the default block is 1,000,000");
      assert.equal(readMark(dir), "1000000\n");
    } finally {
      await store.close();
    }
  });
});

Deno.test("next() issues strictly increasing tokens, never above the mark on disk", async () => {
  await withTempDir(async (dir) => {
    // block 1: every reservation is synchronous, so the disk can be checked after each token.
    const store = TokenStore.open(dir, { block: 1n });
    try {
      let previous = 0n;
      for (let i = 0; i < 200; i++) {
        const token = store.next();
        assert.equal(typeof token, "bigint");
        assert.ok(token > previous, `${token} after ${previous}`);
        assert.ok(BigInt(readMark(dir)) >= token, `disk mark below token ${token}`);
        assert.ok(store.reserved >= token);
        previous = token;
      }
      assert.equal(previous, 200n);
    } finally {
      await store.close();
    }
  });
});

Deno.test("next() reserves the next block in the background before the current one runs out", async () => {
  await withTempDir(async (dir) => {
    const store = TokenStore.open(dir, { block: 10n });
    try {
      assert.equal(store.reserved, 10n);
      for (let i = 1n; i <= 6n; i++) assert.equal(store.next(), i);
      // Past half of the block: a reservation up to 20 is on its way.
      await waitFor(() => store.reserved === 20n, "the background reservation");
      assert.equal(readMark(dir), "20\n");
      let previous = 6n;
      for (let i = 0; i < 10; i++) {
        const token = store.next();
        assert.ok(token > previous);
        assert.ok(BigInt(readMark(dir)) >= token);
        previous = token;
      }
      assert.equal(previous, 16n);
      await waitFor(() => store.reserved === 30n, "the next background reservation");
      assert.equal(readMark(dir), "30\n");
    } finally {
      await store.close();
    }
    assert.equal(readMark(dir), "16\n");
  });
});

Deno.test("next() stays increasing over many blocks with background reservations", async () => {
  await withTempDir(async (dir) => {
    const store = TokenStore.open(dir, { block: 16n });
    try {
      let previous = 0n;
      for (let round = 0; round < 20; round++) {
        for (let i = 0; i < 7; i++) {
          const token = store.next();
          assert.ok(token > previous, `${token} after ${previous}`);
          assert.ok(store.reserved >= token);
          assert.ok(BigInt(readMark(dir)) >= token, `disk mark below token ${token}`);
          previous = token;
        }
        // Let a background reservation land before going on.
        const target = previous;
        await waitFor(() => store.reserved - target >= 8n, "a background reservation");
      }
      assert.equal(previous, 140n);
    } finally {
      await store.close();
    }
    assert.equal(readMark(dir), "140\n");
  });
});

Deno.test("close() persists the exact last token and a reopen continues right after it", async () => {
  await withTempDir(async (dir) => {
    const first = TokenStore.open(dir);
    for (let i = 0; i < 3; i++) first.next();
    await first.close();
    assert.equal(readMark(dir), "3\n");
    const second = TokenStore.open(dir);
    try {
      assert.equal(second.last, 3n);
      assert.equal(second.next(), 4n);
      assert.equal(second.next(), 5n);
    } finally {
      await second.close();
    }
    assert.equal(readMark(dir), "5\n");
    const third = TokenStore.open(dir);
    try {
      assert.equal(third.next(), 6n);
    } finally {
      await third.close();
    }
  });
});

Deno.test("close() without any grant keeps the stored mark", async () => {
  await withTempDir(async (dir) => {
    Deno.writeTextFileSync(`${dir}/tokens`, "41\n");
    const store = TokenStore.open(dir);
    await store.close();
    assert.equal(readMark(dir), "41\n");
    const again = TokenStore.open(dir);
    try {
      assert.equal(again.next(), 42n);
    } finally {
      await again.close();
    }
  });
});

Deno.test("close() twice is harmless", async () => {
  await withTempDir(async (dir) => {
    const store = TokenStore.open(dir);
    store.next();
    await store.close();
    await store.close();
    assert.equal(readMark(dir), "1\n");
  });
});

Deno.test("close() waits for a background reservation in flight", async () => {
  // close() returns a Promise: once it resolves, the store must be done with the disk.
  // Otherwise the in-flight write keeps a file open and an fsync running past close() (the
  // test sanitizers then blame the next test), and races a later open of the same dir.
  await withTempDir(async (dir) => {
    const realOpen = Deno.open;
    const finished: Promise<void>[] = [];
    let inFlight = 0;
    Deno.open = (...args: Parameters<typeof Deno.open>) => {
      const { promise, resolve } = Promise.withResolvers<void>();
      finished.push(promise);
      inFlight++;
      return realOpen(...args).then((file) => {
        const realClose = file.close.bind(file);
        file.close = () => {
          realClose();
          inFlight--;
          resolve();
        };
        return file;
      }, (error) => {
        inFlight--;
        resolve();
        throw error;
      });
    };
    let started = 0;
    let busyAfterClose = 0;
    try {
      const store = TokenStore.open(dir, { block: 10n });
      for (let i = 0; i < 6; i++) store.next(); // past half the block: reserves up to 20
      started = finished.length;
      await store.close();
      busyAfterClose = inFlight;
    } finally {
      // Let the background write end so that this test leaks nothing either way.
      await Promise.all(finished);
      Deno.open = realOpen;
    }
    assert.equal(started, 1, "a background reservation was started");
    assert.equal(busyAfterClose, 0, "close() resolved while a background write was running");
    assert.equal(readMark(dir), "6\n");
  });
});

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

Deno.test("TokenStore.open() throws DataDirError on a corrupt mark, saying what to do", async (t) => {
  const corrupt = [
    "garbage\n",
    "garbage",
    "",
    "\n",
    "-5\n",
    "-1",
    "+5\n",
    "18446744073709551616\n",
    "99999999999999999999\n",
    "123456789012345678901234567890\n",
    "1e3\n",
    "0x10\n",
    "1.5\n",
    " 12\n",
    "12 \n",
    "12\n\n",
    "1\n2\n",
    "12\r\n",
    "١٢\n",
  ];
  for (const text of corrupt) {
    await t.step(JSON.stringify(text), async () => {
      await withTempDir((dir) => {
        Deno.writeTextFileSync(`${dir}/tokens`, text);
        const error = throwsA(() => TokenStore.open(dir), DataDirError);
        assert.equal(error.name, "DataDirError");
        assert.ok(error.message.includes(`${dir}/tokens`), error.message);
        assert.match(error.message, /corrupt/);
        assert.match(error.message, /[Ww]rite .*number above every token/);
        // The mark is left alone for the operator to fix.
        assert.equal(readMark(dir), text);
      });
    });
  }
  await t.step("after fixing the file, the dir opens (the lock was released)", async () => {
    await withTempDir(async (dir) => {
      Deno.writeTextFileSync(`${dir}/tokens`, "garbage\n");
      throwsA(() => TokenStore.open(dir), DataDirError);
      Deno.writeTextFileSync(`${dir}/tokens`, "500\n");
      const store = TokenStore.open(dir);
      try {
        assert.equal(store.next(), 501n);
      } finally {
        await store.close();
      }
    });
  });
});

Deno.test("TokenStore.open() accepts marks written by hand", async (t) => {
  const good: [string, bigint][] = [
    ["0\n", 1n],
    ["0", 1n],
    ["7", 8n],
    ["007\n", 8n],
    ["9007199254740992\n", 9007199254740993n],
    ["18446744073709551613\n", 18446744073709551614n],
  ];
  for (const [text, next] of good) {
    await t.step(JSON.stringify(text), async () => {
      await withTempDir(async (dir) => {
        Deno.writeTextFileSync(`${dir}/tokens`, text);
        const store = TokenStore.open(dir);
        try {
          assert.equal(store.next(), next);
        } finally {
          await store.close();
        }
      });
    });
  }
});

Deno.test("TokenStore.open() throws DataDirError for an unusable dir", async (t) => {
  await t.step("a data dir under a regular file (ENOTDIR)", async () => {
    await withTempDir((dir) => {
      Deno.writeTextFileSync(`${dir}/file`, "x");
      const error = throwsA(() => TokenStore.open(`${dir}/file/data`), DataDirError);
      assert.equal(error.name, "DataDirError");
      assert.ok(error.message.includes(`${dir}/file/data`), error.message);
      assert.match(error.message, /--data-dir/);
    });
  });
  await t.step("a data dir that is a regular file", async () => {
    await withTempDir((dir) => {
      Deno.writeTextFileSync(`${dir}/file`, "x");
      const error = throwsA(() => TokenStore.open(`${dir}/file`), DataDirError);
      assert.ok(error.message.includes(`${dir}/file`), error.message);
      assert.match(error.message, /--data-dir/);
    });
  });
  await t.step("a tokens path that is a directory", async () => {
    await withTempDir((dir) => {
      Deno.mkdirSync(`${dir}/tokens`);
      const error = throwsA(() => TokenStore.open(dir), DataDirError);
      assert.ok(error.message.includes(`${dir}/tokens`), error.message);
    });
  });
  await t.step("a lock path that is a directory", async () => {
    await withTempDir((dir) => {
      Deno.mkdirSync(`${dir}/lock`);
      const error = throwsA(() => TokenStore.open(dir), DataDirError);
      assert.ok(error.message.includes(dir), error.message);
    });
  });
});

Deno.test("TokenStore.open() throws DataDirError while another store holds the dir", async () => {
  await withTempDir(async (dir) => {
    const first = TokenStore.open(dir);
    try {
      assert.equal(first.next(), 1n);
      const error = throwsA(() => TokenStore.open(dir), DataDirError);
      assert.match(error.message, /in use/);
      assert.ok(error.message.includes(dir), error.message);
      assert.match(error.message, /--data-dir/);
      // The failed open did not release the first store's lock, nor disturb it.
      throwsA(() => TokenStore.open(dir), DataDirError);
      assert.equal(first.next(), 2n);
    } finally {
      await first.close();
    }
    const again = TokenStore.open(dir);
    try {
      assert.equal(again.next(), 3n);
    } finally {
      await again.close();
    }
  });
});

Deno.test("TokenStore.open() throws TokensExhaustedError when the mark is 2^64-1", async () => {
  await withTempDir(async (dir) => {
    Deno.writeTextFileSync(`${dir}/tokens`, `${MAX_TOKEN}\n`);
    const error = throwsA(() => TokenStore.open(dir), TokensExhaustedError);
    assert.equal(error.name, "TokensExhaustedError");
    assert.ok(error.message.includes("18446744073709551615"), error.message);
    assert.equal(readMark(dir), `${MAX_TOKEN}\n`, "the mark is left alone");
    // The dir is not left locked.
    Deno.writeTextFileSync(`${dir}/tokens`, "1\n");
    const store = TokenStore.open(dir);
    await store.close();
  });
});

Deno.test("next() issues 2^64-1 once, then throws TokensExhaustedError", async () => {
  await withTempDir(async (dir) => {
    Deno.writeTextFileSync(`${dir}/tokens`, `${MAX_TOKEN - 1n}\n`);
    const store = TokenStore.open(dir);
    try {
      assert.equal(store.reserved, MAX_TOKEN, "the reservation stops at 2^64-1");
      assert.equal(readMark(dir), `${MAX_TOKEN}\n`);
      assert.equal(store.next(), 18446744073709551615n);
      throwsA(() => store.next(), TokensExhaustedError);
      throwsA(() => store.next(), TokensExhaustedError);
      assert.equal(store.last, MAX_TOKEN);
    } finally {
      await store.close();
    }
    assert.equal(readMark(dir), `${MAX_TOKEN}\n`);
    throwsA(() => TokenStore.open(dir), TokensExhaustedError);
  });
});

Deno.test("next() keeps tokens exact above 2^53", async () => {
  await withTempDir(async (dir) => {
    Deno.writeTextFileSync(`${dir}/tokens`, `${2n ** 53n}\n`);
    const store = TokenStore.open(dir);
    try {
      assert.equal(store.next(), 9007199254740993n);
      assert.equal(store.next(), 9007199254740994n);
      assert.equal(store.next(), 9007199254740995n);
    } finally {
      await store.close();
    }
    assert.equal(readMark(dir), "9007199254740995\n");
  });
});

Deno.test("raiseTo() makes every later token greater than the floor", async (t) => {
  await t.step("above the reserved block: persisted before it returns", async () => {
    await withTempDir(async (dir) => {
      const store = TokenStore.open(dir, { block: 100n });
      try {
        store.next();
        store.raiseTo(5000n);
        assert.ok(BigInt(readMark(dir)) >= 5000n, "the mark on disk covers the floor");
        assert.ok(store.reserved >= 5001n);
        assert.equal(store.next(), 5001n);
        assert.equal(store.next(), 5002n);
      } finally {
        await store.close();
      }
      assert.equal(readMark(dir), "5002\n");
    });
  });
  await t.step("within the reserved block", async () => {
    await withTempDir(async (dir) => {
      const store = TokenStore.open(dir, { block: 1000n });
      try {
        store.raiseTo(10n);
        assert.equal(store.next(), 11n);
      } finally {
        await store.close();
      }
      assert.equal(readMark(dir), "11\n");
    });
  });
  await t.step("at or below the last token: no change", async () => {
    await withTempDir(async (dir) => {
      const store = TokenStore.open(dir);
      try {
        for (let i = 0; i < 5; i++) store.next();
        store.raiseTo(3n);
        store.raiseTo(5n);
        store.raiseTo(0n);
        assert.equal(store.last, 5n);
        assert.equal(store.next(), 6n);
      } finally {
        await store.close();
      }
    });
  });
  await t.step("above 2^53, exactly", async () => {
    await withTempDir(async (dir) => {
      const store = TokenStore.open(dir);
      try {
        store.raiseTo(2n ** 60n + 7n);
        assert.equal(store.next(), 2n ** 60n + 8n);
      } finally {
        await store.close();
      }
      assert.equal(readMark(dir), `${2n ** 60n + 8n}\n`);
    });
  });
  await t.step("to 2^64-2: one token left", async () => {
    await withTempDir(async (dir) => {
      const store = TokenStore.open(dir);
      try {
        store.raiseTo(MAX_TOKEN - 1n);
        assert.equal(store.next(), MAX_TOKEN);
        throwsA(() => store.next(), TokensExhaustedError);
      } finally {
        await store.close();
      }
    });
  });
  await t.step("to 2^64-1: throws TokensExhaustedError", async () => {
    await withTempDir(async (dir) => {
      const store = TokenStore.open(dir);
      try {
        throwsA(() => store.raiseTo(MAX_TOKEN), TokensExhaustedError);
        throwsA(() => store.raiseTo(MAX_TOKEN + 10n), TokensExhaustedError);
        // The store still works below the limit.
        assert.equal(store.next(), 1n);
      } finally {
        await store.close();
      }
    });
  });
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
        const reply = await client.request("A k2 60 0");
        assert.match(reply ?? "", /^A k2 E \S/);
        assert.match(reply!, /exhausted/);
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
