/**
 * The role machine of one cluster node (docs/cluster.md): heartbeats, failure detection,
 * priority promotion, following and syncing, failback, demotion after split-brain, freeze
 * detection and token succession. It decides; the {@linkcode ServerPort} applies its
 * decisions to the lock server (which requests to serve, park or redirect, and when lease
 * timers may run). The network and the timers are injected and messages are typed values,
 * so it runs the same under a fake clock in unit tests as over TCP.
 *
 * @module
 */

import type { Gate } from "../session_context.ts";
import { decide, type Role, type SelfView, successor } from "./election.ts";
import { heartbeatMarks, promotionFloor, raiseOnHeartbeat } from "./succession.ts";
import { type Carried, handoffLimitMs, NO_ACTIVE, redirectTo } from "./handoff.ts";
import { Handover } from "./handover.ts";
import type { Owner } from "../owners.ts";
import type { HandoffBegin, Heartbeat } from "./peer_codec.ts";
import { FreezeDetector, freezeVerdict } from "./freeze.ts";
import { gateOf } from "./gate.ts";
import type { PeerReceiver } from "./peer_inbound.ts";
import { PeerViews } from "./peer_views.ts";
import type { Cancel, ClusterIo, ClusterOptions, ServerPort } from "./ports.ts";
import { Replica } from "./replica.ts";
import { ReplicationStream } from "./replication.ts";

/**
 * How long a returning higher-priority node must have been in sync before a failback with
 * queued acquires (ms): longer than the official clients' 3 s reconnect interval
 * (docs/client.md, "Connections").
 */
export const FAILBACK_SETTLE_MS = 3500;

const randomActivation = (): string => crypto.randomUUID().slice(0, 8);

