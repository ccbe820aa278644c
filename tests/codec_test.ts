/**
 * Tests of the wire codec (docs/protocol.md): request and reply parsing and formatting, seconds,
 * tokens and keys. Pure: no sockets. Line endings are stripped by the connection layer, so
 * they are not tested here.
 */

import assert from "node:assert/strict";
import {
  DEFAULT_MAX_LEASE_MS,
  formatReply,
  formatRequest,
  formatSeconds,
  keyError,
  MAX_KEY_BYTES,
  MAX_LINE_BYTES,
  MAX_TOKEN,
  parseReply,
  parseRequest,
  parseSeconds,
  parseToken,
  type Reply,
  type Request,
  type RequestError,
  utf8Length,
} from "../client/codec.ts";

const encoder = new TextEncoder();

function show(value: unknown): string {
  return JSON.stringify(value, (_key, v) => typeof v === "bigint" ? `${v}n` : v);
}

/** Parses `line` and asserts it is rejected; returns the error. */
function rejected(line: string, options?: { maxLeaseMs?: number }): RequestError {
  const result = parseRequest(line, options);
  assert.ok("kind" in result, `expected ${JSON.stringify(line)} to be rejected`);
  assert.equal(result.kind, "E");
  assert.equal(typeof result.message, "string");
  assert.ok(result.message.length > 0, "the message must not be empty");
  assert.ok(!result.message.includes("\n"), "the message must fit on the reply line");
  return result;
}

/** Parses `line` and asserts it is accepted; returns the request. */
function accepted(line: string, options?: { maxLeaseMs?: number }): Request {
  const result = parseRequest(line, options);
  assert.ok(
    !("kind" in result),
    `expected ${JSON.stringify(line)} to be accepted, got ${show(result)}`,
  );
  return result;
}

Deno.test("constants match docs/protocol.md", () => {
  assert.equal(MAX_TOKEN, 2n ** 64n - 1n);
  assert.equal(MAX_TOKEN, 18446744073709551615n);
  assert.equal(MAX_KEY_BYTES, 250);
  assert.equal(MAX_LINE_BYTES, 4096);
  assert.equal(DEFAULT_MAX_LEASE_MS, 86_400_000);
});

Deno.test("parseRequest() parses well-formed requests", async (t) => {
  await t.step("acquire", () => {
    assert.deepEqual(parseRequest("A orders:17 30 5"), {
      op: "A",
      key: "orders:17",
      leaseMs: 30_000,
      waitMs: 5_000,
    });
  });
  await t.step("acquire with decimal seconds", () => {
    assert.deepEqual(parseRequest("A k 0.25 0.5"), {
      op: "A",
      key: "k",
      leaseMs: 250,
      waitMs: 500,
    });
  });
  await t.step("acquire with wait 0 (no limit)", () => {
    assert.deepEqual(parseRequest("A k 1 0"), { op: "A", key: "k", leaseMs: 1000, waitMs: 0 });
    assert.deepEqual(parseRequest("A k 1 0.0"), { op: "A", key: "k", leaseMs: 1000, waitMs: 0 });
    assert.deepEqual(parseRequest("A k 1 000"), { op: "A", key: "k", leaseMs: 1000, waitMs: 0 });
  });
  await t.step("acquire with a tiny wait (try-lock)", () => {
    assert.deepEqual(parseRequest("A k 1 0.001"), { op: "A", key: "k", leaseMs: 1000, waitMs: 1 });
  });
  await t.step("release", () => {
    assert.deepEqual(parseRequest("R orders:17 1042"), {
      op: "R",
      key: "orders:17",
      token: 1042n,
    });
  });
  await t.step("extend", () => {
    assert.deepEqual(parseRequest("X orders:17 1042 30"), {
      op: "X",
      key: "orders:17",
      token: 1042n,
      leaseMs: 30_000,
    });
  });
  await t.step("tokens are bigint, exact above 2^53", () => {
    const big = 2n ** 53n + 1n;
    const r = accepted(`R k ${big}`);
    assert.equal(r.op, "R");
    assert.equal(typeof (r as { token: unknown }).token, "bigint");
    assert.equal((r as { token: bigint }).token, 9007199254740993n);
    const x = accepted(`X k ${MAX_TOKEN} 1`);
    assert.equal((x as { token: bigint }).token, MAX_TOKEN);
  });
  await t.step("keys with punctuation and non-ASCII letters", () => {
    for (const key of ["a", "orders:17", "-", "a/b.c_d-e", "ключ", "鍵", "🔒", "é".repeat(10)]) {
      assert.equal(accepted(`A ${key} 1 0`).key, key);
    }
  });
});

