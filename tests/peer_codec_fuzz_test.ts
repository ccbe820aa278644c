/**
 * A seeded fuzz run of the peer protocol's codec: random lines, mostly well-formed fields
 * with near misses and junk mixed in, must never make `decodePeer()` throw, and every line
 * it accepts must re-encode to itself. No sockets.
 * Every message type and every malformed line: peer_codec_test.ts; {@linkcode PeerInbound}:
 * peer_inbound_test.ts.
 *
 * @module
 */

import assert from "node:assert/strict";
import { decodePeer, encodePeer, PEER_PROTOCOL_VERSION } from "../server/cluster/peer_codec.ts";
import { mulberry32 } from "./_prng.ts";
import { PEER_TYPES, show } from "./_peer_codec.ts";

/** Pieces a fuzzed line is built from: valid fields, near misses and junk. */
const PIECES = [
  "0",
  "1",
  "2",
  "42",
  "007",
  "-1",
  "1.5",
  "1e3",
  "9007199254740991",
  "9007199254740993",
  "9999999999999999",
  "18446744073709551615",
  "18446744073709551616",
  "-",
  "",
  "sync",
  "full",
  "active",
  "standby",
  "starting",
  "handing-off",
  "leaving",
  "a1",
  "0a1b2c3d",
  "a".repeat(64),
  "a".repeat(65),
  "10.0.0.1:7400",
  "orders:17",
  "é😀",
  "k\u0000",
  "k\u00a0",
  "\ud800",
  "k".repeat(250),
  "k".repeat(251),
  "PEER",
  "HB",
  "H",
  "\r",
];
const TYPES = [
  "PEER",
  "HB",
  "SYNC",
  "SNAP",
  "H",
  "F",
  "W",
  "SNAPEND",
  "HANDOFF",
  "HANDOFFEND",
  "TAKEN",
  "SEQ",
  "ACK",
  "COMMIT",
  "ABORT",
  "O",
  "OGONE",
  "HELLO",
  "hb",
  "",
];
const DECIMALS = ["0", "1", "42", "9007199254740991", "18446744073709551615"];
const TOKENS = ["1", "42", "18446744073709551615"];
const ACTIVATIONS = ["a1", "0a1b2c3d", "A-z_9", "a".repeat(64)];
const ADDRESSES = ["10.0.0.1:7400", "[::1]:7400", "host.example:1"];
const KEYS = ["k", "orders:17", "é😀", "k".repeat(250), "\uFFFD"];
const FLAGS = ["0", "1"];
const ATTEMPTS = ["1", "2", "9007199254740991"];
const ROLES = ["starting", "standby", "active", "handing-off", "leaving"];
/** Per type, the likely values of each field. */
const FIELDS: Record<string, string[][]> = {
  PEER: [[String(PEER_PROTOCOL_VERSION)], ADDRESSES],
  HB: [
    ROLES,
    ["-", ...ADDRESSES],
    FLAGS,
    DECIMALS,
    ["-", ...ACTIVATIONS],
    FLAGS,
    DECIMALS,
    ["0", "1", "42"],
    DECIMALS,
  ],
  SYNC: [],
  SNAP: [ACTIVATIONS, DECIMALS, DECIMALS],
  H: [KEYS, TOKENS, ["1", "250", "30000", "9007199254740991"]],
  F: [KEYS, TOKENS],
  W: [DECIMALS],
  SNAPEND: [],
  HANDOFF: [
    ACTIVATIONS,
    DECIMALS,
    DECIMALS,
    ["sync", "full"],
    ["-", ...ACTIVATIONS],
    DECIMALS,
    ATTEMPTS,
  ],
  HANDOFFEND: [],
  TAKEN: [ACTIVATIONS, ATTEMPTS],
  SEQ: [["1", "42", "9007199254740991"]],
  ACK: [["1", "7", "9007199254740991"]],
  COMMIT: [ACTIVATIONS],
  ABORT: [ACTIVATIONS],
  O: [["1", "7", "2147483647"], FLAGS, ["-", "0123456789abcdef0123456789abcdef"], KEYS],
  OGONE: [["1", "42"]],
};

/** A random line: mostly well-formed fields with a few near misses and junk mixed in. */
function fuzzLine(random: () => number): string {
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)];
  if (random() < 0.1) {
    // Raw characters, spaces included.
    const chars = Array.from(" 0123456789-HBFWSNAPakz\u00a0\u0001é😀:.");
    return Array.from({ length: Math.floor(random() * 20) }, () => pick(chars)).join("");
  }
  const type = pick(TYPES);
  const likely = FIELDS[type] ?? [];
  let count = likely.length;
  if (random() < 0.1) count += random() < 0.5 ? -1 : 1;
  const fields = [type];
  for (let i = 0; i < count; i++) {
    fields.push(i < likely.length && random() < 0.92 ? pick(likely[i]) : pick(PIECES));
  }
  return fields.join(" ");
}

Deno.test("decodePeer() never throws on random lines and re-encodes what it accepts", () => {
  const seed = 20240611;
  const random = mulberry32(seed);
  const runs = 20_000;
  const accepted = new Map<string, number>();
  let rejected = 0;
  for (let i = 0; i < runs; i++) {
    const line = fuzzLine(random);
    let decoded: ReturnType<typeof decodePeer>;
    try {
      decoded = decodePeer(line);
    } catch (error) {
      throw new Error(`seed ${seed}, run ${i}: decodePeer(${JSON.stringify(line)}) threw`, {
        cause: error,
      });
    }
    if (decoded.type === "error") {
      rejected++;
      continue;
    }
    accepted.set(decoded.type, (accepted.get(decoded.type) ?? 0) + 1);
    assert.equal(
      encodePeer(decoded),
      line,
      `seed ${seed}, run ${i}: ${JSON.stringify(line)} decoded as ${show(decoded)}`,
    );
    assert.deepEqual(decodePeer(encodePeer(decoded)), decoded);
  }
  // The run is worth something only if it rejected many lines and accepted every type.
  assert.ok(rejected > runs / 10 && rejected < runs * 0.9, `${rejected} of ${runs} rejected`);
  assert.deepEqual(
    [...accepted.keys()].sort(),
    PEER_TYPES,
  );
});
