/**
 * Unit tests of {@linkcode PeerInbound}, the receiving half of a peer link, over a fake
 * receiver that logs every call: messages handed on, a malformed line closing the link,
 * snapshots and the stream applied only while following the peer, full and sync handovers,
 * lines that waited since before a freeze, and tracing. No sockets.
 * The peer codec itself: peer_codec_test.ts and peer_codec_fuzz_test.ts.
 *
 * @module
 */

import assert from "node:assert/strict";
import type { Carried } from "../server/cluster/handoff.ts";
import type { HandoffBegin, Heartbeat } from "../server/cluster/peer_codec.ts";
import { PeerInbound, type PeerReceiver } from "../server/cluster/peer_inbound.ts";
import type { Replica } from "../server/cluster/replica.ts";
import type { Owner } from "../server/owners.ts";
import type { Logger } from "../server/log.ts";

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
  handedOver(peer: string, activation: string, attempt: number): void {
    this.calls.push(`handedOver ${peer} ${activation} ${attempt}`);
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
  h.inbound.line("HB active - 0 5000000 0a1b2c3d 1 1 0 5000000");
  h.inbound.line("SYNC");
  h.inbound.line("TAKEN c3 5");
  h.inbound.line("COMMIT c3");
  h.inbound.line("ABORT d4");
  h.inbound.line("SEQ 3");
  h.inbound.line("ACK 2");
  h.inbound.line("PEER 5 10.0.0.2:7400");
  assert.deepEqual(h.receiver.take(), [
    "hb 10.0.0.2:7400 active 5000000",
    "sync 10.0.0.2:7400",
    "handedOver 10.0.0.2:7400 c3 5",
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
    h.inbound.line("HANDOFF b2 99 2000000 full a1 50 1");
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
    h.inbound.line("HANDOFF b2 99 2000000 sync - 0 1");
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
    h.inbound.line("HANDOFF b2 99 2000000 full - 0 1");
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
  h.inbound.line("HB active - 0 0 - 0 0 0 0");
  h.inbound.line("SYNC");
  assert.deepEqual(h.debug, ["10.0.0.2:7400 > SYNC"]);
});