Deno.test("parseRequest() echoes `-` for a missing op or key", async (t) => {
  await t.step("empty line", () => {
    const e = rejected("");
    assert.equal(e.op, "-");
    assert.equal(e.key, "-");
  });
  await t.step("a lone space", () => {
    const e = rejected(" ");
    assert.equal(e.op, "-");
    assert.equal(e.key, "-");
  });
  await t.step("op alone", () => {
    for (const op of ["A", "R", "X"]) {
      const e = rejected(op);
      assert.equal(e.op, op);
      assert.equal(e.key, "-");
      assert.match(e.message, /key/);
    }
  });
  await t.step("op followed by a space only", () => {
    const e = rejected("A ");
    assert.equal(e.op, "A");
    assert.equal(e.key, "-");
  });
  await t.step("double space where the key should be", () => {
    const e = rejected("A  k 1 1");
    assert.equal(e.op, "A");
    assert.equal(e.key, "-");
  });
  await t.step("leading space: the op is missing", () => {
    const e = rejected(" A k 1 1");
    assert.equal(e.op, "-");
  });
});

Deno.test("parseRequest() answers an unknown op with `<op> <key> E unknown op`", async (t) => {
  await t.step("with a key", () => {
    const e = rejected("Z k 1 1");
    assert.deepEqual(e, { kind: "E", op: "Z", key: "k", message: "unknown op" });
  });
  await t.step("op alone", () => {
    assert.deepEqual(rejected("Z"), { kind: "E", op: "Z", key: "-", message: "unknown op" });
  });
  await t.step("lower-case ops are unknown", () => {
    for (const op of ["a", "r", "x"]) {
      assert.deepEqual(rejected(`${op} k 1 1`), {
        kind: "E",
        op,
        key: "k",
        message: "unknown op",
      });
    }
  });
  await t.step("multi-letter ops are unknown", () => {
    for (const op of ["AA", "ACQUIRE", "RELEASE", "-", "GET"]) {
      const e = rejected(`${op} k`);
      assert.equal(e.op, op);
      assert.equal(e.key, "k");
      assert.equal(e.message, "unknown op");
    }
  });
  await t.step("a reply status is not an op", () => {
    for (const op of ["T", "N", "M", "E"]) {
      assert.equal(rejected(`${op} k 1 1`).message, "unknown op");
    }
  });
  await t.step("a tab is not a separator: the op is unknown", () => {
    const e = rejected("A\tk 1 1");
    assert.equal(e.message, "unknown op");
    assert.equal(e.op, "A\tk");
  });
});

Deno.test("parseRequest() rejects a wrong number of fields", async (t) => {
  const cases: [string, RegExp][] = [
    ["A k", /missing field/],
    ["A k 1", /missing field/],
    ["A k 1 1 1", /too many fields/],
    ["R k", /missing field/],
    ["R k 1 1", /too many fields/],
    ["X k", /missing field/],
    ["X k 1", /missing field/],
    ["X k 1 1 1", /too many fields/],
  ];
  for (const [line, message] of cases) {
    await t.step(JSON.stringify(line), () => {
      const e = rejected(line);
      assert.equal(e.op, line[0]);
      assert.equal(e.key, "k");
      assert.match(e.message, message);
      assert.match(e.message, /usage: /);
    });
  }
});

Deno.test("parseRequest() rejects empty fields, extra spaces and other separators", async (t) => {
  const lines = [
    "A k  1 1", // double space
    "A k 1  1",
    "A k 1 ", // trailing space, field missing
    "A k 1 1 ", // trailing space
    "A k 1 1  ",
    "R k  1",
    "R k 1 ",
    "X k 1  1",
    "X k 1 1 ",
    "A k\t1\t1", // tabs are not separators
    "A k 1\t1",
    "R k\t1",
    "X k 1\t1",
    "A k 1 1\t",
    "A k 1 1\r", // a stray CR is not stripped here
    "A k 1 1\n",
    "A k 1 1\v",
    "A k 1 1\f",
    "A k 1\u00a01", // no-break space
  ];
  for (const line of lines) {
    await t.step(JSON.stringify(line), () => {
      const e = rejected(line);
      assert.equal(e.op, line[0]);
    });
  }
  await t.step("the echoed key of an empty-field error is the key", () => {
    assert.equal(rejected("A k  1 1").key, "k");
    assert.equal(rejected("R k  ").key, "k");
  });
  await t.step("an empty field says so, whatever the field count", () => {
    for (
      const line of [
        "A k  1",
        "A k 1 ",
        "R k ",
        "X k  1",
        "X k 1 ",
        "A k  1 1",
        "A k 1 1 ",
        "R k 1 ",
      ]
    ) {
      assert.match(rejected(line).message, /empty field.*single spaces/, JSON.stringify(line));
    }
  });
});

