/**
 * A deterministic cluster simulator: several {@linkcode ClusterNode}s in one test, on fake
 * time (`_sim_time.ts`), talking through the real peer codec and {@linkcode PeerInbound},
 * each driving a real lock table (`_sim_node.ts`). No process, socket or real timer.
 *
 * The network models what the TCP peer links do (docs/cluster.md, "Peer protocol"): node X
 * dials each peer Y and sends on that connection; Y reads it through a `PeerInbound` for X
 * made on the `PEER 5 X` handshake. Lines arrive in order after `delayMs`. A connection that
 * closes is noticed by the other side after `delayMs` (the sender gets `linkDown` and
 * redials every heartbeat, the receiver's `PeerInbound` gets `closed()`).
 *
 * Faults: `cut(from, to)` holds a direction's lines (a stalled link, flowing again on
 * `heal`) or, with `"down"`, breaks its connection and refuses dials; `pause`/`resume` is
 * SIGSTOP/SIGCONT; `kill` is kill -9 (the data directory keeps the reserved token mark);
 * `start` after a kill is a restart with an empty table; `shutdown` is SIGTERM (`leave()`,
 * then a graceful exit keeping the exact last token).
 *
 * @module
 */

import { PeerInbound } from "../server/cluster/peer_inbound.ts";
import { decodePeer, encodePeer, type PeerMessage } from "../server/cluster/peer_codec.ts";
import type { PeerNetwork } from "../server/cluster/ports.ts";
import { type ClientHost, SimClient } from "./_sim_client.ts";
import { SimNode } from "./_sim_node.ts";
import { SimTime } from "./_sim_time.ts";

export { FollowingAcquire, SimClient } from "./_sim_client.ts";

/** The nodes' addresses, in priority order. */
export const ADDRESSES: readonly string[] = ["a:7001", "b:7002", "c:7003", "d:7004", "e:7005"];
/** The wall clock at fake time 0, ms since the epoch. */
export const EPOCH_MS = 1_750_000_000_000;

/** Options of {@linkcode SimCluster}. */
export interface SimClusterOptions {
  /** Number of nodes (at most 5). Default 3. */
  size?: number;
  /** Heartbeat interval, ms. Default 100 (the server's default). */
  heartbeatMs?: number;
  /** Failover timeout, ms. Default 1000 (the server's default). */
  failoverTimeoutMs?: number;
  /**
   * Replication mode of the nodes' streams (`SEQ`/`ACK` and which standbys count as in sync;
   * replies are not held back here). Default `async`.
   */
  replication?: "async" | "sync";
  /** One-way network delay, ms. Default 1. */
  delayMs?: number;
  /** Tokens per reserved block. Default 1,000,000 (the server's). */
  block?: bigint;
  /** The nodes' wall clock (ms since the epoch) at fake time `now`. Default `EPOCH_MS + now`. */
  wallClock?: (now: number) => number;
}

/** A peer line as sent (or received), for assertions on the messages. */
export interface PeerLine {
  /** Fake time, ms. */
  at: number;
  /** Sender. */
  from: string;
  /** Receiver. */
  to: string;
  /** The line. */
  line: string;
}

type Item = { kind: "line"; line: string } | { kind: "close" };

interface Conn {
  sender: SimNode;
  receiver: SimNode;
  /** Up on the sender's side. */
  open: boolean;
  /** Closed on the receiver's side: nothing more is read. */
  receiverClosed: boolean;
  /** The sender was killed before these lines left it: they never arrive. */
  discard: boolean;
  inbound: PeerInbound | undefined;
  /** When the last line on it arrives (lines keep their order). */
  lastAt: number;
}

interface Link {
  from: string;
  to: string;
  conn: Conn | undefined;
  cut: "hold" | "down" | undefined;
  held: { conn: Conn; item: Item }[];
}

