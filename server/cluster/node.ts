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
  replica: boolean;
  hwm: bigint;
  activation: string | undefined;
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
        replica: false,
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
        return active !== undefined && this.#isLive(active)
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
  accept(address: string, onClose: () => void): LineHandler | undefined {
    const peer = this.#peers.get(address);
    if (peer === undefined) return undefined;
    return new PeerInbound(this, peer, onClose);
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
    const heir = successor(this.#selfView(), this.#livePeers());
    if (heir === undefined) {
      this.#setRole("leaving", "leaving, no standby to hand over to");
      return false;
    }
    const synced = heir.synced && heir.activation === this.#activation;
    return await this.#handOver(heir.address, !synced, true);
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

  /** `HB role active synced hwm activation replica`. */
  heartbeat(peer: Peer, fields: string[]): void {
    const [, role, active, synced, hwm, activation, replica] = fields;
    peer.role = role as Role;
    peer.activeAddress = active === "-" ? undefined : active;
    peer.synced = synced === "1";
    peer.replica = replica === "1";
    peer.hwm = /^[0-9]+$/.test(hwm ?? "") ? BigInt(hwm) : 0n;
    peer.activation = activation === "-" ? undefined : activation;
    if (peer.role === "active") {
      this.#lastActiveSeen = this.#port.clock();
      // An active's mark bounds every token it may issue. Every node persists it (so even
      // a full-cluster restart never reuses a token), and a second active (partition,
      // paused process) moves above it, so tokens keep growing across the merge.
      this.#port.tokens.raiseTo(peer.hwm);
    }
  }

  /** `SYNC`: a standby asks the active (this node) for a snapshot and the stream. */
  syncRequested(peer: Peer): void {
    if (this.#role !== "active" || !peer.link.up) return;
    const now = this.#port.clock();
    peer.link.send(`SNAP ${this.#activation} ${this.#port.tokens.last}`);
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

  /** `SNAP activation lastToken`: a snapshot from the followed active begins. */
  snapshotBegins(lastToken: bigint): void {
    this.#synced = false;
    this.#replica = false;
    this.#port.table.clear();
    this.#port.tokens.raiseTo(lastToken);
  }

  /** `H key token remainingMs` from the followed active (or during a handover). */
  applyHeld(key: string, token: bigint, remainingMs: number): void {
    this.#port.tokens.raiseTo(token);
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
   * `HANDOFFEND` after `HANDOFF activation lastToken hwm mode`: `peer` hands the active role
   * (and, in `full` mode, its holders, already merged line by line) to this node.
   */
  takeOver(peer: Peer, lastToken: bigint): void {
    if (this.#role === "handing-off" || this.#role === "leaving" || this.#stopped) return;
    // Above every token the old active issued: it froze before sending its last token.
    this.#port.tokens.raiseTo(lastToken);
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
        this.#handOver(decision.address, decision.merge, false);
        break;
    }
    this.#requestSyncIfNeeded(now);
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

  #isLive(address: string): boolean {
    if (address === this.#self) return this.#role === "active";
    const peer = this.#peers.get(address);
    return peer !== undefined &&
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
    const line = `HB ${this.#role} ${this.#activeAddress ?? "-"} ${this.#synced ? 1 : 0} ${mark} ${
      this.#activation ?? "-"
    } ${this.#replica ? 1 : 0}`;
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
    // Token succession: above every token seen replicated or announced, and every peer's
    // mark, with a block of margin for grants the old active made but had not replicated.
    let floor = this.#port.tokens.last;
    for (const peer of this.#peers.values()) if (peer.hwm > floor) floor = peer.hwm;
    this.#port.tokens.raiseTo(floor + 2n * this.#options.tokenBlock);
    this.#becomeActive(this.#peers.size === 0 ? "single node" : "promoted");
  }

  #becomeActive(why: string): void {
    this.#activation = newActivation();
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
    if (this.#handoff !== undefined || this.#role !== "active") return Promise.resolve(false);
    const peer = this.#peers.get(address);
    if (peer === undefined || !peer.link.up) return Promise.resolve(false);
    const { promise, resolve } = Promise.withResolvers<boolean>();
    {
      const timer = setTimeout(() => this.#handOverFailed(), this.#options.failoverTimeoutMs);
      this.#handoff = { to: address, leaving, timer, done: resolve, outcome: promise };
      this.#setRole("handing-off", `handing over to ${address}`);
      const tokens = this.#port.tokens;
      peer.link.send(
        `HANDOFF ${this.#activation} ${tokens.last} ${tokens.reserved} ${merge ? "full" : "sync"}`,
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
      this.#setRole("leaving", "leaving, handover failed");
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
  /** Inside `HANDOFF` ... `HANDOFFEND`: holders are merged, not replicated. */
  #handoff: { lastToken: bigint } | undefined;
  /** Inside `SNAP` ... `SNAPEND` from the followed active. */
  #snapshot: string | undefined;

  constructor(node: ClusterNode, peer: Peer, onClose: () => void) {
    this.#node = node;
    this.#peer = peer;
    this.#onClose = onClose;
  }

  line(text: string): void {
    const node = this.#node;
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
        node.snapshotBegins(BigInt(fields[2]));
        return;
      case "SNAPEND":
        if (this.#snapshot !== undefined && node.follows(this.#peer)) {
          node.snapshotEnds(this.#snapshot);
        }
        this.#snapshot = undefined;
        return;
      case "H":
        if (this.#handoff !== undefined || node.follows(this.#peer)) {
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
        this.#handoff = { lastToken: BigInt(fields[2]) };
        return;
      case "HANDOFFEND":
        if (this.#handoff !== undefined) {
          node.takeOver(this.#peer, this.#handoff.lastToken);
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