Deno.test("parseRequest() rejects a bad lease", async (t) => {
  const bad = [
    "0",
    "0.0",
    "0.000",
    "0.0000",
    "-1",
    "-0",
    "+1",
    "1e3",
    "1E3",
    "0x10",
    "0b1",
    "0o7",
    "NaN",
    "Infinity",
    "-Infinity",
    ".5",
    "5.",
    "1.2.3",
    "1,5",
    "1_000",
    " 1",
    "",
    "one",
    "1s",
    "١", // Arabic-Indic digit one
    "１", // fullwidth digit one
    "99999999999999999999999",
    "86401",
    "86400.001",
  ];
  for (const lease of bad) {
    await t.step(`acquire lease ${JSON.stringify(lease)}`, () => {
      const e = rejected(`A k ${lease} 1`);
      assert.equal(e.op, "A");
      assert.equal(e.key, "k");
      if (/^[0-9.]+$/.test(lease) && !lease.includes("..")) {
        assert.match(e.message, /lease/);
      }
    });
    await t.step(`extend lease ${JSON.stringify(lease)}`, () => {
      const e = rejected(`X k 1 ${lease}`);
      assert.equal(e.op, "X");
      assert.equal(e.key, "k");
    });
  }
  await t.step("lease 0 says it must be positive", () => {
    assert.equal(rejected("A k 0 1").message, "lease must be a positive number of seconds");
    assert.equal(rejected("X k 1 0").message, "lease must be a positive number of seconds");
  });
  await t.step("lease -1 is the protocol example", () => {
    assert.deepEqual(rejected("A orders:17 -1 5"), {
      kind: "E",
      op: "A",
      key: "orders:17",
      message: "lease must be a positive number of seconds",
    });
  });
  await t.step("lease above the default max says the max", () => {
    assert.match(rejected("A k 86401 0").message, /at most 86400 seconds/);
    assert.match(rejected("X k 7 86400.001").message, /at most 86400 seconds/);
    assert.match(rejected("A k 99999999999999999999999 0").message, /lease/);
  });
});

Deno.test("parseRequest() accepts a lease up to the max", async (t) => {
  await t.step("default max 86400 s", () => {
    assert.equal((accepted("A k 86400 0") as { leaseMs: number }).leaseMs, 86_400_000);
    assert.equal((accepted("X k 1 86400") as { leaseMs: number }).leaseMs, 86_400_000);
    assert.equal((accepted("A k 86400.000 0") as { leaseMs: number }).leaseMs, 86_400_000);
  });
  await t.step("smallest lease rounds up to 1 ms", () => {
    assert.equal((accepted("A k 0.0001 0") as { leaseMs: number }).leaseMs, 1);
    assert.equal((accepted("X k 1 0.0000001") as { leaseMs: number }).leaseMs, 1);
  });
  await t.step("a custom maxLeaseMs", () => {
    const options = { maxLeaseMs: 1500 };
    assert.equal((accepted("A k 1.5 0", options) as { leaseMs: number }).leaseMs, 1500);
    assert.equal((accepted("X k 1 1.5", options) as { leaseMs: number }).leaseMs, 1500);
    assert.match(rejected("A k 1.501 0", options).message, /at most 1\.5 seconds/);
    assert.match(rejected("A k 1.5001 0", options).message, /at most 1\.5 seconds/);
    assert.match(rejected("X k 1 2", options).message, /at most 1\.5 seconds/);
    assert.match(rejected("A k 86400 0", options).message, /at most 1\.5 seconds/);
  });
  await t.step("a custom maxLeaseMs above the default", () => {
    const options = { maxLeaseMs: 100 * 86_400_000 };
    assert.equal(
      (accepted("A k 8640000 0", options) as { leaseMs: number }).leaseMs,
      8_640_000_000,
    );
    assert.match(rejected("A k 8640000.001 0", options).message, /at most 8640000 seconds/);
  });
});

Deno.test("parseRequest() rejects a bad wait", async (t) => {
  const bad = [
    "-1",
    "-0",
    "+1",
    "1e3",
    "0x10",
    "NaN",
    "Infinity",
    ".5",
    "5.",
    "1.2.3",
    "",
    "forever",
  ];
  for (const wait of bad) {
    await t.step(`wait ${JSON.stringify(wait)}`, () => {
      const e = rejected(`A k 1 ${wait}`);
      assert.equal(e.op, "A");
      assert.equal(e.key, "k");
    });
  }
  await t.step("a negative wait says what a wait is", () => {
    assert.equal(rejected("A k 1 -1").message, "wait must be a number of seconds, 0 or more");
  });
});

Deno.test("parseRequest() accepts any well-formed wait, however large", () => {
  assert.equal((accepted("A k 1 86401") as { waitMs: number }).waitMs, 86_401_000);
  assert.equal((accepted("A k 1 999999999999") as { waitMs: number }).waitMs, 999_999_999_999_000);
  // Beyond 10^12 s (31,700 years) a wait is no limit at all, which the protocol spells 0.
  const huge = accepted("A k 1 99999999999999999999999") as { waitMs: number };
  assert.equal(huge.waitMs, 0);
  assert.equal(formatRequest(huge as Parameters<typeof formatRequest>[0]), "A k 1 0");
});

