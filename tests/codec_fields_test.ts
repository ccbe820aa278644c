/**
 * The wire codec's field helpers (docs/protocol.md): `keyError()`, `utf8Length()`,
 * `parseSeconds()`, `formatSeconds()` and `parseToken()`. Pure: no sockets.
 */

import assert from "node:assert/strict";
import {
  formatSeconds,
  keyError,
  MAX_TOKEN,
  parseSeconds,
  parseToken,
  utf8Length,
} from "../client/codec.ts";

const encoder = new TextEncoder();

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
