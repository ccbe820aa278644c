/**
 * Unit tests of the peer protocol's codec: every message type both ways, `heldLine()` and
 * `freedLine()`, and every malformed line rejected without throwing. No sockets.
 * The seeded fuzz run: peer_codec_fuzz_test.ts; {@linkcode PeerInbound}, the receiving half
 * of a peer link: peer_inbound_test.ts.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  decodePeer,
  encodePeer,
  freedLine,
  heldLine,
  type PeerMessage,
} from "../server/cluster/peer_codec.ts";
import { PEER_TYPES, show } from "./_peer_codec.ts";

const MAX = 18446744073709551615n;

/** Decodes `line`, which must be rejected. */
function malformed(line: string): string {
  let decoded: ReturnType<typeof decodePeer>;
  try {
    decoded = decodePeer(line);
  } catch (error) {
    throw new Error(`decodePeer(${JSON.stringify(line)}) threw`, { cause: error });
  }
  assert.equal(decoded.type, "error", `${JSON.stringify(line)} was accepted: ${show(decoded)}`);
  const { message } = decoded as { message: string };
  assert.equal(typeof message, "string");
  assert.ok(message.length > 0);
  return message;
}

// ---------------------------------------------------------------------------------------
// The codec

const messages: [string, PeerMessage][] = [
  ["PEER 5 10.0.0.1:7400", { type: "PEER", address: "10.0.0.1:7400" }],
  ["PEER 5 [::1]:7400", { type: "PEER", address: "[::1]:7400" }],
  ["HB active - 0 5000000 0a1b2c3d 1 1 0 5000000", {
    type: "HB",
    role: "active",
    active: undefined,
    synced: false,
    mark: 5_000_000n,
    own: 5_000_000n,
    activation: "0a1b2c3d",
    replica: true,
    floor: 1n,
    position: 0,
  }],
  [`HB standby 10.0.0.1:7400 1 ${MAX} - 0 0 9007199254740991 17`, {
    type: "HB",
    role: "standby",
    active: "10.0.0.1:7400",
    synced: true,
    mark: MAX,
    own: 17n,
    activation: undefined,
    replica: false,
    floor: 0n,
    position: 2 ** 53 - 1,
  }],
  ...(["starting", "handing-off", "leaving"] as const).map((role): [string, PeerMessage] => [
    `HB ${role} - 0 0 - 0 0 42 0`,
    {
      type: "HB",
      role,
      active: undefined,
      synced: false,
      mark: 0n,
      own: 0n,
      activation: undefined,
      replica: false,
      floor: 0n,
      position: 42,
    },
  ]),
  ["SYNC", { type: "SYNC" }],
  ["SNAP a1 0 1 0", { type: "SNAP", activation: "a1", lastToken: 0n, floor: 1n, position: 0 }],
  [`SNAP A-z_9 ${MAX} ${MAX} 7`, {
    type: "SNAP",
    activation: "A-z_9",
    lastToken: MAX,
    floor: MAX,
    position: 7,
  }],
  ["H orders:17 42 30000", { type: "H", key: "orders:17", token: 42n, remainingMs: 30_000 }],
  [`H é😀 ${MAX} 1`, { type: "H", key: "é😀", token: MAX, remainingMs: 1 }],
  ["F orders:17 1", { type: "F", key: "orders:17", token: 1n }],
  ["W 0", { type: "W", mark: 0n }],
  [`W ${MAX}`, { type: "W", mark: MAX }],
  ["SNAPEND", { type: "SNAPEND" }],
  ["HANDOFF 0a1b2c3d 99 2000000 full - 0 1", {
    type: "HANDOFF",
    activation: "0a1b2c3d",
    lastToken: 99n,
    mark: 2_000_000n,
    mode: "full",
    predecessor: undefined,
    predecessorToken: 0n,
    attempt: 1,
  }],
  ["HANDOFF b2 0 0 sync a1 77 9007199254740991", {
    type: "HANDOFF",
    activation: "b2",
    lastToken: 0n,
    mark: 0n,
    mode: "sync",
    predecessor: "a1",
    predecessorToken: 77n,
    attempt: 2 ** 53 - 1,
  }],
  ["HANDOFFEND", { type: "HANDOFFEND" }],
  ["TAKEN c3 7", { type: "TAKEN", activation: "c3", attempt: 7 }],
  ["SEQ 1", { type: "SEQ", seq: 1 }],
  ["H k 5 100 7", { type: "H", key: "k", token: 5n, remainingMs: 100, owner: 7 }],
  ["O 7 1 0123456789abcdef0123456789abcdef billing-7@host:42", {
    type: "O",
    id: 7,
    bound: true,
    session: "0123456789abcdef0123456789abcdef",
    name: "billing-7@host:42",
  }],
  ["O 8 0 3f2504e0-4f89-41d3-9a0c-0305e82c3301 uuid-client", {
    type: "O",
    id: 8,
    bound: false,
    session: "3f2504e0-4f89-41d3-9a0c-0305e82c3301",
    name: "uuid-client",
  }],
  ["O 9 1 Session_ID-0123456 short", {
    type: "O",
    id: 9,
    bound: true,
    session: "Session_ID-0123456",
    name: "short",
  }],
  ["O 2147483647 0 - nc", {
    type: "O",
    id: 2147483647,
    bound: false,
    session: undefined,
    name: "nc",
  }],
  ["OGONE 7", { type: "OGONE", id: 7 }],
  ["COMMIT d4", { type: "COMMIT", activation: "d4" }],
  ["ABORT e5", { type: "ABORT", activation: "e5" }],
  ["ACK 9007199254740991", { type: "ACK", seq: 9007199254740991 }],
];