Deno.test("parseRequest() rejects a bad token", async (t) => {
  const bad = [
    "0",
    "00",
    "01",
    "007",
    "-1",
    "+1",
    "1.0",
    "1e3",
    "0x10",
    "NaN",
    "Infinity",
    "abc",
    "18446744073709551616",
    "18446744073709551617",
    "99999999999999999999",
    "100000000000000000000",
    "999999999999999999999999999",
    "１", // fullwidth digit one
  ];
  for (const token of bad) {
    await t.step(`release token ${JSON.stringify(token)}`, () => {
      const e = rejected(`R k ${token}`);
      assert.equal(e.op, "R");
      assert.equal(e.key, "k");
      assert.match(e.message, /token/);
    });
    await t.step(`extend token ${JSON.stringify(token)}`, () => {
      const e = rejected(`X k ${token} 1`);
      assert.equal(e.op, "X");
      assert.equal(e.key, "k");
      assert.match(e.message, /token/);
    });
  }
});

Deno.test("parseRequest() accepts tokens from 1 to 2^64-1", () => {
  for (
    const token of [1n, 9n, 10n, 2n ** 53n, 2n ** 53n + 1n, 2n ** 63n, MAX_TOKEN - 1n, MAX_TOKEN]
  ) {
    assert.deepEqual(parseRequest(`R k ${token}`), { op: "R", key: "k", token });
    assert.deepEqual(parseRequest(`X k ${token} 2`), { op: "X", key: "k", token, leaseMs: 2000 });
  }
});

Deno.test("parseRequest() rejects keys over 250 bytes or with whitespace or control characters", async (t) => {
  await t.step("ASCII at 250 bytes ok, 251 rejected", () => {
    assert.equal(accepted(`A ${"k".repeat(250)} 1 0`).key.length, 250);
    const e = rejected(`A ${"k".repeat(251)} 1 0`);
    assert.equal(e.key, "k".repeat(251));
    assert.match(e.message, /250 bytes/);
  });
  await t.step("2-byte characters: 125 × é ok, 125 × é + 1 byte rejected", () => {
    const key = "é".repeat(125);
    assert.equal(encoder.encode(key).length, 250);
    assert.equal(accepted(`A ${key} 1 0`).key, key);
    assert.match(rejected(`A ${key}a 1 0`).message, /250 bytes/);
    assert.match(rejected(`R ${"é".repeat(126)} 1`).message, /250 bytes/);
  });
  await t.step("3-byte characters: 83 × 鍵 + 1 byte ok, + 2 bytes rejected", () => {
    const key = "鍵".repeat(83) + "a";
    assert.equal(encoder.encode(key).length, 250);
    assert.equal(accepted(`A ${key} 1 0`).key, key);
    assert.match(rejected(`A ${key}a 1 0`).message, /250 bytes/);
    assert.match(rejected(`A ${"鍵".repeat(84)} 1 0`).message, /250 bytes/);
  });
  await t.step("4-byte emoji: 62 × 🔒 + 2 bytes ok, + 3 bytes rejected", () => {
    const key = "🔒".repeat(62) + "ab";
    assert.equal(encoder.encode(key).length, 250);
    assert.equal(accepted(`X ${key} 1 1`).key, key);
    assert.match(rejected(`X ${key}c 1 1`).message, /250 bytes/);
    assert.match(rejected(`A ${"🔒".repeat(63)} 1 0`).message, /250 bytes/);
  });
  const bad: [string, string][] = [
    ["U+0000", "\u0000"],
    ["U+0001", "\u0001"],
    ["U+001B (ESC)", "\u001b"],
    ["U+001F", "\u001f"],
    ["U+007F (DEL)", "\u007f"],
    ["U+0080", "\u0080"],
    ["U+0085 (NEL)", "\u0085"],
    ["U+009F", "\u009f"],
    ["tab", "\t"],
    ["vertical tab", "\v"],
    ["form feed", "\f"],
    ["CR", "\r"],
    ["LF", "\n"],
    ["U+00A0 (no-break space)", "\u00a0"],
    ["U+1680 (ogham space)", "\u1680"],
    ["U+2000 (en quad)", "\u2000"],
    ["U+2007 (figure space)", "\u2007"],
    ["U+200A (hair space)", "\u200a"],
    ["U+2028 (line separator)", "\u2028"],
    ["U+2029 (paragraph separator)", "\u2029"],
    ["U+202F (narrow no-break space)", "\u202f"],
    ["U+205F (math space)", "\u205f"],
    ["U+3000 (ideographic space)", "\u3000"],
    ["U+FEFF (BOM)", "\ufeff"],
  ];
  for (const [name, char] of bad) {
    await t.step(`${name} anywhere in the key`, () => {
      for (const key of [char, `a${char}`, `${char}a`, `a${char}b`]) {
        const e = rejected(`A ${key} 1 0`);
        assert.equal(e.op, "A");
        assert.match(e.message, /whitespace or control/);
        assert.match(rejected(`R ${key} 1`).message, /whitespace or control/);
        assert.match(rejected(`X ${key} 1 1`).message, /whitespace or control/);
      }
    });
  }
  await t.step("the key is checked before the other fields", () => {
    assert.match(rejected("A a\u0000 -1 x").message, /whitespace or control/);
    assert.match(rejected(`A ${"k".repeat(251)} 1`).message, /250 bytes/);
  });
});