/** The cluster role machine of one node. */
export class ClusterNode implements PeerReceiver {
  #port: ServerPort;
  #options: ClusterOptions;
  #io: ClusterIo;
  #self: string;
  #priority: number;
  #peers: PeerViews;
  #role: Role = "starting";
  #activation: string | undefined;
  #activeAddress: string | undefined;
  /** The successor of this node's last handover, redirected to until `until` (ms). */
  #handedTo: { address: string; until: number } | undefined;
  /** This node's copy of the active's state (its own state while active). */
  readonly replica: Replica;
  /** What it replicated before it became active (sent along when it hands over). */
  #predecessor: { activation: string | undefined; token: bigint } = {
    activation: undefined,
    token: 0n,
  };
  /** The replication stream to the standbys while active: the lock table's change feed. */
  readonly stream: ReplicationStream;
  #handover: Handover;
  #lastActiveSeen: number;
  /** After this process was frozen (SIGSTOP, a long pause): hold still until peers are heard. */
  #freeze: FreezeDetector;
  #stopTicking: Cancel | undefined;
  #stopped = false;

  /** @param port The server it drives. @param options Cluster settings. @param io Network and timers. */
  constructor(port: ServerPort, options: ClusterOptions, io: ClusterIo) {
    this.#port = port;
    this.#options = options;
    this.#io = io;
    this.#self = options.self;
    this.#priority = options.peers.indexOf(options.self);
    this.#lastActiveSeen = port.clock();
    this.#freeze = new FreezeDetector(this.#lastActiveSeen, options.failoverTimeoutMs / 2);
    this.#peers = new PeerViews(options.peers, options.self, options.failoverTimeoutMs);
    const ctx = {
      ...io,
      table: port.table,
      tokens: port.tokens,
      owners: port.owners,
      clock: () => port.clock(),
    };
    this.replica = new Replica(ctx, {
      synced: (activation) => {
        this.#activation = activation;
        this.#announce();
      },
      retryMs: options.failoverTimeoutMs,
    });
    // deno-lint-ignore no-this-alias
    const node = this; // The host's getters read the node's fields.
    this.#handover = new Handover(ctx, {
      get role() {
        return node.#role;
      },
      get activation() {
        return node.#activation;
      },
      get predecessor() {
        return node.#predecessor;
      },
      inSync: (address) => {
        const peer = this.#peers.get(address);
        return this.stream.has(address) && peer !== undefined && peer.synced &&
          peer.activation === this.#activation;
      },
      setRole: (role, why) => this.#setRole(role, why),
      announce: () => this.#announce(),
      prolongHeld: () => port.prolongHeld?.(),
      handedOver: (address, leaving) => this.#handedOver(address, leaving),
      stillActive: () => {
        this.#setRole("active", "still active");
        port.unpark();
        port.resumeTimers();
        this.#announce();
      },
      merged: (from, lastToken) => {
        this.replica.raiseFloor(lastToken + 1n); // it covers that activation: rank strictly above
        port.merged?.();
        // A frozen node may resume at once; a step-down waits for the tick (after TAKEN).
        const since = this.#freeze.merged(from);
        if (since !== undefined) this.#settleFreeze(since, port.clock(), true);
      },
      becomeActive: (from, activation) => this.#becomeActive(`took over from ${from}`, activation),
      notTaken: () => port.unpark(),
    }, {
      takenWithinMs: handoffLimitMs(options.heartbeatMs, options.failoverTimeoutMs),
      commitWithinMs: options.failoverTimeoutMs,
      newActivation: io.newActivation ?? randomActivation,
      log: port.log,
    });
    this.stream = new ReplicationStream(ctx, {
      streaming: () => this.#role === "active",
      mode: options.replication,
      live: (address) => this.#peers.serving(address, port.clock()),
      frozen: () => this.frozenSince() !== undefined,
      log: port.log,
      failoverTimeoutMs: options.failoverTimeoutMs,
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

  /** What this node knows of its peers (read-only: for status, see `peer_status.ts`). */
  get peers(): Pick<PeerViews, "addresses" | "get" | "isLive"> {
    return this.#peers;
  }

  /** Starts the heartbeat; a lone node becomes active at once. */
  start(): void {
    this.#stopTicking = this.#io.scheduler.every(this.#options.heartbeatMs, () => this.tick());
    if (this.#peers.size === 0) this.#promote();
  }

  /** Whether `address` is one of this node's peers (for an inbound handshake). */
  knows(address: string): boolean {
    return this.#peers.has(address);
  }

  /** How the server should treat a client request right now. */
  gate(): Gate {
    this.#checkFrozen();
    const active = this.#activeAddress;
    const now = this.#port.clock();
    const handedTo = this.#handedTo;
    return gateOf({
      role: this.#role,
      frozen: this.#freeze.since !== undefined,
      taking: this.#handover.taking,
      active,
      vouched: active !== undefined &&
        ((handedTo?.address === active && now < handedTo.until) ||
          this.#isLiveActive(active) || this.#peers.relayedLive(active, now)),
    });
  }

  /** Whether lease timers may settle now (not while handing over or frozen). */
  canAdvance(): boolean {
    this.#checkFrozen();
    return this.#role !== "handing-off" &&
      !(this.#role === "active" && this.#freeze.since !== undefined);
  }

  /** Graceful stop ({@linkcode Handover.leave}); an active still frozen hands nothing over. */
  leave(): Promise<boolean> {
    const stale = this.#role === "active" && this.#freeze.since !== undefined;
    return this.#handover.leave((tried) => {
      const live = this.#peers.live(this.#port.clock()).filter((p) => !tried.has(p.address));
      return stale ? undefined : successor(this.#selfView(), live)?.address;
    });
  }

  /** Stops the heartbeat and any handover timer. */
  stop(): void {
    this.#stopped = true;
    this.#stopTicking?.();
    this.#handover.stop();
  }

  /** A peer link came up: announce ourselves, and ask for the stream if it is our active. */
  linkUp(address: string): void {
    this.#announce();
    if (this.stream.takeAsked(address)) this.syncRequested(address); // (asked while down)
    if (this.#activeAddress === address) {
      this.replica.reacknowledge(address); // an ACK sent while it was down was dropped
      this.replica.askAgain();
      this.#requestSync(this.#port.clock());
    }
  }

  /** A peer link went down: it no longer receives the stream. */
  linkDown(address: string): void {
    this.stream.remove(address);
  }

  // -- inbound messages (PeerReceiver) ------------------------------------------------

  /** Since when this node knows it was frozen and waits for fresh word from peers. */
  frozenSince(): number | undefined {
    this.#checkFrozen();
    return this.#freeze.since;
  }

  /** Any message from `address`: it is alive. */
  heardFrom(address: string): void {
    this.#peers.heard(address, this.#port.clock());
  }

  /** A heartbeat from `address`. */
  heartbeat(address: string, hb: Heartbeat): void {
    const peer = this.#peers.record(address, hb, this.#port.clock());
    if (peer?.role === "active") this.#lastActiveSeen = this.#port.clock();
    // In sync with that active's activation, its replica ranks as high (a merge raises it).
    if (
      peer?.role === "active" && this.follows(address) && this.replica.synced &&
      peer.activation === this.#activation
    ) this.replica.raiseFloor(peer.floor);
    const self = { address: this.#self, role: this.#role };
    if (peer) raiseOnHeartbeat(self, this.#port.tokens, address, peer, this.#port.log);
  }

  /** `ACK n` from `address`: it applied the stream up to batch `n` (sync replication). */
  acked(address: string, n: number): void {
    if (this.#role === "active") this.stream.acked(address, n);
  }

  /** `SYNC` from `address`: send it a snapshot and the stream, if this node is active. */
  syncRequested(address: string): void {
    // A frozen active's state may be stale: no standby should trade its replica for it.
    if (this.#role !== "active" || this.#freeze.since !== undefined) return;
    if (!this.#io.network.up(address)) return this.stream.askedWhileDown(address);
    this.stream.snapshot(address, this.#activation!, this.replica.floor);
  }

  /** Whether `address` is the active this node follows (its stream is to be applied). */
  follows(address: string): boolean {
    return this.#role !== "active" && this.#role !== "handing-off" &&
      this.#activeAddress === address;
  }

  /**
   * The followed active's stream broke: this node is no longer in sync (it asks for a new
   * snapshot), but it keeps its replica: if the active died, that state is the best there is.
   */
  streamLost(address: string): void {
    if (this.#activeAddress === address && this.#role !== "active") {
      this.replica.interrupted();
      this.replica.askAgain();
    }
  }

  /** `HANDOFF` ... `HANDOFFEND` from `address`: see {@linkcode Handover.receive}. */
  takeOver(
    address: string,
    header: HandoffBegin,
    carried: Carried[] | undefined,
    owners: Owner[],
  ): void {
    if (this.#role === "handing-off" || this.#role === "leaving" || this.#stopped) return;
    if (this.#peers.has(address)) this.#handover.receive(address, header, carried, owners);
  }

  /** `COMMIT` or `ABORT` of the takeover this node agreed to with `TAKEN`. */
  handoffOutcome(address: string, activation: string, committed: boolean): void {
    if (!this.#stopped) this.#handover.outcome(address, activation, committed);
  }

  /** `TAKEN` from `address`: see {@linkcode Handover.taken}. */
  handedOver(address: string, activation: string, attempt: number): void {
    this.#handover.taken(address, activation, attempt);
  }

  /** The successor `address` confirmed: redirect everything to it. */
  #handedOver(address: string, leaving: boolean): void {
    this.#activeAddress = address;
    this.#handedTo = { address, until: this.#port.clock() + this.#options.failoverTimeoutMs };
    this.replica.drop();
    this.#activation = undefined;
    this.stream.clear();
    this.#setRole(leaving ? "leaving" : "standby", `handed over to ${address}`);
    this.#port.answerQueued(redirectTo(address));
    this.#port.unpark();
    this.#announce();
  }

  // -- the heartbeat ------------------------------------------------------------------

  /** One heartbeat interval: announce, then decide on the live peers' latest views. */
  tick(): void {
    if (this.#stopped) return;
    const now = this.#port.clock();
    this.#checkFrozen(now);
    this.#freeze.ticked(now);
    this.#announce();
    this.stream.check();
    if (this.#role === "active") this.#lastActiveSeen = now;
    const live = this.#peers.live(now);
    const since = this.#role === "handing-off" ? undefined : this.#freeze.since;
    if (since !== undefined && !this.#settleFreeze(since, now)) return;
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
          this.#handover.start(decision.address, decision.merge, false);
        }
        break;
    }
    this.#requestSync(now);
  }

  /** After a freeze, not while handing off (it outlives that): may the tick go on to decide? */
  #settleFreeze(since: number, now: number, resumeOnly = false): boolean {
    const verdict = freezeVerdict({
      active: this.#role === "active",
      fresh: this.#peers.heardAfter(since, now),
      merged: this.#freeze.mergedPeers,
      peers: this.#peers.size,
      waited: now - since >= this.#options.failoverTimeoutMs,
      self: this.#self,
      floor: this.replica.floor,
      reserved: this.#port.tokens.announced,
    });
    if (verdict === "wait") return false;
    if (verdict === "step-down" && !resumeOnly) this.#stepDown();
    else if (verdict === "resume" && this.#freeze.clear() && this.#role === "active") {
      this.#port.unpark();
      this.#port.resumeTimers(this.#freeze.gapMs >= this.#options.failoverTimeoutMs);
    }
    return true;
  }

  /** A frozen active steps down for a later activation no active is left to hand over. */
  #stepDown(): void {
    const why = "a peer holds a later activation's state and no active is left to hand it over";
    this.#port.log.warn(`stepped down: ${why}`, { event: "stepped-down" });
    this.#freeze.clear();
    this.#activation = undefined;
    this.#activeAddress = undefined;
    this.#port.dropUnconfirmed(); // (sync) what no standby acknowledged is never confirmed
    this.stream.clear();
    this.replica.interrupted();
    this.#setRole("standby", "stepped down for a later activation");
    this.#port.answerQueued(NO_ACTIVE);
    this.#port.unpark();
    this.#port.resumeTimers();
    this.#announce();
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

  /** Detects that this process was frozen (e.g. SIGSTOP) long enough for peers to move on. */
  #checkFrozen(now = this.#port.clock()): void {
    if (this.#peers.size === 0 || !this.#freeze.check(now)) return;
    this.#lastActiveSeen = now; // the silence was its own: listen a failover timeout again
    if (this.#role === "active") {
      this.#port.log.warn("process was paused; checking for another active", { event: "paused" });
    }
  }

  /** Whether `address` is live here and still claims to be active (or is this active node). */
  #isLiveActive(address: string): boolean {
    if (address === this.#self) return this.#role === "active";
    return this.#peers.liveActive(address, this.#port.clock());
  }

  #selfView(): SelfView {
    return {
      address: this.#self,
      priority: this.#priority,
      role: this.#role,
      synced: this.replica.synced,
      replica: this.replica.complete,
      floor: this.replica.floor,
      activation: this.#activation,
      sinceActiveMs: this.#port.clock() - this.#lastActiveSeen,
      position: this.replica.position,
    };
  }

  #announce(): void {
    const self = this.#selfView();
    const active = this.#activeAddress;
    this.#io.network.broadcast(this.#peers.addresses(), {
      type: "HB",
      role: self.role,
      // Name the active only while it is live here and still active: peers that cannot hear
      // it themselves (a partial partition) then know it is alive and do not promote.
      active: active !== undefined && this.#isLiveActive(active) ? active : undefined,
      synced: self.synced,
      ...heartbeatMarks(self.role, this.#port.tokens),
      activation: self.activation,
      replica: self.replica,
      floor: self.floor,
      position: self.position,
    });
  }

  #setRole(role: Role, description: string): void {
    const changed = role !== this.#role;
    this.#role = role;
    if (changed) this.#port.roleChanged(role, description);
  }

  #follow(address: string): void {
    if (this.#activeAddress === address && this.#role === "standby") return;
    this.#activeAddress = address;
    this.replica.interrupted();
    this.replica.askAgain();
    this.#activation = undefined;
    const wasStandby = this.#role === "standby";
    this.#setRole("standby", `following ${address}`);
    if (wasStandby) this.#port.roleChanged("standby", `following ${address}`);
    this.#requestSync(this.#port.clock());
  }

  #requestSync(now: number): void {
    const active = this.#activeAddress;
    if (this.#role === "standby" && active !== undefined && this.#peers.has(active)) {
      this.replica.request(active, now);
    }
  }

  #promote(): void {
    const tokens = this.#port.tokens;
    tokens.raiseTo(promotionFloor({
      last: tokens.last,
      peersMark: this.#peers.highestMark(),
      clustered: this.#peers.size > 0,
      block: tokens.block,
      wallMs: (this.#io.wallClock ?? Date.now)(),
    }));
    this.#predecessor = { ...this.replica.seen };
    const peer = this.#activeAddress;
    if (peer !== undefined && peer !== this.#self) {
      this.#port.log.warn(`failover: the active ${peer} was lost`, { event: "failover", peer });
      this.#port.promoted?.("failover");
    }
    this.#becomeActive(this.#peers.size === 0 ? "single node" : "promoted");
  }

  #becomeActive(why: string, activation?: string): void {
    if (activation !== undefined) this.#port.promoted?.("handoff");
    this.#handover.forgetTaking();
    this.#activation = activation ?? (this.#io.newActivation ?? randomActivation)();
    this.replica.own(this.#port.tokens.last);
    this.#activeAddress = this.#self;
    this.stream.clear();
    this.#lastActiveSeen = this.#port.clock();
    this.#setRole("active", why);
    this.#port.unpark();
    this.#port.resumeTimers();
    this.#announce();
  }
}
