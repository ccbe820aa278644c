/**
 * Tests of `TokenStore` refusing what it cannot use (docs/protocol.md, "Semantics"): a
 * corrupt mark (and the marks written by hand it accepts), an unusable data dir, a dir held
 * by another store (`DataDirError`, saying what to do), and tokens exhausted at 2^64-1
 * (`TokensExhaustedError`). In-process.
 * Issuing, reserving, closing and raiseTo(): tokens_test.ts; the real server process:
 * tokens_process_test.ts. Helpers: tests/_tokens.ts.
 */

import assert from "node:assert/strict";
import { MAX_TOKEN } from "../client/codec.ts";
import { DataDirError, TokensExhaustedError, TokenStore } from "../server/tokens.ts";
import { readMark, throwsA, withTempDir } from "./_tokens.ts";

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
  await t.step(
    "a mark that cannot be written, in a cluster (lane) as for a single node",
    async () => {
      await withTempDir((dir) => {
        Deno.mkdirSync(`${dir}/tokens.tmp-sync`); // every synchronous write of the mark fails
        for (const lane of [undefined, 0, 3]) {
          const error = throwsA(() => TokenStore.open(dir, { lane }), DataDirError);
          assert.match(error.message, /Cannot write the token mark.*--data-dir/);
        }
      });
    },
  );
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