Deno.test("parseRequest() never throws on arbitrary input", () => {
  const samples = [
    "\u0000",
    "\ud800",
    "A \ud800 1 1",
    "A \udc00\ud800 1 1",
    "A k 1 1".repeat(1000),
    " ".repeat(5000),
    "A " + "k".repeat(5000) + " 1 1",
    "R k " + "9".repeat(5000),
    "A k " + "9".repeat(5000) + " 1",
    "A k 1 " + "9".repeat(5000),
    "A k 1." + "9".repeat(5000) + " 1",
  ];
  for (const line of samples) {
    const result = parseRequest(line);
    assert.equal(typeof result, "object");
  }
});

Deno.test("keyError() describes a bad key and accepts a good one", () => {
  assert.equal(keyError("orders:17"), undefined);
  assert.equal(keyError("k".repeat(250)), undefined);
  assert.equal(keyError("é".repeat(125)), undefined);
  assert.equal(keyError("missing"), undefined);
  assert.equal(keyError(""), "missing key");
  assert.equal(keyError("k".repeat(251)), "key must be at most 250 bytes");
  assert.equal(keyError("é".repeat(126)), "key must be at most 250 bytes");
  assert.equal(keyError("a b"), "key must not contain whitespace or control characters");
  assert.equal(keyError("a\tb"), "key must not contain whitespace or control characters");
  assert.equal(keyError("a\u0085b"), "key must not contain whitespace or control characters");
  assert.equal(keyError("a\u3000b"), "key must not contain whitespace or control characters");
});

Deno.test("keyError() rejects a key that cannot be encoded as UTF-8 (lone surrogates)", () => {
  // A lone surrogate is sent as U+FFFD, so the server would see another key, and two
  // different keys ("\ud800", "\udbff") would become the same lock.
  for (const key of ["\ud800", "\udbff", "\udc00", "a\ud800b", "\udc00\ud800", "\ud800é"]) {
    assert.notEqual(keyError(key), undefined, `key ${JSON.stringify(key)} must be rejected`);
  }
});

Deno.test("utf8Length() counts UTF-8 bytes like TextEncoder", async (t) => {
  await t.step("valid text", () => {
    const samples = [
      "",
      "a",
      "orders:17",
      "é",
      "\u007f",
      "\u0080",
      "\u07ff",
      "\u0800",
      "鍵",
      "\uffff",
      "🔒",
      "\u{10000}",
      "\u{10ffff}",
      "aé鍵🔒",
      "é".repeat(125),
      "🔒".repeat(62) + "ab",
    ];
    for (const text of samples) {
      assert.equal(utf8Length(text), encoder.encode(text).length, JSON.stringify(text));
    }
  });
  await t.step("documented examples", () => {
    assert.equal(utf8Length("é"), 2);
    assert.equal(utf8Length("🔒"), 4);
    assert.equal(utf8Length("é".repeat(125)), 250);
  });
  await t.step("lone surrogates count as U+FFFD (3 bytes), as TextEncoder writes them", () => {
    const samples = [
      "\ud800",
      "\udc00",
      "a\ud800",
      "\udc00\ud800",
      "\ud800a",
      "\ud800é",
      "\ud800\ud800",
      "\ud800鍵",
    ];
    for (const text of samples) {
      assert.equal(utf8Length(text), encoder.encode(text).length, JSON.stringify(text));
    }
  });
});

Deno.test("parseSeconds() converts decimal seconds to ms, rounding up", async (t) => {
  const cases: [string, number][] = [
    ["0", 0],
    ["00", 0],
    ["0.0", 0],
    ["0.000000", 0],
    ["0.0001", 1],
    ["0.0009", 1],
    ["0.001", 1],
    ["0.0010", 1],
    ["0.0011", 2],
    ["0.0019", 2],
    ["0.00100000000000000001", 2],
    ["0.002", 2],
    ["0.25", 250],
    ["0.5", 500],
    ["1", 1000],
    ["01", 1000],
    ["1.5", 1500],
    ["1.50", 1500],
    ["1.500", 1500],
    ["1.5000", 1500],
    ["1.999", 1999],
    ["1.9991", 2000],
    ["1.9999999", 2000],
    ["30", 30_000],
    ["86400", 86_400_000],
    ["86400.0001", 86_400_001],
    ["123456789", 123_456_789_000],
  ];
  for (const [text, ms] of cases) {
    await t.step(`${JSON.stringify(text)} is ${ms} ms`, () => {
      assert.equal(parseSeconds(text), ms);
    });
  }
});