Deno.test("encodePeer() and decodePeer() round-trip every message type", () => {
  const types = new Set<string>();
  for (const [line, message] of messages) {
    types.add(message.type);
    assert.equal(encodePeer(message), line);
    assert.deepEqual(decodePeer(line), message, line);
  }
  assert.deepEqual(
    [...types].sort(),
    PEER_TYPES,
  );
});

Deno.test("heldLine() and freedLine() build what encodePeer() builds", () => {
  assert.equal(
    heldLine("k", 7n, 250),
    encodePeer({ type: "H", key: "k", token: 7n, remainingMs: 250 }),
  );
  assert.equal(freedLine("k", 7n), encodePeer({ type: "F", key: "k", token: 7n }));
});

Deno.test("decodePeer() rejects malformed lines without throwing", async (t) => {
  const cases: Record<string, string[]> = {
    "wrong field count": [
      "SYNC x",
      "SNAPEND 1",
      "HANDOFFEND x",
      "PEER 5",
      "PEER 5 a b",
      "HB active - 0 0 - 0 0 0",
      "HB active - 0 0 - 0 0 0 0 0",
      "SNAP a 1",
      "H k 1",
      "H k 1 1 1 1",
      "H k 1 1 0",
      "H k 1 1 x",
      "F k",
      "F k 1 1",
      "W",
      "W 1 2",
      "HANDOFF a 1 1 full - 0",
      "HANDOFF a 1 1 full - 0 1 1",
      "TAKEN a",
      "TAKEN a 1 1",
      "H k  1", // a doubled space is an empty field
      "W 1 ",
    ],
    "unknown type": [
      "",
      " ",
      "sync",
      "HELLO 1",
      "A k 30 0",
      "h k 1 1",
      " SYNC",
      "SYNC\r",
      "__proto__",
      "constructor",
      "toString x",
      "hasOwnProperty 1 2",
      "x".repeat(10_000),
    ],
    "bad handshake": [
      "PEER 1 a:1",
      "PEER 2 a:1",
      "PEER 02 a:1",
      "PEER 5 " + "a".repeat(301),
      "PEER 5 a\tb",
    ],
    "bad role": [
      "HB Active - 0 0 - 0 0 0 0",
      "HB handing_off - 0 0 - 0 0 0 0",
      "HB - - 0 0 - 0 0 0 0",
      "HB leader - 0 0 - 0 0 0 0",
    ],
    "non-decimal or too large a number": [
      "W -1",
      "W +1",
      "W 01",
      "W 1.0",
      "W 1e3",
      "W 0x10",
      "W ",
      "W ١",
      "W 18446744073709551616",
      "W 99999999999999999999",
      "W 100000000000000000000",
      "SNAP a x 1 0",
      "SNAP a 1 18446744073709551616 0",
      "SNAP a 1 1 01",
      "HB active - 0 -1 - 0 0 0 0",
      "HB active - 0 0 - 0 18446744073709551616 0 0",
      "HB active - 0 0 - 0 0 0 18446744073709551616",
      "HB active - 0 0 - 0 0 0 -1",
      "HANDOFF a 01 1 full - 0 1",
      "HANDOFF a 1 18446744073709551616 full - 0 1",
      "HANDOFF a 1 1 full - x 1",
      "H k 18446744073709551616 1",
      "F k -1",
      "F k 1n",
    ],
    "token 0 where a token must be >= 1": ["H k 0 1", "F k 0", "H k 00 1"],
    "bad key": [
      "H k\u0001 1 1",
      "F k\u007f 1",
      "F k\u0085 1",
      "H k\t 1 1",
      "F k\u00a0x 1",
      "F k\u2028 1",
      "F \u3000 1",
      "H " + "k".repeat(251) + " 1 1",
      "F " + "é".repeat(126) + " 1", // 252 bytes
      "F \ud800 1", // a lone surrogate
    ],
    "bad session id (the hello's rule: 16-64 letters, digits, - or _)": [
      "O 7 1 0123456789abcde name",
      "O 7 1 " + "a".repeat(65) + " name",
      "O 7 1 0123456789abcdef.0 name",
      "O 7 1 0123456789abcdef\u00e9 name",
    ],
    "bad flag": [
      "HB active - 2 0 - 0 0 0 0",
      "HB active - 0 0 - true 0 0 0",
      "HB active - 01 0 - 0 0 0 0",
      "HB active - 0 0 - - 0 0 0",
    ],
    "bad address or activation": [
      "HB active a\u00a0b 0 0 - 0 0 0 0",
      "HB active - 0 0 a.b 0 0 0 0",
      "HB active - 0 0 " + "a".repeat(65) + " 0 0 0 0",
      "HB active - 0 0 - 0 0 01 0",
      "HB active - 0 0 - 0 0 -1 0",
      "HB active - 0 0 - 0 0 9007199254740992 0",
      "SNAP a:b 1 1 0",
      "SNAP é 1 1",
      "TAKEN a/b 1",
      "TAKEN " + "a".repeat(65) + " 1",
      "HANDOFF a=b 1 1 full - 0 1",
      "HANDOFF a 1 1 full a+b 0 1",
    ],
    "bad attempt": [
      "HANDOFF a 1 1 full - 0 0",
      "HANDOFF a 1 1 full - 0 01",
      "HANDOFF a 1 1 full - 0 x",
      "TAKEN a 0",
      "TAKEN a -1",
      "TAKEN a 9007199254740992",
    ],
    "bad mode": [
      "HANDOFF a 1 1 FULL - 0 1",
      "HANDOFF a 1 1 - - 0 1",
      "HANDOFF a 1 1 partial - 0 1",
    ],
    "remaining ms 0 or not a whole number": [
      "H k 1 0",
      "H k 1 00",
      "H k 1 01",
      "H k 1 -1",
      "H k 1 1.5",
      "H k 1 1e3",
      "H k 1 Infinity",
      "H k 1 NaN",
      "H k 1 x",
      "H k 1 99999999999999999", // 17 digits
    ],
    "batch number 0, not a whole number or above 2^53-1": [
      "SEQ 0",
      "SEQ -1",
      "SEQ 01",
      "ACK 1.5",
      "ACK x",
      "ACK 9007199254740992",
      "SEQ",
      "ACK 1 2",
    ],
  };
  for (const [what, lines] of Object.entries(cases)) {
    await t.step(what, () => {
      for (const line of lines) malformed(line);
    });
  }
  // At the edges: what is just inside is accepted.
  await t.step("the edges are accepted", () => {
    for (
      const line of [
        "H " + "k".repeat(250) + " 1 1",
        "F " + "é".repeat(125) + " 1",
        "TAKEN " + "a".repeat(64) + " 1",
        "PEER 5 " + "a".repeat(300),
        `F k ${MAX}`,
        "H k 1 9007199254740991",
      ]
    ) {
      assert.notEqual(decodePeer(line).type, "error", line);
    }
  });
});

Deno.test("decodePeer() rejects remaining ms it cannot carry exactly", () => {
  // Above 2^53-1 a number cannot hold every integer: the line would not survive a round trip.
  assert.equal(
    encodePeer(decodePeer("H k 1 9007199254740991") as PeerMessage),
    "H k 1 9007199254740991",
  );
  for (const ms of ["9007199254740992", "9007199254740993", "9999999999999999"]) {
    malformed(`H k 1 ${ms}`);
  }
});
