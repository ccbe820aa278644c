/**
 * The wire codec's limits (docs/protocol.md, "Requests"): what `parseRequest()` refuses in a
 * lease, a wait, a token and a key, that it never throws, and that its fast and thorough
 * number paths agree with exact arithmetic. Pure: no sockets.
 */

import assert from "node:assert/strict";
import { formatRequest, MAX_TOKEN, parseRequest, type RequestError } from "../client/codec.ts";
import { accepted, rejected } from "./_codec.ts";

const encoder = new TextEncoder();

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