Deno.test("parseSeconds() returns NaN for anything but [0-9]+(.[0-9]+)?", () => {
  const bad = [
    "",
    " ",
    " 1",
    "1 ",
    "-1",
    "-0",
    "+1",
    "1e3",
    "1E3",
    "1e-3",
    "0x10",
    "0X10",
    "0b1",
    "NaN",
    "Infinity",
    "infinity",
    ".5",
    "5.",
    ".",
    "1.2.3",
    "1..2",
    "1,5",
    "1_000",
    "1s",
    "١",
    "１",
    "\u0000",
  ];
  for (const text of bad) assert.ok(Number.isNaN(parseSeconds(text)), JSON.stringify(text));
});

Deno.test("parseSeconds() never rounds down a large value", () => {
  // The result must be Infinity (too large to count exactly) or at least the exact value:
  // docs/protocol.md says seconds convert to ms rounding up, never down.
  const samples = [
    "99999999999999999999999",
    "1000000000000000",
    "999999999999999",
    "9007199254740.993",
    "9007199254741.001",
    "123456789012345.001",
  ];
  for (const text of samples) {
    const ms = parseSeconds(text);
    if (ms === Infinity) continue;
    const [whole, fraction = ""] = text.split(".");
    const exact = BigInt(whole) * 1000n + BigInt((fraction + "000").slice(0, 3)) +
      (/[1-9]/.test(fraction.slice(3)) ? 1n : 0n);
    assert.ok(BigInt(ms) >= exact, `${text} s gave ${BigInt(ms)} ms, below ${exact} ms`);
  }
  assert.equal(parseSeconds("99999999999999999999999"), Infinity);
});

Deno.test("formatSeconds() writes the shortest seconds that parse back to the same ms", async (t) => {
  const cases: [number, string][] = [
    [0, "0"],
    [1, "0.001"],
    [10, "0.01"],
    [100, "0.1"],
    [250, "0.25"],
    [500, "0.5"],
    [999, "0.999"],
    [1000, "1"],
    [1001, "1.001"],
    [1500, "1.5"],
    [30_000, "30"],
    [86_400_000, "86400"],
  ];
  for (const [ms, text] of cases) {
    await t.step(`${ms} ms is ${JSON.stringify(text)}`, () => {
      assert.equal(formatSeconds(ms), text);
    });
  }
  await t.step("fractions of a ms round up", () => {
    assert.equal(formatSeconds(0.1), "0.001");
    assert.equal(formatSeconds(1.2), "0.002");
    assert.equal(formatSeconds(999.5), "1");
    assert.equal(formatSeconds(1000.2), "1.001");
  });
  await t.step("round trip for many whole ms", () => {
    for (let ms = 0; ms <= 3000; ms++) assert.equal(parseSeconds(formatSeconds(ms)), ms);
    for (const ms of [86_399_999, 86_400_001, 2 ** 31, 2 ** 40 + 7, 999_999_999_999_999]) {
      assert.equal(parseSeconds(formatSeconds(ms)), ms, String(ms));
    }
  });
  await t.step("the output always matches the wire syntax", () => {
    for (const ms of [0, 1, 7, 70, 700, 7000, 12_345, 0.5, 1e12]) {
      assert.match(formatSeconds(ms), /^[0-9]+(\.[0-9]+)?$/);
    }
  });
});

Deno.test("parseToken() accepts 1 to 2^64-1 without sign or leading zeros", () => {
  assert.equal(parseToken("1"), 1n);
  assert.equal(parseToken("1042"), 1042n);
  assert.equal(parseToken("9007199254740993"), 2n ** 53n + 1n);
  assert.equal(parseToken("18446744073709551615"), MAX_TOKEN);
  assert.equal(parseToken("18446744073709551614"), MAX_TOKEN - 1n);
  assert.equal(parseToken("10000000000000000000"), 10n ** 19n);
  for (
    const bad of [
      "",
      "0",
      "00",
      "01",
      "-1",
      "+1",
      "1.0",
      "1e3",
      "0x10",
      " 1",
      "1 ",
      "NaN",
      "18446744073709551616",
      "99999999999999999999",
      "100000000000000000000",
      "１",
    ]
  ) {
    assert.equal(parseToken(bad), undefined, JSON.stringify(bad));
  }
});

Deno.test("formatRequest() writes the wire form", () => {
  assert.equal(formatRequest({ op: "A", key: "k", leaseMs: 30_000, waitMs: 500 }), "A k 30 0.5");
  assert.equal(formatRequest({ op: "A", key: "k", leaseMs: 1, waitMs: 0 }), "A k 0.001 0");
  assert.equal(formatRequest({ op: "R", key: "k", token: 7n }), "R k 7");
  assert.equal(
    formatRequest({ op: "R", key: "k", token: MAX_TOKEN }),
    "R k 18446744073709551615",
  );
  assert.equal(
    formatRequest({ op: "X", key: "orders:17", token: 2n ** 53n + 1n, leaseMs: 1500 }),
    "X orders:17 9007199254740993 1.5",
  );
  assert.equal(
    formatRequest({ op: "A", key: "k", leaseMs: 0.5, waitMs: 1.1 }),
    "A k 0.001 0.002",
    "fractions of a ms round up",
  );
});

