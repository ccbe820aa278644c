/**
 * Unit tests of the inspection codec (docs/protocol.md, "Inspection"; issue 13): `I`, `S`
 * and `L` lines parsed and built, their replies built and parsed back, the `L` page kept
 * under the client's reply limit, and the old rules (unknown ops, echoed op and key). No
 * sockets.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  freeReply,
  heldReply,
  INSPECT_REPLY_BUDGET,
  inspectLine,
  isInspection,
  type KeyInfo,
  keyStateOf,
  keyStateOfInfo,
  locksLine,
  locksPageOf,
  locksReply,
  type NodeStatus,
  nodeStatusOf,
  parseInspection,
  parseReply,
  parseRequest,
  statusLine,
  statusReply,
  utf8Length,
} from "../client/codec.ts";
import { nodeStatus } from "./_status_fixture.ts";

function info(key: string, holder: string | null = "worker-1"): KeyInfo {
  return { key, token: "18446744073709551615", holder, leaseLeftSeconds: 29.5, waiters: 3 };
}

function status(rates: number[] = []): NodeStatus {
  return nodeStatus({ uptimeSeconds: 1.5, connections: 1, grantsPerSecond: rates });
}

Deno.test("isInspection() is true exactly for the ops I, S and L", () => {
  for (const line of ["I k", "S -", "L - 10", "I", "S", "L"]) assert.ok(isInspection(line), line);
  for (const line of ["A k 30 0", "R k 1", "X k 1 1", "IX k", "?", "", " I k", "HELLO 1 - a"]) {
    assert.ok(!isInspection(line), line);
  }
});

Deno.test("parseInspection() reads I, S and L, and what their fields mean", () => {
  assert.deepEqual(parseInspection("I orders:17"), { op: "I", key: "orders:17" });
  assert.deepEqual(parseInspection("S -"), { op: "S", key: "-" });
  assert.deepEqual(parseInspection("L - 1000"), {
    op: "L",
    key: "-",
    prefix: undefined,
    limit: 1000,
    after: undefined,
  });
  assert.deepEqual(parseInspection("L orders: 1 orders:17"), {
    op: "L",
    key: "orders:",
    prefix: "orders:",
    limit: 1,
    after: "orders:17",
  });
  assert.deepEqual(parseInspection("I é"), { op: "I", key: "é" });
});

Deno.test("parseInspection() answers bad input with an E that echoes op and key", () => {
  const cases: [string, string, string, RegExp][] = [
    ["I", "I", "-", /missing key/],
    ["I a b", "I", "a", /too many fields/],
    ["I a\tb", "I", "a\tb", /whitespace/],
    ["I -", "I", "-", /./], // `-` is a valid key for I: no error here
    ["S", "S", "-", /missing key; usage: S -/],
    ["S x", "S", "x", /usage: S -/],
    ["S - x", "S", "-", /usage: S -/],
    ["L", "L", "-", /missing key/],
    ["L -", "L", "-", /missing field/],
    ["L - 0", "L", "-", /limit must be a whole number from 1 to 1000/],
    ["L - 1001", "L", "-", /limit/],
    ["L - 01", "L", "-", /limit/],
    ["L - 1.5", "L", "-", /limit/],
    ["L - -1", "L", "-", /limit/],
    ["L - 10 a b", "L", "-", /too many fields/],
    ["L -  10", "L", "-", /empty field/],
    ["L - 10 a\u00a0b", "L", "-", /after: key must not contain whitespace/],
    ["L a\u0001 10", "L", "a\u0001", /control/],
  ];
  for (const [line, op, key, message] of cases) {
    const parsed = parseInspection(line);
    if (line === "I -") {
      assert.deepEqual(parsed, { op: "I", key: "-" });
      continue;
    }
    assert.ok("kind" in parsed, `${line} must be refused`);
    assert.equal(parsed.op, op, line);
    assert.equal(parsed.key, key, line);
    assert.match(parsed.message, message, line);
  }
});

Deno.test("the request parser still answers I, S and L as unknown ops (the bridge relays A/R/X only)", () => {
  for (const line of ["I k", "S -", "L - 10"]) {
    const parsed = parseRequest(line);
    assert.ok("kind" in parsed && parsed.message === "unknown op", line);
  }
});

Deno.test("inspection request builders write what the parser reads", () => {
  assert.equal(inspectLine("orders:17"), "I orders:17");
  assert.equal(statusLine(), "S -");
  assert.equal(locksLine(undefined, 10), "L - 10");
  assert.equal(locksLine("", 10), "L - 10");
  assert.equal(locksLine("orders:", 5, "orders:17"), "L orders: 5 orders:17");
  for (const line of [inspectLine("k"), statusLine(), locksLine("p", 7, "pz")]) {
    assert.ok(!("kind" in parseInspection(line)), line);
  }
});

Deno.test("an I reply round-trips through parseReply() and keyStateOf()", () => {
  const held = heldReply("k", 18446744073709551615n, 29_500, 2, "billing-7@host:42");
  assert.equal(held, "I k I 18446744073709551615 29.5 2 billing-7@host:42");
  assert.deepEqual(keyStateOf(parseReply(held)!), {
    key: "k",
    held: true,
    token: 18446744073709551615n,
    leaseLeft: 29.5,
    waiters: 2,
    holder: "billing-7@host:42",
  });
  const anonymous = heldReply("k", 7n, 0.2, 0, undefined);
  assert.equal(anonymous, "I k I 7 0.001 0 -", "lease left rounds up to whole ms; no name: -");
  assert.equal(keyStateOf(parseReply(anonymous)!)?.holder, undefined);
  assert.equal(freeReply("k"), "I k F");
  assert.deepEqual(keyStateOf(parseReply("I k F")!), { key: "k", held: false, waiters: 0 });
});

Deno.test("parseReply() accepts inspection statuses only for their own ops", () => {
  assert.equal(parseReply("I k F x"), undefined, "F carries nothing");
  assert.equal(parseReply("I k I"), undefined, "I needs its fields");
  assert.equal(parseReply("A k I 1 1 0 -"), undefined);
  assert.equal(parseReply("S - L {}"), undefined);
  assert.equal(parseReply("L - S {}"), undefined);
  assert.equal(parseReply("S - S"), undefined);
  assert.deepEqual(parseReply("I k M 10.0.0.2:7321"), {
    op: "I",
    key: "k",
    status: "M",
    text: "10.0.0.2:7321",
  });
  assert.deepEqual(parseReply("L - E no active node"), {
    op: "L",
    key: "-",
    status: "E",
    text: "no active node",
  });
  for (const bad of ["I k I x 1 0 -", "I k I 1 -1 0 -", "I k I 1 1 01 -", "I k I 1 1 0"]) {
    assert.equal(keyStateOf(parseReply(bad)!), undefined, bad);
  }
});

Deno.test("locksReply() builds a page that locksPageOf() and keyStateOfInfo() read back", () => {
  const line = locksReply("-", [info("a"), info("b", null)], false);
  assert.equal(
    line,
    'L - L {"locks":[{"key":"a","token":"18446744073709551615","holder":"worker-1",' +
      '"leaseLeftSeconds":29.5,"waiters":3},{"key":"b","token":"18446744073709551615",' +
      '"holder":null,"leaseLeftSeconds":29.5,"waiters":3}],"more":false}',
  );
  const page = locksPageOf(parseReply(line)!)!;
  assert.equal(page.more, false);
  assert.deepEqual(page.locks.map(keyStateOfInfo), [
    {
      key: "a",
      held: true,
      token: 18446744073709551615n,
      leaseLeft: 29.5,
      waiters: 3,
      holder: "worker-1",
    },
    { key: "b", held: true, token: 18446744073709551615n, leaseLeft: 29.5, waiters: 3 },
  ]);
  assert.equal(locksReply("orders:", [], false), 'L orders: L {"locks":[],"more":false}');
  assert.equal(keyStateOfInfo({ key: "a", token: "01" }), undefined);
  assert.equal(keyStateOfInfo({ ...info("a"), waiters: -1 }), undefined);
  assert.equal(locksPageOf(parseReply("L - L {not json")!), undefined);
});

Deno.test("locksReply() stops before 7,500 bytes and then says more, whatever the keys", () => {
  // 250-byte keys of 2-byte characters and 128-byte names: about 500 bytes an entry.
  const locks = Array.from({ length: 100 }, (_, i) => ({
    ...info(`${String(i).padStart(3, "0")}${"é".repeat(123)}`, "n".repeat(128)),
  }));
  const line = locksReply("-", locks, false);
  assert.ok(utf8Length(line) <= INSPECT_REPLY_BUDGET, `${utf8Length(line)} bytes`);
  assert.ok(utf8Length(line) > INSPECT_REPLY_BUDGET - 600, "the page is filled");
  const page = locksPageOf(parseReply(line)!)!;
  assert.equal(page.more, true);
  assert.ok(page.locks.length > 5 && page.locks.length < 100);
  assert.deepEqual(
    page.locks.map((l) => l.key),
    locks.slice(0, page.locks.length).map((l) => l.key),
  );
  // A full page that fits is not marked as having more.
  assert.equal(locksPageOf(parseReply(locksReply("-", locks.slice(0, 3), false))!)!.more, false);
});

Deno.test("statusReply() writes one line that nodeStatusOf() reads back, trimmed to fit", () => {
  const line = statusReply(status([1, 2, 3]));
  assert.ok(!line.includes("\n"));
  assert.deepEqual(nodeStatusOf(parseReply(line)!), status([1, 2, 3]));
  // 300 seconds of large rates and 40 peers do not fit: the oldest rates go first.
  const rates = Array.from({ length: 300 }, (_, i) => 1_000_000_000 + i);
  const big = status(rates);
  big.peers = Array.from({ length: 40 }, (_, i) => ({
    address: `node-${i}.lockd.example.internal:7321`,
    role: "standby",
    live: true,
    synced: true,
    lagMs: 0,
    lastHeardMs: 40,
  }));
  assert.ok(utf8Length(`S - S ${JSON.stringify(big)}`) > INSPECT_REPLY_BUDGET);
  const trimmed = nodeStatusOf(parseReply(statusReply(big))!)!;
  assert.ok(utf8Length(statusReply(big)) <= INSPECT_REPLY_BUDGET);
  assert.equal(trimmed.peers.length, 40);
  assert.ok(trimmed.grantsPerSecond.length < 300 && trimmed.grantsPerSecond.length > 100);
  assert.deepEqual(trimmed.grantsPerSecond, rates.slice(300 - trimmed.grantsPerSecond.length));
  assert.equal(nodeStatusOf(parseReply('S - S {"address":1}')!), undefined);
});