/** The simulated cluster. */
export class SimCluster implements ClientHost {
  /** The fake clock and timers. */
  readonly time: SimTime = new SimTime();
  /** Every address, in priority order. */
  readonly addresses: readonly string[];
  /** Every peer line handed to an open connection, in order. */
  readonly sent: PeerLine[] = [];
  /** Every peer line a node's `PeerInbound` accepted, in order. */
  readonly received: PeerLine[] = [];
  /** One-way network delay, ms. */
  readonly delayMs: number;
  /** Heartbeat interval, ms. */
  readonly heartbeatMs: number;
  /** Failover timeout, ms. */
  readonly failoverTimeoutMs: number;
  #block: bigint;
  #wallClock: (now: number) => number;
  #nodes = new Map<string, SimNode>();
  #marks = new Map<string, bigint>();
  #links = new Map<string, Link>();
  #clients = new Map<SimNode, SimClient[]>();
  #activations = 0;
  #replication: "async" | "sync" | undefined;

  /** Starts every node at time 0. @param options Size, timings, network delay, tokens. */
  constructor(options: SimClusterOptions = {}) {
    const size = options.size ?? 3;
    if (size < 1 || size > ADDRESSES.length) throw new RangeError(`size ${size}`);
    this.addresses = ADDRESSES.slice(0, size);
    this.heartbeatMs = options.heartbeatMs ?? 100;
    this.failoverTimeoutMs = options.failoverTimeoutMs ?? 1000;
    this.delayMs = options.delayMs ?? 1;
    this.#block = options.block ?? 1_000_000n;
    this.#replication = options.replication;
    this.#wallClock = options.wallClock ?? ((now) => EPOCH_MS + now);
    for (const from of this.addresses) {
      for (const to of this.addresses) {
        if (from !== to) {
          this.#links.set(`${from}>${to}`, { from, to, conn: undefined, cut: undefined, held: [] });
        }
      }
    }
    this.time.watch({
      next: () => {
        let next: number | undefined;
        for (const node of this.#nodes.values()) {
          const at = node.nextLeaseDeadline();
          if (at !== undefined && (next === undefined || at < next)) next = at;
        }
        return next;
      },
      settle: () => {
        for (const node of this.#nodes.values()) node.settleLeases();
      },
    });
    this.start(...this.addresses);
  }

  /** Fake time, ms. */
  get now(): number {
    return this.time.now;
  }

  /** The current incarnation of the node at `address` (or at priority `address`). */
  node(address: string | number): SimNode {
    const key = typeof address === "number" ? this.addresses[address] : address;
    const node = this.#nodes.get(key);
    if (node === undefined) throw new Error(`${key} was never started`);
    return node;
  }

  /** Runs `ms` of fake time. */
  advance(ms: number): Promise<void> {
    return this.time.advance(ms);
  }

  /** Runs fake time until `done()` holds (after some event) or `maxMs` passed. */
  runUntil(done: () => boolean, maxMs: number): Promise<boolean> {
    return this.time.runUntil(done, maxMs);
  }

  /**
   * Starts (or restarts, after a kill or an exit) the nodes at `addresses` now, with empty
   * tables and the token marks their data directories hold; they dial every peer at once.
   */
  start(...addresses: string[]): SimNode[] {
    const started = addresses.map((address) => {
      const old = this.#nodes.get(address);
      if (old !== undefined && old.process.alive && !old.exited) {
        throw new Error(`${address} is still running`);
      }
      const process = this.time.process(address);
      const holder: { node?: SimNode } = {};
      const node = new SimNode({
        self: address,
        peers: this.addresses,
        heartbeatMs: this.heartbeatMs,
        failoverTimeoutMs: this.failoverTimeoutMs,
        replication: this.#replication,
        time: this.time,
        process,
        network: this.#network(() => holder.node!),
        mark: this.#marks.get(address) ?? 0n,
        block: this.#block,
        newActivation: () => `act${++this.#activations}`,
        wallClock: () => this.#wallClock(this.time.now),
      });
      holder.node = node;
      this.#nodes.set(address, node);
      return node;
    });
    for (const node of started) node.node.start();
    for (const node of started) {
      for (const to of this.addresses) {
        if (to !== node.address) this.#dial(this.#link(node.address, to), node);
      }
    }
    return started;
  }

  /** kill -9 of `address`: in-flight lines it sent still arrive unless `dropInFlight`. */
  kill(address: string, options: { dropInFlight?: boolean } = {}): void {
    const node = this.#running(address);
    this.#marks.set(address, node.tokens.reserved);
    node.process.kill();
    node.crashed();
    this.#closeAll(node, options.dropInFlight ?? false);
  }

  /** SIGSTOP of `address`. */
  pause(address: string): void {
    this.#running(address).process.pause();
  }

  /** SIGCONT of `address`: what it missed runs now, late. */
  resume(address: string): void {
    this.node(address).process.resume();
  }

  /**
   * SIGTERM of `address`: `leave()`, then a graceful exit (as `LockServer.shutdown`).
   * Resolves with whether a successor took over; run fake time meanwhile.
   */
  shutdown(address: string): Promise<boolean> {
    const node = this.#running(address);
    return node.node.leave().then((handedOver) => {
      node.stopServing(handedOver);
      this.#marks.set(address, node.tokens.last);
      this.#closeAll(node, false);
      node.process.kill();
      return handedOver;
    });
  }

  /**
   * Cuts the direction `from` → `to`: `"hold"` stalls its lines until {@linkcode heal}
   * (the connection stays up, as behind a stalled proxy); `"down"` breaks the connection
   * and refuses dials until healed.
   */
  cut(from: string, to: string, mode: "hold" | "down" = "hold"): void {
    const link = this.#link(from, to);
    link.cut = mode;
    const conn = link.conn;
    if (mode === "down" && conn !== undefined) {
      this.#deliver(conn, { kind: "close" });
      conn.sender.process.after(this.delayMs, () => this.#lost(link, conn));
    }
  }

  /** Cuts both directions between every node of `left` and every node of `right`. */
  partition(left: string[], right: string[], mode: "hold" | "down" = "hold"): void {
    for (const a of left) {
      for (const b of right) {
        this.cut(a, b, mode);
        this.cut(b, a, mode);
      }
    }
  }

  /** Heals every cut: held lines flow again, in order. */
  heal(): void {
    for (const link of this.#links.values()) {
      link.cut = undefined;
      const held = link.held;
      link.held = [];
      for (const { conn, item } of held) this.#deliver(conn, item);
    }
  }

  /** A new client connection to `address` (refused if it is not running). */
  connect(address: string): SimClient {
    const node = this.#nodes.get(address);
    const live = node !== undefined && node.process.alive && !node.exited ? node : undefined;
    const client = new SimClient(this, address, live);
    if (live !== undefined) {
      const clients = this.#clients.get(live) ?? [];
      clients.push(client);
      this.#clients.set(live, clients);
    }
    return client;
  }

  /**
   * The one active node, if the cluster is settled: exactly one running node is active
   * and serves, and every other running node redirects to it with `M` (as the process
   * tests' `waitForOneActive` probes).
   */
  oneActive(): SimNode | undefined {
    const running = [...this.#nodes.values()].filter((n) => n.running);
    const actives = running.filter((n) => n.role === "active");
    if (actives.length !== 1 || actives[0].node.gate().kind !== "serve") return undefined;
    const active = actives[0];
    for (const node of running) {
      if (node === active) continue;
      const gate = node.node.gate();
      if (gate.kind !== "refuse" || gate.refusal.text !== active.address) return undefined;
    }
    return active;
  }

  /** Runs fake time until {@linkcode oneActive} holds; throws with the timeline if not. */
  waitForOneActive(maxMs = 5000): Promise<SimNode> {
    return this.waitUntilOneActive(maxMs, () => {});
  }

  /** {@linkcode waitForOneActive}, calling `watch` after every event meanwhile. */
  async waitUntilOneActive(maxMs: number, watch: () => void): Promise<SimNode> {
    const done = () => {
      watch();
      return this.oneActive() !== undefined;
    };
    if (await this.runUntil(done, maxMs)) return this.oneActive()!;
    throw new Error(`no single agreed active node within ${maxMs} ms\n${this.describe()}`);
  }

  /** Runs fake time until every running standby is in sync; throws if not within `maxMs`. */
  async waitForSync(maxMs = 1000): Promise<void> {
    const synced = () =>
      [...this.#nodes.values()].every((n) =>
        !n.running || n.role === "active" || n.node.replica.synced
      );
    if (await this.runUntil(synced, maxMs)) return;
    throw new Error(`standbys not in sync within ${maxMs} ms\n${this.describe()}`);
  }

  /** `A <key> <lease s> 0` on `address` through a fresh connection: the token. */
  async grant(address: string, key: string, leaseS = 30): Promise<bigint> {
    const client = this.connect(address);
    const reply = await client.request(`A ${key} ${leaseS} 0`);
    client.close();
    const match = reply === undefined ? null : new RegExp(`^A ${key} A (\\d+)$`).exec(reply);
    if (match === null) {
      throw new Error(`${address} did not grant ${key}: ${reply}\n${this.describe()}`);
    }
    return BigInt(match[1]);
  }

  /** One request through a fresh connection to `address`: its reply. */
  async request(address: string, line: string, maxMs = 100): Promise<string | undefined> {
    const client = this.connect(address);
    const reply = await client.request(line, maxMs);
    client.close();
    return reply;
  }

  /** Runs fake time until `address` holds `key` with `token`; throws if not within `maxMs`. */
  async replicated(address: string, key: string, token: bigint, maxMs = 100): Promise<void> {
    if (await this.runUntil(() => this.node(address).holder(key) === token, maxMs)) return;
    throw new Error(`${address} did not get ${key} ${token} within ${maxMs} ms`);
  }

  /** Writes the token mark of a stopped node's data directory (as an operator could). */
  writeMark(address: string, mark: bigint): void {
    const node = this.#nodes.get(address);
    if (node !== undefined && node.process.alive && !node.exited) {
      throw new Error(`${address} is running`);
    }
    this.#marks.set(address, mark);
  }

  /** Peer lines sent from `from` to `to` whose type is `type` (every one if omitted). */
  lines(from: string, to: string, type?: string): PeerLine[] {
    return this.sent.filter((l) =>
      l.from === from && l.to === to && (type === undefined || l.line.split(" ")[0] === type)
    );
  }

  /** Every node's role changes, for failure messages. */
  describe(): string {
    const rows: string[] = [`at ${this.now} ms:`];
    for (const node of this.#nodes.values()) {
      const state = !node.process.alive
        ? "dead"
        : node.exited
        ? "exited"
        : node.process.paused
        ? "paused"
        : node.role;
      rows.push(
        `  ${node.address} (${state}): ` +
          node.roles.map((r) => `${r.at} ${r.role} (${r.description})`).join(", "),
      );
    }
    return rows.join("\n");
  }

  // -- the network ----------------------------------------------------------------------

  #network(self: () => SimNode): PeerNetwork {
    return {
      send: (to: string, message: PeerMessage) => this.#send(self(), to, encodePeer(message)),
      broadcast: (to: Iterable<string>, message: PeerMessage) => {
        const line = encodePeer(message);
        for (const address of to) this.#send(self(), address, line);
      },
      up: (to: string) => this.#link(self().address, to).conn?.open ?? false,
    };
  }

  #link(from: string, to: string): Link {
    const link = this.#links.get(`${from}>${to}`);
    if (link === undefined) throw new Error(`no link ${from} > ${to}`);
    return link;
  }

  #running(address: string): SimNode {
    const node = this.node(address);
    if (!node.process.alive || node.exited) throw new Error(`${address} is not running`);
    return node;
  }

