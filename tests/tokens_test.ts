/**
 * Tests of the fencing-token high-water mark (docs/protocol.md, "Semantics") on `TokenStore`
 * in-process: opening a fresh or missing dir, reserving blocks on disk (in the background
 * before the current one runs out), strictly increasing tokens, close() persisting the
 * exact last token, tokens exact above 2^53, and raiseTo().
 * Corrupt, hand-written and unusable data dirs and exhaustion: tokens_errors_test.ts; the
 * real server process (crash, SIGTERM, exit codes): tokens_process_test.ts. Helpers:
 * tests/_tokens.ts.
 */

import assert from "node:assert/strict";
import { MAX_TOKEN } from "../client/codec.ts";
import { TokensExhaustedError, TokenStore } from "../server/tokens.ts";
import { waitFor } from "./_helpers.ts";
import { readMark, throwsA, withTempDir } from "./_tokens.ts";

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
        assert.ok(store.reserved >= 5000n);
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
