/**
 * One node of a lockd cluster (SPEC §4): heartbeats, failure detection, priority promotion,
 * replication to standbys, graceful handoff, failback, demotion after split-brain and token
 * succession. The peer protocol and the failure cases are described in `docs/cluster.md`.
 *
 * The node decides roles; the {@linkcode ServerPort} it is given applies them to the lock
 * server (which requests to serve, park or redirect, and when lease timers may run).
 *
 * @module
 */

import type { LockTable } from "../lock_table.ts";
import type { Gate, Ticket } from "../session.ts";
import type { TokenStore } from "../tokens.ts";
import type { HostPort } from "../cli.ts";
import { decide, type PeerView, type Role, type SelfView, successor } from "./election.ts";
import { PeerLink } from "./peer_link.ts";
import type { LineHandler } from "../conn.ts";

/** `LOCKD_TRACE=1` logs every peer message but heartbeats on stderr. */
const TRACE = (() => {
  try {
    return Deno.env.get("LOCKD_TRACE") === "1";
  } catch {
    return false; // No --allow-env: no tracing.
  }
})();
const TRACE_HB = (() => {
  try {
    return Deno.env.get("LOCKD_TRACE_HB") === "1";
  } catch {
    return false;
  }
})();
/**
 * How long a returning higher-priority node must have been in sync before a failback with
 * queued acquires (ms): longer than the official clients' 3 s reconnect interval (SPEC §3).
 */
const FAILBACK_SETTLE_MS = 3500;
const SERVE: Gate = { kind: "serve" };
const PARK: Gate = { kind: "park" };

/** What the cluster node needs from the lock server it runs in. */
export interface ServerPort {
  /** The lock table (replicated to standbys, fed by the active). */
  table: LockTable<Ticket>;
  /** The token high-water mark. */
  tokens: TokenStore;
  /** Monotonic clock, ms. */
  clock(): number;
  /** Answers every queued acquire with `status` (e.g. `M host:port`), removing it. */
  answerQueued(status: string): void;
  /** Re-handles requests parked while the role was unsettled. */
  unpark(): void;
  /** Lease timers may run again: settle what is due and re-arm. */
  resumeTimers(): void;
  /** Called on every role change, with a readable description. */
  roleChanged(role: Role, description: string): void;
}

/** Cluster settings. */
export interface ClusterOptions {
  /** This node's address, as it appears in `peers`. */
  self: string;
  /** Every node, in priority order (this one included), as `host:port` with parsed forms. */
  peers: { address: string; target: HostPort }[];
  /** Heartbeat interval, in ms. */
  heartbeatMs: number;
  /** Silence after which a peer counts as dead, in ms. */
  failoverTimeoutMs: number;
  /** Tokens per reserved block: the margin a new active adds after a failover. */
  tokenBlock: bigint;
}

interface Peer {
  address: string;
  priority: number;
  link: PeerLink;
  lastHeard: number;
  role: Role;
  activeAddress: string | undefined;
  synced: boolean;
  /** When its heartbeats last turned to "in sync" (ms, this node's clock). */
  syncedSince: number;
  replica: boolean;
  floor: bigint;
  hwm: bigint;
  activation: string | undefined;
}

/** A holder carried by a handover (`H key token remainingMs` lines). */
interface Carried {
  key: string;
  token: bigint;
  remainingMs: number;
}

/** What a `HANDOFF` line says. */
export interface HandoffHeader {
  /** The sender's last issued token. */
  lastToken: bigint;
  /** The activation the sender replicated before it became active, if any. */
  predecessor: string | undefined;
  /** The highest token the sender had seen from that predecessor. */
  predecessorToken: bigint;
}

interface Handoff {
  to: string;
  leaving: boolean;
  timer: ReturnType<typeof setTimeout>;
  done: (ok: boolean) => void;
  outcome: Promise<boolean>;
}

