/**
 * Unit tests of the peer protocol's codec (every message type both ways, every malformed
 * line rejected without throwing, a seeded fuzz run) and of {@linkcode PeerInbound}, the
 * receiving half of a peer link, over a fake receiver. No sockets.
 *
 * @module
 */

import assert from "node:assert/strict";
import type { Carried } from "../server/cluster/handoff.ts";
import {
  decodePeer,
  encodePeer,
  freedLine,
  type HandoffBegin,
  type Heartbeat,
  heldLine,
  type PeerMessage,
} from "../server/cluster/peer_codec.ts";
import { PeerInbound, type PeerReceiver } from "../server/cluster/peer_inbound.ts";
import type { Replica } from "../server/cluster/replica.ts";
import type { Owner } from "../server/owners.ts";
import type { Logger } from "../server/log.ts";
import { mulberry32 } from "./_prng.ts";

const MAX = 18446744073709551615n;

function show(value: unknown): string {
  return JSON.stringify(value, (_key, v) => typeof v === "bigint" ? `${v}n` : v);
}

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
  ["PEER 2 10.0.0.1:7400", { type: "PEER", address: "10.0.0.1:7400" }],
  ["PEER 2 [::1]:7400", { type: "PEER", address: "[::1]:7400" }],
  ["HB active - 0 5000000 0a1b2c3d 1 1 0", {
    type: "HB",
    role: "active",
    active: undefined,
    synced: false,
    mark: 5_000_000n,
    activation: "0a1b2c3d",
    replica: true,
    floor: 1n,
    position: 0,
  }],
  [`HB standby 10.0.0.1:7400 1 ${MAX} - 0 0 9007199254740991`, {
    type: "HB",
    role: "standby",
    active: "10.0.0.1:7400",
    synced: true,
    mark: MAX,
    activation: undefined,
    replica: false,
    floor: 0n,
    position: 2 ** 53 - 1,
  }],
  ...(["starting", "handing-off", "leaving"] as const).map((role): [string, PeerMessage] => [
    `HB ${role} - 0 0 - 0 0 42`,
    {
      type: "HB",
      role,
      active: undefined,
      synced: false,
      mark: 0n,
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
  ["HANDOFF 0a1b2c3d 99 2000000 full - 0", {
    type: "HANDOFF",
    activation: "0a1b2c3d",
    lastToken: 99n,
    mark: 2_000_000n,
    mode: "full",
    predecessor: undefined,
    predecessorToken: 0n,
  }],
  ["HANDOFF b2 0 0 sync a1 77", {
    type: "HANDOFF",
    activation: "b2",
    lastToken: 0n,
    mark: 0n,
    mode: "sync",
    predecessor: "a1",
    predecessorToken: 77n,
  }],
  ["HANDOFFEND", { type: "HANDOFFEND" }],
  ["TAKEN c3", { type: "TAKEN", activation: "c3" }],
  ["SEQ 1", { type: "SEQ", seq: 1 }],
  ["H k 5 100 7", { type: "H", key: "k", token: 5n, remainingMs: 100, owner: 7 }],
  ["O 7 1 0123456789abcdef0123456789abcdef billing-7@host:42", {
    type: "O",
    id: 7,
    bound: true,
    session: "0123456789abcdef0123456789abcdef",
    name: "billing-7@host:42",
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
    [
      "ABORT",
      "ACK",
      "COMMIT",
      "F",
      "H",
      "HANDOFF",
      "HANDOFFEND",
      "HB",
      "O",
      "OGONE",
      "PEER",
      "SEQ",
      "SNAP",
      "SNAPEND",
      "SYNC",
      "TAKEN",
      "W",
    ],
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
      "PEER 2",
      "PEER 2 a b",
      "HB active - 0 0 - 0 0",
      "HB active - 0 0 - 0 0 0 0",
      "SNAP a 1",
      "H k 1",
      "H k 1 1 1 1",
      "H k 1 1 0",
      "H k 1 1 x",
      "F k",
      "F k 1 1",
      "W",
      "W 1 2",
      "HANDOFF a 1 1 full -",
      "TAKEN",
      "TAKEN a b",
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
      "PEER 3 a:1",
      "PEER 02 a:1",
      "PEER 2 " + "a".repeat(301),
      "PEER 2 a\tb",
    ],
    "bad role": [
      "HB Active - 0 0 - 0 0 0",
      "HB handing_off - 0 0 - 0 0 0",
      "HB - - 0 0 - 0 0 0",
      "HB leader - 0 0 - 0 0 0",
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
      "HB active - 0 -1 - 0 0 0",
      "HB active - 0 0 - 0 18446744073709551616 0",
      "HANDOFF a 01 1 full - 0",
      "HANDOFF a 1 18446744073709551616 full - 0",
      "HANDOFF a 1 1 full - x",
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
    "bad flag": [
      "HB active - 2 0 - 0 0 0",
      "HB active - 0 0 - true 0 0",
      "HB active - 01 0 - 0 0 0",
      "HB active - 0 0 - - 0 0",
    ],
    "bad address or activation": [
      "HB active a\u00a0b 0 0 - 0 0 0",
      "HB active - 0 0 a.b 0 0 0",
      "HB active - 0 0 " + "a".repeat(65) + " 0 0 0",
      "HB active - 0 0 - 0 0 01",
      "HB active - 0 0 - 0 0 -1",
      "HB active - 0 0 - 0 0 9007199254740992",
      "SNAP a:b 1 1 0",
      "SNAP é 1 1",
      "TAKEN a/b",
      "TAKEN " + "a".repeat(65),
      "HANDOFF a=b 1 1 full - 0",
      "HANDOFF a 1 1 full a+b 0",
    ],
    "bad mode": ["HANDOFF a 1 1 FULL - 0", "HANDOFF a 1 1 - - 0", "HANDOFF a 1 1 partial - 0"],
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
        "TAKEN " + "a".repeat(64),
        "PEER 2 " + "a".repeat(300),
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
const ROLES = ["starting", "standby", "active", "handing-off", "leaving"];
/** Per type, the likely values of each field. */
const FIELDS: Record<string, string[][]> = {
  PEER: [["1"], ADDRESSES],
  HB: [ROLES, ["-", ...ADDRESSES], FLAGS, DECIMALS, ["-", ...ACTIVATIONS], FLAGS, DECIMALS],
  SYNC: [],
  SNAP: [ACTIVATIONS, DECIMALS, DECIMALS],
  H: [KEYS, TOKENS, ["1", "250", "30000", "9007199254740991"]],
  F: [KEYS, TOKENS],
  W: [DECIMALS],
  SNAPEND: [],
  HANDOFF: [ACTIVATIONS, DECIMALS, DECIMALS, ["sync", "full"], ["-", ...ACTIVATIONS], DECIMALS],
  HANDOFFEND: [],
  TAKEN: [ACTIVATIONS],
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
    [
      "ABORT",
      "ACK",
      "COMMIT",
      "F",
      "H",
      "HANDOFF",
      "HANDOFFEND",
      "HB",
      "O",
      "OGONE",
      "PEER",
      "SEQ",
      "SNAP",
      "SNAPEND",
      "SYNC",
      "TAKEN",
      "W",
    ],
  );
});

// ---------------------------------------------------------------------------------------
// PeerInbound

/** A receiver that logs every call as a line, with a replica that does the same. */
class FakeReceiver implements PeerReceiver {
  calls: string[] = [];
  frozen: number | undefined = undefined;
  following = true;
  /** The carried holders of the last takeOver. */
  carried: Carried[] | undefined = undefined;
  /** The carried owners of the last takeOver. */
  owners: Owner[] = [];
  readonly replica: Replica;

  constructor() {
    const calls = this.calls;
    this.replica = {
      begin: (activation: string, lastToken: bigint, floor: bigint) =>
        calls.push(`begin ${activation} ${lastToken} ${floor}`),
      held: (key: string, token: bigint, ms: number) => calls.push(`held ${key} ${token} ${ms}`),
      freed: (key: string, token: bigint) => calls.push(`freed ${key} ${token}`),
      mark: (mark: bigint) => calls.push(`mark ${mark}`),
      end: (activation: string) => calls.push(`end ${activation}`),
      batch: (active: string, n: number) => calls.push(`batch ${active} ${n}`),
    } as unknown as Replica;
  }

  frozenSince(): number | undefined {
    return this.frozen;
  }
  heardFrom(peer: string): void {
    this.calls.push(`heard ${peer}`);
  }
  heartbeat(peer: string, heartbeat: Heartbeat): void {
    this.calls.push(`hb ${peer} ${heartbeat.role} ${heartbeat.mark}`);
  }
  syncRequested(peer: string): void {
    this.calls.push(`sync ${peer}`);
  }
  follows(_peer: string): boolean {
    return this.following;
  }
  takeOver(
    peer: string,
    header: HandoffBegin,
    carried: Carried[] | undefined,
    owners: Owner[],
  ): void {
    this.carried = carried;
    this.owners = owners;
    this.calls.push(`takeOver ${peer} ${header.activation} ${header.mode}`);
  }
  handedOver(peer: string, activation: string): void {
    this.calls.push(`handedOver ${peer} ${activation}`);
  }
  acked(peer: string, n: number): void {
    this.calls.push(`acked ${peer} ${n}`);
  }
  handoffOutcome(peer: string, activation: string, committed: boolean): void {
    this.calls.push(`${committed ? "commit" : "abort"} ${peer} ${activation}`);
  }
  streamLost(peer: string): void {
    this.calls.push(`lost ${peer}`);
  }

  /** The calls so far but `heard`, forgotten. */
  take(): string[] {
    return this.calls.splice(0, this.calls.length).filter((c) => !c.startsWith("heard "));
  }
}

function inboundHarness(options: { openedAt?: number; trace?: boolean } = {}) {
  const receiver = new FakeReceiver();
  const warnings: string[] = [];
  const debug: string[] = [];
  const log: Logger = {
    debug: (m) => debug.push(m),
    info() {},
    warn: (m) => warnings.push(m),
    error() {},
  };
  let closes = 0;
  const inbound = new PeerInbound(receiver, "10.0.0.2:7400", {
    openedAt: options.openedAt ?? 1000,
    close: () => closes++,
    log,
    trace: options.trace,
  });
  return { receiver, inbound, warnings, debug, closes: () => closes };
}

Deno.test("PeerInbound hands each message to the receiver", () => {
  const h = inboundHarness();
  h.inbound.line("HB active - 0 5000000 0a1b2c3d 1 1 0");
  h.inbound.line("SYNC");
  h.inbound.line("TAKEN c3");
  h.inbound.line("COMMIT c3");
  h.inbound.line("ABORT d4");
  h.inbound.line("SEQ 3");
  h.inbound.line("ACK 2");
  h.inbound.line("PEER 2 10.0.0.2:7400");
  assert.deepEqual(h.receiver.take(), [
    "hb 10.0.0.2:7400 active 5000000",
    "sync 10.0.0.2:7400",
    "handedOver 10.0.0.2:7400 c3",
    "commit 10.0.0.2:7400 c3",
    "abort 10.0.0.2:7400 d4",
    "batch 10.0.0.2:7400 3",
    "acked 10.0.0.2:7400 2",
  ]);
  h.inbound.line("W 7");
  assert.ok(h.receiver.calls.includes("heard 10.0.0.2:7400"), "any message means alive");
  h.inbound.closed();
  assert.deepEqual(h.receiver.take(), ["mark 7", "lost 10.0.0.2:7400"]);
  assert.equal(h.closes(), 0);
});

Deno.test("PeerInbound closes the link on a malformed line, once, and ignores what follows", () => {
  const h = inboundHarness();
  h.inbound.line("SYNC");
  h.inbound.line("H k 0 1");
  assert.equal(h.closes(), 1);
  assert.equal(h.warnings.length, 1);
  assert.match(h.warnings[0], /10\.0\.0\.2:7400.*malformed/);
  h.inbound.line("bogus");
  h.inbound.line("SYNC");
  assert.equal(h.closes(), 1);
  assert.equal(h.warnings.length, 1);
  assert.deepEqual(h.receiver.take(), ["sync 10.0.0.2:7400"]);
});

Deno.test("PeerInbound applies a snapshot and the stream only while it follows the peer", async (t) => {
  await t.step("followed", () => {
    const h = inboundHarness();
    for (const line of ["SNAP a1 10 1 0", "H k 7 3000", "H j 9 10", "SNAPEND", "F k 7", "W 99"]) {
      h.inbound.line(line);
    }
    assert.deepEqual(h.receiver.take(), [
      "begin a1 10 1",
      "held k 7 3000",
      "held j 9 10",
      "end a1",
      "freed k 7",
      "mark 99",
    ]);
  });
  await t.step("not followed", () => {
    const h = inboundHarness();
    h.receiver.following = false;
    for (const line of ["SNAP a1 10 1 0", "H k 7 3000", "SNAPEND", "F k 7", "W 99"]) {
      h.inbound.line(line);
    }
    assert.deepEqual(h.receiver.take(), []);
  });
  await t.step("no longer followed before SNAPEND", () => {
    const h = inboundHarness();
    h.inbound.line("SNAP a1 10 1 0");
    h.inbound.line("H k 7 3000");
    h.receiver.following = false;
    h.inbound.line("H j 9 10");
    h.inbound.line("SNAPEND");
    assert.deepEqual(h.receiver.take(), ["begin a1 10 1", "held k 7 3000"]);
  });
  await t.step("SNAPEND without SNAP", () => {
    const h = inboundHarness();
    h.inbound.line("SNAPEND");
    h.receiver.following = false;
    h.inbound.line("SNAP a1 1 1 0");
    h.receiver.following = true;
    h.inbound.line("SNAPEND");
    assert.deepEqual(h.receiver.take(), [], "no snapshot was begun");
  });
});

Deno.test("PeerInbound collects the holders of a full handover and takes over with them", async (t) => {
  await t.step("full", () => {
    const h = inboundHarness();
    h.inbound.line("HANDOFF b2 99 2000000 full a1 50");
    h.inbound.line("O 3 1 0123456789abcdef0123456789abcdef billing-7");
    h.inbound.line("H k 7 3000 3");
    h.inbound.line("H é 8 1");
    assert.deepEqual(h.receiver.take(), [], "the holders are not replicated");
    h.inbound.line("HANDOFFEND");
    assert.deepEqual(h.receiver.take(), ["takeOver 10.0.0.2:7400 b2 full"]);
    assert.deepEqual(h.receiver.carried, [
      { key: "k", token: 7n, remainingMs: 3000, owner: 3 },
      { key: "é", token: 8n, remainingMs: 1, owner: 0 },
    ]);
    assert.deepEqual(h.receiver.owners, [
      { id: 3, bound: true, session: "0123456789abcdef0123456789abcdef", name: "billing-7" },
    ]);
    // After the handover H lines are the stream's again.
    h.inbound.line("H k 9 10");
    assert.deepEqual(h.receiver.take(), ["held k 9 10"]);
  });
  await t.step("sync", () => {
    const h = inboundHarness();
    h.inbound.line("HANDOFF b2 99 2000000 sync - 0");
    h.inbound.line("HANDOFFEND");
    assert.deepEqual(h.receiver.take(), ["takeOver 10.0.0.2:7400 b2 sync"]);
    assert.equal(h.receiver.carried, undefined);
  });
  await t.step("HANDOFFEND alone does nothing", () => {
    const h = inboundHarness();
    h.inbound.line("HANDOFFEND");
    assert.deepEqual(h.receiver.take(), []);
  });
});

Deno.test("PeerInbound drops lines that waited in a connection opened before a freeze", async (t) => {
  await t.step("opened before", () => {
    const h = inboundHarness({ openedAt: 1000 });
    h.receiver.frozen = 5000;
    h.inbound.line("HANDOFF b2 99 2000000 full - 0");
    h.inbound.line("HANDOFFEND");
    assert.equal(h.closes(), 1);
    assert.deepEqual(h.receiver.calls, [], "not even heardFrom");
  });
  await t.step("opened after", () => {
    const h = inboundHarness({ openedAt: 6000 });
    h.receiver.frozen = 5000;
    h.inbound.line("SYNC");
    assert.equal(h.closes(), 0);
    assert.deepEqual(h.receiver.take(), ["sync 10.0.0.2:7400"]);
  });
});

Deno.test("PeerInbound traces messages when asked, heartbeats excepted", () => {
  const h = inboundHarness({ trace: true });
  h.inbound.line("HB active - 0 0 - 0 0 0");
  h.inbound.line("SYNC");
  assert.deepEqual(h.debug, ["10.0.0.2:7400 > SYNC"]);
});