  #send(from: SimNode, to: string, line: string): void {
    const link = this.#links.get(`${from.address}>${to}`);
    const conn = link?.conn;
    if (link === undefined || conn === undefined || !conn.open || conn.sender !== from) return;
    if (link.cut === "down") return;
    this.sent.push({ at: this.now, from: from.address, to, line });
    this.#transmit(link, conn, { kind: "line", line });
  }

  #transmit(link: Link, conn: Conn, item: Item): void {
    if (link.cut === "hold") link.held.push({ conn, item });
    else this.#deliver(conn, item);
  }

  #deliver(conn: Conn, item: Item): void {
    const at = Math.max(this.now + this.delayMs, conn.lastAt);
    conn.lastAt = at;
    conn.receiver.process.after(at - this.now, () => this.#receive(conn, item));
  }

  #receive(conn: Conn, item: Item): void {
    if (conn.receiverClosed) return;
    const node = conn.receiver;
    if (item.kind === "close") {
      conn.receiverClosed = true;
      conn.inbound?.closed();
      return;
    }
    if (conn.discard) return;
    if (conn.inbound === undefined) {
      // The first line: the handshake, as the acceptor routes it (server.ts).
      const hello = decodePeer(item.line);
      if (hello.type !== "PEER" || !node.node.knows(hello.address)) {
        this.#receiverCloses(conn);
        return;
      }
      conn.inbound = new PeerInbound(node.node, hello.address, {
        openedAt: this.now,
        close: () => this.#receiverCloses(conn),
        log: node.log,
      });
      return;
    }
    conn.inbound.line(item.line);
    if (!conn.receiverClosed) {
      this.received.push({
        at: this.now,
        from: conn.sender.address,
        to: node.address,
        line: item.line,
      });
    }
  }

  /** The receiver closed the connection: its read loop ends, the sender notices. */
  #receiverCloses(conn: Conn): void {
    if (conn.receiverClosed) return;
    conn.receiverClosed = true;
    const inbound = conn.inbound;
    conn.receiver.process.after(0, () => inbound?.closed());
    const link = this.#link(conn.sender.address, conn.receiver.address);
    conn.sender.process.after(this.delayMs, () => this.#lost(link, conn));
  }

  /** The sender noticed its connection closed: link down, redial every heartbeat. */
  #lost(link: Link, conn: Conn): void {
    if (link.conn !== conn) return;
    link.conn = undefined;
    conn.open = false;
    conn.sender.node.linkDown(link.to);
    this.#redial(link, conn.sender);
  }

  #redial(link: Link, sender: SimNode): void {
    sender.process.after(this.heartbeatMs, () => this.#dial(link, sender));
  }

  #dial(link: Link, sender: SimNode): void {
    if (sender.exited || link.conn !== undefined) return;
    const receiver = this.#nodes.get(link.to);
    if (
      receiver === undefined || !receiver.process.alive || receiver.exited || link.cut === "down"
    ) {
      this.#redial(link, sender);
      return;
    }
    const conn: Conn = {
      sender,
      receiver,
      open: true,
      receiverClosed: false,
      discard: false,
      inbound: undefined,
      lastAt: 0,
    };
    link.conn = conn;
    const line = encodePeer({ type: "PEER", address: sender.address });
    this.sent.push({ at: this.now, from: sender.address, to: link.to, line });
    this.#transmit(link, conn, { kind: "line", line });
    sender.node.linkUp(link.to);
  }

  /** `node` is gone (killed or exited): every connection of it closes. */
  #closeAll(node: SimNode, discard: boolean): void {
    for (const client of this.#clients.get(node) ?? []) client.lost();
    this.#clients.delete(node);
    for (const link of this.#links.values()) {
      const conn = link.conn;
      if (conn === undefined) continue;
      if (conn.sender === node) {
        link.conn = undefined;
        conn.open = false;
        if (discard) conn.discard = true;
        this.#transmit(link, conn, { kind: "close" });
      } else if (conn.receiver === node && !conn.receiverClosed) {
        conn.receiverClosed = true;
        conn.sender.process.after(this.delayMs, () => this.#lost(link, conn));
      }
    }
  }
}