function newActivation(): string {
  return crypto.randomUUID().slice(0, 8);
}

/** The cluster role machine of one node. */
export class ClusterNode {
  #port: ServerPort;
  #options: ClusterOptions;
  #self: string;
  #priority: number;
  #peers = new Map<string, Peer>();
  #role: Role = "starting";
  #activation: string | undefined;
  #activeAddress: string | undefined;
  #synced = false;
  /**
   * Whether this node holds a complete replica of some activation's state, even if the
   * stream has since stopped (the active died): such a node beats one with empty state.
   */
  #replica = false;
  /**
   * The first-token floor of the activation this node's state belongs to (its own when
   * active): a later activation has a higher floor, so a fresher replica wins an election.
   */
  #floor = 0n;
  /** The activation this node replicated and the highest token it saw from it. */
  #seen: { activation: string | undefined; token: bigint } = { activation: undefined, token: 0n };
  /** What it replicated before it became active (sent along when it hands over). */
  #predecessor: { activation: string | undefined; token: bigint } = {
    activation: undefined,
    token: 0n,
  };
  #syncRequestedAt = -Infinity;
  #replicas = new Set<Peer>();
  #handoff: Handoff | undefined;
  #startedAt: number;
  #lastActiveSeen: number;
  #lastTick: number;
  /** Set after this process was frozen (SIGSTOP, a long pause): hold still until peers are heard. */
  #suspectSince: number | undefined;
  #timer: ReturnType<typeof setInterval> | undefined;
  #stopped = false;

  /** @param port The server it drives. @param options Cluster settings. */
  constructor(port: ServerPort, options: ClusterOptions) {
    this.#port = port;
    this.#options = options;
    this.#self = options.self;
    this.#priority = options.peers.findIndex((p) => p.address === options.self);
    const now = port.clock();
    this.#startedAt = this.#lastActiveSeen = this.#lastTick = now;
    options.peers.forEach(({ address, target }, priority) => {
      if (address === this.#self) return;
      const link = new PeerLink(address, target, {
        self: this.#self,
        retryMs: options.heartbeatMs,
        connectTimeoutMs: options.failoverTimeoutMs,
        onUp: () => this.#linkUp(address),
        onDown: () => this.#linkDown(address),
      });
      this.#peers.set(address, {
        address,
        priority,
        link,
        lastHeard: -Infinity,
        role: "starting",
        activeAddress: undefined,
        synced: false,
        syncedSince: Infinity,
        replica: false,
        floor: 0n,
        hwm: 0n,
        activation: undefined,
      });
    });
  }

  /** The current role. */
  get role(): Role {
    return this.#role;
  }

  /** The active node this node knows of (itself when active). */
  get activeAddress(): string | undefined {
    return this.#activeAddress;
  }

  /** Starts dialing peers and the heartbeat; a lone node becomes active at once. */
  start(): void {
    for (const peer of this.#peers.values()) peer.link.start();
    this.#timer = setInterval(() => this.#tick(), this.#options.heartbeatMs);
    if (this.#peers.size === 0) this.#promote();
  }

  /** How the server should treat a client request right now. */
  gate(): Gate {
    this.#checkFrozen();
    switch (this.#role) {
      case "active":
        return this.#suspectSince === undefined ? SERVE : PARK;
      case "handing-off":
        return PARK;
      default: {
        const active = this.#activeAddress;
        return active !== undefined && (this.#isLiveActive(active) || this.#relayedLive(active))
          ? { kind: "refuse", reply: `M ${active}` }
          : { kind: "refuse", reply: "E no active node" };
      }
    }
  }

  /** Whether lease timers may settle now (not while handing over or frozen). */
  canAdvance(): boolean {
    this.#checkFrozen();
    return this.#role !== "handing-off" &&
      !(this.#role === "active" && this.#suspectSince !== undefined);
  }

  /** A peer introduced itself on an inbound connection: returns the handler of its lines. */
  accept(address: string, close: () => void): LineHandler | undefined {
    const peer = this.#peers.get(address);
    if (peer === undefined) return undefined;
    return new PeerInbound(this, peer, this.#port.clock(), close, () => {});
  }

  /** Replication hook: `key` is held by `token` until `deadline`. */
  held(key: string, token: bigint, deadline: number): void {
    if (this.#replicas.size === 0 || this.#role !== "active") return;
    const line = `H ${key} ${token} ${Math.max(1, Math.ceil(deadline - this.#port.clock()))}`;
    for (const replica of this.#replicas) replica.link.send(line);
  }

  /** Replication hook: `key` is free. */
  freed(key: string, token: bigint): void {
    if (this.#replicas.size === 0 || this.#role !== "active") return;
    const line = `F ${key} ${token}`;
    for (const replica of this.#replicas) replica.link.send(line);
  }

  /** Token hook: a new block up to `mark` is being reserved; announce it before use. */
  reserved(mark: bigint): void {
    if (this.#role !== "active") return;
    for (const replica of this.#replicas) replica.link.send(`W ${mark}`);
  }

  /**
   * Graceful stop of this node. An active hands over to the best live standby first;
   * resolves `true` once the successor took over (redirect clients to it), `false` if there
   * was nobody to hand over to (stop as a single node does).
   */
  async leave(): Promise<boolean> {
    if (this.#handoff !== undefined) {
      // A handover is already under way (failback, demotion): finish it, then leave.
      this.#handoff.leaving = true;
      if (await this.#handoff.outcome) return true;
    }
    if (this.#role !== "active") {
      this.#setRole("leaving", "leaving");
      return false;
    }
    // The best live standby first; if it does not take over in time (paused, leaving too),
    // the next one.
    const tried = new Set<string>();
    for (;;) {
      const live = this.#livePeers().filter((p) => !tried.has(p.address));
      const heir = successor(this.#selfView(), live);
      if (heir === undefined) break;
      tried.add(heir.address);
      if (await this.#handOver(heir.address, true, true)) return true;
      const role = this.#role as Role; // (changed while awaiting)
      if (role !== "handing-off" && role !== "active") break;
    }
    this.#setRole("leaving", "leaving, no standby took over");
    return false;
  }

  /** Stops heartbeats and closes peer links. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#timer);
    if (this.#handoff) {
      clearTimeout(this.#handoff.timer);
      this.#handoff = undefined;
    }
    await Promise.all([...this.#peers.values()].map((p) => p.link.stop()));
  }

  // -- inbound messages (called by PeerInbound) ---------------------------------------

  /** Any message from `peer`: it is alive. */
  heardFrom(peer: Peer): void {
    peer.lastHeard = this.#port.clock();
  }

  /** `HB role active synced hwm activation replica floor`. */
  heartbeat(peer: Peer, fields: string[]): void {
    const [, role, active, synced, hwm, activation, replica, floor] = fields;
    peer.role = role as Role;
    peer.activeAddress = active === "-" ? undefined : active;
    const wasSynced = peer.synced;
    peer.synced = synced === "1";
    if (peer.synced && !wasSynced) peer.syncedSince = this.#port.clock();
    peer.replica = replica === "1";
    peer.hwm = /^[0-9]+$/.test(hwm ?? "") ? BigInt(hwm) : 0n;
    peer.floor = /^[0-9]+$/.test(floor ?? "") ? BigInt(floor) : 0n;
    peer.activation = activation === "-" ? undefined : activation;
    if (peer.role === "active") {
      this.#lastActiveSeen = this.#port.clock();
      // An active's mark bounds every token it may issue: every standby persists it, so
      // even a full-cluster restart never reuses a token. (Two actives do not raise each
      // other, or they would leapfrog block after block; their merge raises the winner
      // above the loser's last token.)
      if (this.#role !== "active" && this.#role !== "handing-off") {
        this.#port.tokens.raiseTo(peer.hwm);
      }
    }
  }

  /** `SYNC`: a standby asks the active (this node) for a snapshot and the stream. */
  syncRequested(peer: Peer): void {
    if (this.#role !== "active" || !peer.link.up) return;
    const now = this.#port.clock();
    peer.link.send(`SNAP ${this.#activation} ${this.#port.tokens.last} ${this.#floor}`);
    for (const held of this.#port.table.holders()) {
      peer.link.send(`H ${held.key} ${held.token} ${Math.max(1, Math.ceil(held.deadline - now))}`);
    }
    peer.link.send(`W ${this.#port.tokens.reserved}`);
    peer.link.send("SNAPEND");
    this.#replicas.add(peer);
  }

  /** Whether `peer` is the active this node follows (its stream is to be applied). */
  follows(peer: Peer): boolean {
    return this.#role !== "active" && this.#role !== "handing-off" &&
      this.#activeAddress === peer.address;
  }

  /** `SNAP activation lastToken floor`: a snapshot from the followed active begins. */
  snapshotBegins(activation: string, lastToken: bigint, floor: bigint): void {
    this.#synced = false;
    this.#replica = false;
    this.#floor = floor;
    this.#seen = { activation, token: lastToken };
    this.#port.table.clear();
    this.#port.tokens.raiseTo(lastToken);
  }

  /** `H key token remainingMs` from the followed active's stream. */
  applyHeld(key: string, token: bigint, remainingMs: number): void {
    this.#port.tokens.raiseTo(token);
    if (token > this.#seen.token) this.#seen.token = token;
    this.#port.table.restore(key, token, this.#port.clock() + remainingMs);
  }

  /** `F key token` from the followed active. */
  applyFreed(key: string, token: bigint): void {
    this.#port.table.forget(key, token);
  }

  /** `W mark`: the active reserved tokens up to `mark`; never issue at or below it. */
  applyMark(mark: bigint): void {
    this.#port.tokens.raiseTo(mark);
  }

  /** `SNAPEND`: the snapshot is complete; the stream continues. */
  snapshotEnds(activation: string): void {
    this.#synced = true;
    this.#replica = true;
    this.#activation = activation;
    this.#announce();
  }

  /**
   * The followed active's stream broke: this node is no longer in sync (it asks for a new
   * snapshot), but it keeps its replica: if the active died, that state is the best there is.
   */
  streamLost(peer: Peer): void {
    if (this.#activeAddress === peer.address && this.#role !== "active") {
      this.#synced = false;
      this.#syncRequestedAt = -Infinity;
    }
  }

  /**
   * `HANDOFFEND` after `HANDOFF ...`: `peer` hands the active role to this node, with its
   * holders in `full` mode (`carried`), or relying on this node's replica in `sync` mode.
   *
   * Merging into an active (demotion after a split): when the sender had been this node's
   * replica before it became active, this node's own grants that the sender had seen
   * (tokens up to `predecessorToken`) but no longer holds were released or expired over
   * there since: they are dropped, not resurrected. Every other key keeps the grant with
   * the higher token.
   */
  takeOver(peer: Peer, header: HandoffHeader, carried: Carried[] | undefined): void {
    if (this.#role === "handing-off" || this.#role === "leaving" || this.#stopped) return;
    if (carried !== undefined) {
      const now = this.#port.clock();
      const table = this.#port.table;
      if (this.#role === "active" && header.predecessor === this.#activation) {
        const theirs = new Map(carried.map((c) => [c.key, c.token]));
        const stale = [...table.holders()].filter((h) =>
          h.token <= header.predecessorToken && (theirs.get(h.key) ?? 0n) !== h.token
        );
        for (const h of stale) table.release(h.key, h.token);
      }
      for (const c of carried) {
        this.#port.tokens.raiseTo(c.token);
        table.restore(c.key, c.token, now + c.remainingMs);
      }
    }
    // Above every token the old active issued: it froze before sending its last token.
    this.#port.tokens.raiseTo(header.lastToken);
    if (this.#role !== "active") this.#becomeActive(`took over from ${peer.address}`);
    else if (this.#suspectSince !== undefined) {
      // The other active's state is merged: nothing left to wait for.
      this.#suspectSince = undefined;
      this.#port.unpark();
      this.#port.resumeTimers();
    }
    peer.link.send(`TAKEN ${this.#activation}`);
    this.#announce();
  }

  /** `TAKEN activation`: the successor is active; redirect everything to it. */
  handedOver(peer: Peer): void {
    const handoff = this.#handoff;
    if (handoff === undefined || handoff.to !== peer.address) return;
    clearTimeout(handoff.timer);
    this.#handoff = undefined;
    this.#activeAddress = peer.address;
    this.#synced = false;
    this.#replica = false;
    this.#activation = undefined;
    this.#replicas.clear();
    this.#setRole(
      handoff.leaving ? "leaving" : "standby",
      `handed over to ${peer.address}`,
    );
    this.#port.answerQueued(`M ${peer.address}`);
    this.#port.unpark();
    this.#announce();
    handoff.done(true);
  }

  // -- internals ----------------------------------------------------------------------

  #tick(): void {
    if (this.#stopped) return;
    const now = this.#port.clock();
    this.#checkFrozen(now);
    this.#lastTick = now;
    this.#announce();
    if (this.#role === "active") this.#lastActiveSeen = now;
    const live = this.#livePeers();
    if (this.#suspectSince !== undefined) {
      // After a freeze, decide nothing on stale views: wait for fresh heartbeats, and while
      // another node is active, for its state to be merged (or the failover timeout).
      const since = this.#suspectSince;
      const heard = live.some((p) => this.#peers.get(p.address)!.lastHeard > since);
      const waited = now - since >= this.#options.failoverTimeoutMs;
      if (!heard && !waited) return;
      const otherActive = live.some((p) => p.role === "active" || p.role === "handing-off");
      if (!otherActive || waited) {
        this.#suspectSince = undefined;
        if (this.#role === "active") {
          this.#port.unpark();
          this.#port.resumeTimers();
        }
      }
    }
    const decision = decide(this.#selfView(), live, this.#options.failoverTimeoutMs);
    switch (decision.kind) {
      case "follow":
        this.#follow(decision.address);
        break;
      case "promote":
        this.#promote();
        break;
      case "hand-over":
        if (decision.merge || this.#failbackSettled(decision.address, now)) {
          this.#handOver(decision.address, decision.merge, false);
        }
        break;
    }
    this.#requestSyncIfNeeded(now);
  }

  /**
   * Whether a failback to `heir` (a higher-priority node back in sync) may start now. With
   * acquires queued here, it waits until the heir has been in sync for longer than a
   * client's reconnect interval: by then every client is connected to it again, so the
   * queued acquires, redirected with `M` in queue order, reach it in that order instead of
   * racing each client's reconnection. Without waiters nothing can be reordered.
   */
  #failbackSettled(heir: string, now: number): boolean {
    if (this.#port.table.waiting === 0) return true;
    const peer = this.#peers.get(heir);
    return peer === undefined || now - peer.syncedSince >= FAILBACK_SETTLE_MS;
  }

  /** Since when this node knows it was frozen and waits for fresh word from peers. */
  get frozenSince(): number | undefined {
    this.#checkFrozen();
    return this.#suspectSince;
  }

  /** Detects that this process was frozen (e.g. SIGSTOP) long enough for peers to move on. */
  #checkFrozen(now = this.#port.clock()): void {
    if (this.#peers.size === 0 || this.#suspectSince !== undefined) return;
    if (now - this.#lastTick > this.#options.failoverTimeoutMs / 2) {
      this.#suspectSince = now;
      this.#lastTick = now;
      if (this.#role === "active") {
        console.error("lockd: this process was paused; checking for another active before serving");
      }
    }
  }

  /** Whether a live peer reports `address` as its live active (one this node cannot hear). */
  #relayedLive(address: string): boolean {
    const now = this.#port.clock();
    for (const peer of this.#peers.values()) {
      if (
        peer.activeAddress === address && now - peer.lastHeard < this.#options.failoverTimeoutMs
      ) {
        return true;
      }
    }
    return false;
  }

  /** Whether `address` is live here and still claims to be active (or is this active node). */
  #isLiveActive(address: string): boolean {
    if (address === this.#self) return this.#role === "active";
    const peer = this.#peers.get(address);
    return peer !== undefined && peer.role === "active" &&
      this.#port.clock() - peer.lastHeard < this.#options.failoverTimeoutMs;
  }

  #livePeers(): PeerView[] {
    const now = this.#port.clock();
    const live: PeerView[] = [];
    for (const p of this.#peers.values()) {
      if (now - p.lastHeard >= this.#options.failoverTimeoutMs) continue;
      live.push({
        address: p.address,
        priority: p.priority,
        role: p.role,
        synced: p.synced,
        replica: p.replica,
        floor: p.floor,
        activeAddress: p.activeAddress,
        activation: p.activation,
      });
    }
    return live;
  }

  #selfView(): SelfView {
    return {
      address: this.#self,
      priority: this.#priority,
      role: this.#role,
      synced: this.#synced,
      replica: this.#replica,
      floor: this.#floor,
      activation: this.#activation,
      sinceActiveMs: this.#port.clock() - this.#lastActiveSeen,
    };
  }

  #announce(): void {
    // An active announces the mark it reserved (it may issue up to it); others the highest
    // token or mark they know of (announcing their own reservations would make nodes raise
    // each other block after block).
    const tokens = this.#port.tokens;
    const active = this.#role === "active" || this.#role === "handing-off";
    const mark = active ? tokens.reserved : tokens.last;
    // Name the active only while it is live here and still active: peers that cannot hear
    // it themselves (a partial partition) then know it is alive and do not promote.
    const follows = this.#activeAddress !== undefined && this.#isLiveActive(this.#activeAddress)
      ? this.#activeAddress
      : "-";
    const line = `HB ${this.#role} ${follows} ${this.#synced ? 1 : 0} ${mark} ${
      this.#activation ?? "-"
    } ${this.#replica ? 1 : 0} ${this.#floor}`;
    for (const peer of this.#peers.values()) peer.link.send(line);
  }

  #setRole(role: Role, description: string): void {
    const changed = role !== this.#role;
    this.#role = role;
    if (changed) this.#port.roleChanged(role, description);
  }

  #follow(address: string): void {
    if (this.#activeAddress === address && this.#role === "standby") return;
    this.#activeAddress = address;
    this.#synced = false;
    this.#activation = undefined;
    this.#syncRequestedAt = -Infinity;
    const wasStandby = this.#role === "standby";
    this.#setRole("standby", `following ${address}`);
    if (wasStandby) this.#port.roleChanged("standby", `following ${address}`);
    this.#requestSyncIfNeeded(this.#port.clock());
  }

  #requestSyncIfNeeded(now: number): void {
    if (this.#role !== "standby" || this.#synced || this.#activeAddress === undefined) return;
    const active = this.#peers.get(this.#activeAddress);
    if (active === undefined || !active.link.up) return;
    if (now - this.#syncRequestedAt < this.#options.failoverTimeoutMs) return;
    this.#syncRequestedAt = now;
    active.link.send("SYNC");
  }

  #promote(): void {
    // Token succession: above every token seen replicated or announced and every peer's
    // mark, with two blocks of margin for grants the old active made but had not
    // replicated; and above the wall clock in nanoseconds, so that even a node that missed
    // the latest activation (it died first, then came back alone) starts above it, as long
    // as clocks agree and the cluster grants fewer than a billion tokens a second.
    let floor = this.#port.tokens.last;
    for (const peer of this.#peers.values()) if (peer.hwm > floor) floor = peer.hwm;
    if (this.#peers.size > 0) {
      // Nanoseconds: the two-block margin is then 2 ms of wall time, so a node that comes
      // back seconds later is above every earlier activation (u64 lasts until 2554).
      const wallNanos = BigInt(Date.now()) * 1_000_000n;
      if (wallNanos > floor) floor = wallNanos;
    }
    this.#port.tokens.raiseTo(floor + 2n * this.#options.tokenBlock);
    this.#predecessor = { ...this.#seen };
    this.#becomeActive(this.#peers.size === 0 ? "single node" : "promoted");
  }

  #becomeActive(why: string): void {
    this.#activation = newActivation();
    this.#floor = this.#port.tokens.last;
    this.#activeAddress = this.#self;
    this.#synced = true;
    this.#replica = true;
    this.#replicas.clear();
    this.#lastActiveSeen = this.#port.clock();
    this.#setRole("active", why);
    this.#port.unpark();
    this.#port.resumeTimers();
    this.#announce();
  }

  /**
   * Hands the active role to `address`: parks requests and freezes lease timers, sends the
   * handover (with every holder when `merge`), and waits for `TAKEN` up to the failover
   * timeout. On failure a leaving node reports `false`; otherwise it stays active.
   */
  #handOver(address: string, merge: boolean, leaving: boolean): Promise<boolean> {
    // A leaving node retries from "handing-off" with the next standby.
    const free = this.#role === "active" || (leaving && this.#role === "handing-off");
    if (this.#handoff !== undefined || !free) return Promise.resolve(false);
    const peer = this.#peers.get(address);
    if (peer === undefined || !peer.link.up) return Promise.resolve(false);
    // `sync` relies on the successor's replica: only for a standby this node streams to now.
    if (
      !merge && !(this.#replicas.has(peer) && peer.synced && peer.activation === this.#activation)
    ) {
      merge = true;
    }
    const { promise, resolve } = Promise.withResolvers<boolean>();
    {
      // A live successor confirms within a round trip; a paused one must not cost a whole
      // failover timeout before the next is tried.
      const limit = Math.min(
        this.#options.failoverTimeoutMs,
        Math.max(300, 5 * this.#options.heartbeatMs),
      );
      const timer = setTimeout(() => this.#handOverFailed(), limit);
      this.#handoff = { to: address, leaving, timer, done: resolve, outcome: promise };
      this.#setRole("handing-off", `handing over to ${address}`);
      const tokens = this.#port.tokens;
      peer.link.send(
        `HANDOFF ${this.#activation} ${tokens.last} ${tokens.reserved} ${merge ? "full" : "sync"} ${
          this.#predecessor.activation ?? "-"
        } ${this.#predecessor.token}`,
      );
      if (merge) {
        const now = this.#port.clock();
        for (const held of this.#port.table.holders()) {
          peer.link.send(
            `H ${held.key} ${held.token} ${Math.max(1, Math.ceil(held.deadline - now))}`,
          );
        }
      }
      peer.link.send("HANDOFFEND");
      this.#announce();
    }
    return promise;
  }

  #handOverFailed(): void {
    const handoff = this.#handoff;
    if (handoff === undefined) return;
    this.#handoff = undefined;
    console.error(`lockd: ${handoff.to} did not take over in time`);
    if (handoff.leaving) {
      // Still handing off: leave() tries the next standby (requests stay parked meanwhile).
    } else {
      this.#setRole("active", "still active");
      this.#port.unpark();
      this.#port.resumeTimers();
      this.#announce();
    }
    handoff.done(false);
  }

  #linkUp(address: string): void {
    this.#announce();
    if (this.#activeAddress === address) {
      this.#syncRequestedAt = -Infinity;
      this.#requestSyncIfNeeded(this.#port.clock());
    }
  }

  #linkDown(address: string): void {
    const peer = this.#peers.get(address)!;
    this.#replicas.delete(peer);
  }
}

/** Handles the lines a peer sends on the connection it dialled to this node. */
class PeerInbound implements LineHandler {
  #node: ClusterNode;
  #peer: Peer;
  #onClose: () => void;
  /** Inside `HANDOFF` ... `HANDOFFEND`: the header and the holders carried (full mode). */
  #handoff: { header: HandoffHeader; carried: Carried[] | undefined } | undefined;
  /** When this connection was accepted (messages of a frozen node's past are discarded). */
  #openedAt: number;
  #close: () => void;
  /** Inside `SNAP` ... `SNAPEND` from the followed active. */
  #snapshot: string | undefined;

  constructor(
    node: ClusterNode,
    peer: Peer,
    openedAt: number,
    close: () => void,
    onClose: () => void,
  ) {
    this.#node = node;
    this.#peer = peer;
    this.#openedAt = openedAt;
    this.#close = close;
    this.#onClose = onClose;
  }

  line(text: string): void {
    const node = this.#node;
    const frozen = node.frozenSince;
    if (frozen !== undefined && this.#openedAt < frozen) {
      // This node was frozen: what waited in this socket is old news (a handover to us from
      // a node that has left since, heartbeats of the past). Drop it; the peer redials.
      this.#close();
      return;
    }
    const fields = text.split(" ");
    node.heardFrom(this.#peer);
    if (TRACE && (fields[0] !== "HB" || TRACE_HB)) {
      console.error(`lockd: ${this.#peer.address} > ${text}`);
    }
    switch (fields[0]) {
      case "HB":
        node.heartbeat(this.#peer, fields);
        return;
      case "SYNC":
        node.syncRequested(this.#peer);
        return;
      case "SNAP":
        if (!node.follows(this.#peer)) return;
        this.#snapshot = fields[1];
        node.snapshotBegins(fields[1], BigInt(fields[2]), BigInt(fields[3] ?? "0"));
        return;
      case "SNAPEND":
        if (this.#snapshot !== undefined && node.follows(this.#peer)) {
          node.snapshotEnds(this.#snapshot);
        }
        this.#snapshot = undefined;
        return;
      case "H":
        if (this.#handoff?.carried !== undefined) {
          this.#handoff.carried.push({
            key: fields[1],
            token: BigInt(fields[2]),
            remainingMs: Number(fields[3]),
          });
        } else if (node.follows(this.#peer)) {
          node.applyHeld(fields[1], BigInt(fields[2]), Number(fields[3]));
        }
        return;
      case "F":
        if (node.follows(this.#peer)) node.applyFreed(fields[1], BigInt(fields[2]));
        return;
      case "W":
        if (node.follows(this.#peer)) node.applyMark(BigInt(fields[1]));
        return;
      case "HANDOFF":
        // HANDOFF activation lastToken mark sync|full predecessor predecessorToken
        this.#handoff = {
          header: {
            lastToken: BigInt(fields[2]),
            predecessor: fields[5] === undefined || fields[5] === "-" ? undefined : fields[5],
            predecessorToken: BigInt(fields[6] ?? "0"),
          },
          carried: fields[4] === "full" ? [] : undefined,
        };
        return;
      case "HANDOFFEND":
        if (this.#handoff !== undefined) {
          node.takeOver(this.#peer, this.#handoff.header, this.#handoff.carried);
        }
        this.#handoff = undefined;
        return;
      case "TAKEN":
        node.handedOver(this.#peer);
        return;
    }
  }

  closed(): void {
    this.#node.streamLost(this.#peer);
    this.#onClose();
  }
}
