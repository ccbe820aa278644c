/**
 * Tests of the wire codec (docs/protocol.md): request parsing (well-formed lines, echoes,
 * unknown ops, field counts and separators) and reply parsing and formatting. Pure: no
 * sockets. Line endings are stripped by the connection layer, so they are not tested here.
 * Limits of each field: codec_limits_test.ts; seconds, tokens and keys: codec_fields_test.ts.
 */

import assert from "node:assert/strict";
import {
  DEFAULT_MAX_LEASE_MS,
  formatReply,
  formatRequest,
  MAX_KEY_BYTES,
  MAX_LINE_BYTES,
  MAX_TOKEN,
  parseReply,
  parseRequest,
  type Reply,
  type Request,
} from "../client/codec.ts";
import { accepted, rejected } from "./_codec.ts";

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