Deno.test("formatRequest() and parseRequest() round-trip", async (t) => {
  await t.step("request → line → request", () => {
    const requests: Request[] = [
      { op: "A", key: "k", leaseMs: 30_000, waitMs: 5_000 },
      { op: "A", key: "k", leaseMs: 1, waitMs: 0 },
      { op: "A", key: "k", leaseMs: 1, waitMs: 1 },
      { op: "A", key: "é".repeat(125), leaseMs: 86_400_000, waitMs: 123_456_789 },
      { op: "A", key: "🔒", leaseMs: 1234, waitMs: 10 },
      { op: "R", key: "orders:17", token: 1n },
      { op: "R", key: "orders:17", token: MAX_TOKEN },
      { op: "X", key: "k".repeat(250), token: 2n ** 53n + 1n, leaseMs: 999 },
    ];
    for (const request of requests) {
      assert.deepEqual(parseRequest(formatRequest(request)), request);
    }
  });
  await t.step("line → request → line (canonical lines)", () => {
    for (
      const line of [
        "A orders:17 30 5",
        "A k 0.25 0",
        "A k 0.001 0.001",
        "R k 18446744073709551615",
        "X k 9007199254740993 86400",
      ]
    ) {
      const request = accepted(line);
      assert.equal(formatRequest(request), line);
    }
  });
  await t.step("non-canonical lines parse to the same request again", () => {
    for (
      const line of [
        "A k 01.500 000",
        "A k 0.0001 0.0011",
        "X k 5 1.00001",
      ]
    ) {
      const request = accepted(line);
      assert.deepEqual(parseRequest(formatRequest(request)), request, line);
    }
  });
  await t.step("a huge accepted wait formats to a line that parses again", () => {
    // parseRequest() accepts this wait (as Infinity ms); formatRequest() must not turn it
    // into something like "Infinity.NaN".
    const request = accepted("A k 1 99999999999999999999999");
    const line = formatRequest(request);
    assert.match(line, /^A k 1 [0-9]+(\.[0-9]+)?$/);
    assert.deepEqual(parseRequest(line), request);
  });
});

Deno.test("parseReply() parses every reply form of docs/protocol.md", async (t) => {
  const cases: [string, Reply][] = [
    ["A orders:17 A 1042", { op: "A", key: "orders:17", status: "A", token: 1042n }],
    ["A k A 1", { op: "A", key: "k", status: "A", token: 1n }],
    ["A k A 18446744073709551615", { op: "A", key: "k", status: "A", token: MAX_TOKEN }],
    ["A k A 9007199254740993", { op: "A", key: "k", status: "A", token: 2n ** 53n + 1n }],
    ["A orders:17 T", { op: "A", key: "orders:17", status: "T" }],
    ["R orders:17 R", { op: "R", key: "orders:17", status: "R" }],
    ["X orders:17 X", { op: "X", key: "orders:17", status: "X" }],
    ["R k N", { op: "R", key: "k", status: "N" }],
    ["X k N", { op: "X", key: "k", status: "N" }],
    [
      "A orders:17 M 10.0.0.2:7321",
      { op: "A", key: "orders:17", status: "M", text: "10.0.0.2:7321" },
    ],
    ["R k M [::1]:7321", { op: "R", key: "k", status: "M", text: "[::1]:7321" }],
    ["X k M host.example:1", { op: "X", key: "k", status: "M", text: "host.example:1" }],
    [
      "A orders:17 E lease must be a positive number of seconds",
      {
        op: "A",
        key: "orders:17",
        status: "E",
        text: "lease must be a positive number of seconds",
      },
    ],
    ["- - E line too long", { op: "-", key: "-", status: "E", text: "line too long" }],
    ["Z k E unknown op", { op: "Z", key: "k", status: "E", text: "unknown op" }],
    ["Z - E unknown op", { op: "Z", key: "-", status: "E", text: "unknown op" }],
    ["A - E missing key", { op: "A", key: "-", status: "E", text: "missing key" }],
    ["A k E", { op: "A", key: "k", status: "E", text: "" }],
    ["A k E  two  spaces ", { op: "A", key: "k", status: "E", text: " two  spaces " }],
    ["A é🔒 T", { op: "A", key: "é🔒", status: "T" }],
  ];
  for (const [line, reply] of cases) {
    await t.step(JSON.stringify(line), () => {
      assert.deepEqual(parseReply(line), reply);
    });
  }
});

Deno.test("parseReply() returns undefined for garbage", async (t) => {
  const garbage = [
    "",
    " ",
    "A",
    "A k",
    "A k ",
    "A  k T",
    " A k T",
    "A k  T",
    "A k Q",
    "A k AA 1",
    "A k a 1",
    "A k t",
    "A k T ",
    "A k T extra",
    "R k R 1",
    "X k X x",
    "R k N 1",
    "A k A",
    "A k A ",
    "A k A 0",
    "A k A 01",
    "A k A -1",
    "A k A 1.5",
    "A k A 18446744073709551616",
    "A k A 1 2",
    "A k A abc",
    "A k M",
    "A k M ",
    "hello world",
    "A\tk\tT",
    "listening on 127.0.0.1:7321 as active",
  ];
  for (const line of garbage) {
    await t.step(JSON.stringify(line), () => {
      assert.equal(parseReply(line), undefined);
    });
  }
});

Deno.test("parseReply() rejects a status that does not belong to the op", () => {
  // docs/protocol.md pairs statuses with ops: A→A|T, R→R|N, X→X|N; M and E for any op.
  for (
    const line of [
      "R k A 5",
      "X k A 5",
      "A k R",
      "X k R",
      "A k X",
      "R k X",
      "A k N",
      "R k T",
      "X k T",
    ]
  ) {
    assert.equal(parseReply(line), undefined, line);
  }
});

Deno.test("formatReply() writes every reply form and parseReply() reads it back", () => {
  const replies: [Reply, string][] = [
    [{ op: "A", key: "k", status: "A", token: 42n }, "A k A 42"],
    [{ op: "A", key: "k", status: "A", token: MAX_TOKEN }, "A k A 18446744073709551615"],
    [{ op: "A", key: "k", status: "T" }, "A k T"],
    [{ op: "R", key: "k", status: "R" }, "R k R"],
    [{ op: "X", key: "k", status: "X" }, "X k X"],
    [{ op: "R", key: "k", status: "N" }, "R k N"],
    [{ op: "X", key: "k", status: "N" }, "X k N"],
    [{ op: "A", key: "k", status: "M", text: "10.0.0.2:7321" }, "A k M 10.0.0.2:7321"],
    [{ op: "A", key: "k", status: "E", text: "lease too long" }, "A k E lease too long"],
    [{ op: "-", key: "-", status: "E", text: "line too long" }, "- - E line too long"],
    [{ op: "Z", key: "-", status: "E", text: "unknown op" }, "Z - E unknown op"],
  ];
  for (const [reply, line] of replies) {
    assert.equal(formatReply(reply), line);
    assert.deepEqual(parseReply(line), reply);
  }
  assert.equal(formatReply({ op: "A", key: "k", status: "T", text: "ignored" }), "A k T");
});

Deno.test("parseRequest() errors format into replies that parseReply() reads back", () => {
  for (
    const line of ["", "Z", "A", "A k", "A k -1 5", "R k 0", "X k 1 0", `A ${"k".repeat(251)} 1 1`]
  ) {
    const error = rejected(line);
    const reply = formatReply({ op: error.op, key: error.key, status: "E", text: error.message });
    assert.deepEqual(parseReply(reply), {
      op: error.op,
      key: error.key,
      status: "E",
      text: error.message,
    });
  }
});

Deno.test("parseRequest() agrees with exact arithmetic on random numbers (fast and thorough paths)", () => {
  let seed = 12345;
  const random = (n: number) => {
    seed = (seed * 1103515245 + 12345) % 2147483648;
    return seed % n;
  };
  const digits = (n: number) => Array.from({ length: n }, () => String(random(10))).join("");
  /** ms of decimal seconds, rounded up, by BigInt arithmetic; undefined beyond 10^12 s. */
  const exactMs = (text: string): number | undefined => {
    const [whole, fraction = ""] = text.split(".");
    if (BigInt(whole) >= 10n ** 12n) return undefined;
    const scaled = BigInt(whole + fraction.padEnd(3, "0").slice(0, 3));
    const rest = /[1-9]/.test(fraction.slice(3)) ? 1n : 0n;
    return Number(scaled + rest);
  };
  for (let i = 0; i < 20_000; i++) {
    const lease = digits(1 + random(14)) + (random(2) ? "." + digits(1 + random(6)) : "");
    const wait = digits(1 + random(14)) + (random(2) ? "." + digits(1 + random(6)) : "");
    const key = random(2) ? `k${i}` : `é${i}`; // ASCII keys take the fast path
    const parsed = parseRequest(`A ${key} ${lease} ${wait}`, { maxLeaseMs: 2 ** 52 });
    const leaseMs = exactMs(lease);
    const waitMs = exactMs(wait);
    if (leaseMs === undefined || leaseMs === 0 || leaseMs > 2 ** 52) {
      assert.equal((parsed as RequestError).kind, "E", `A ${key} ${lease} ${wait}`);
      continue;
    }
    assert.deepEqual(parsed, { op: "A", key, leaseMs, waitMs: waitMs ?? 0 }, `${lease} ${wait}`);
    const token = (random(9) + 1) + digits(random(20));
    const release = parseRequest(`R ${key} ${token}`);
    if (BigInt(token) <= MAX_TOKEN) {
      assert.deepEqual(release, { op: "R", key, token: BigInt(token) });
    } else assert.equal((release as RequestError).kind, "E");
  }
});
