/**
 * A lockd node, wired: the listener and its connections ({@linkcode Acceptor}), the lock
 * table, the token store, the one lease timer and, in a cluster, the role machine
 * ({@linkcode ClusterNode}) over the TCP peer network, which decides whether this node
 * serves, parks or redirects requests. `main.ts` adds the command line; tests and embedders
 * can start a server in-process with {@linkcode LockServer.start}.
 *
 * @module
 */

import denoJson from "../deno.json" with { type: "json" };
import { DEFAULT_MAX_LEASE_MS, type Refusal, SHUTTING_DOWN } from "../client/codec.ts";
import type { LocksPage, NodeStatus } from "../client/codec.ts";
import { Acceptor, type Listener } from "./accept.ts";
import { Batch } from "./batch.ts";
import { formatHostPort } from "./cli.ts";
import type { Role } from "./cluster/election.ts";
import { realScheduler, TcpPeerNetwork } from "./cluster/network.ts";
import { guarded, guardedPeer, guardedScheduler } from "./cluster/fatal_guard.ts";
import { ClusterNode } from "./cluster/node.ts";
import { AcceptorHandshake } from "./cluster/peer_auth.ts";
import { PeerInbound } from "./cluster/peer_inbound.ts";
import { decodePeer } from "./cluster/peer_codec.ts";
import { LockTable } from "./engine/lock_table.ts";
import { lateGrant } from "./late_grant.ts";
import { Metrics } from "./metrics.ts";
import { Report } from "./report.ts";
import { type Logger, stderrLogger } from "./log.ts";
import { LogLimit } from "./log_limit.ts";
import { ClientSession, type Ticket, ticketHooks } from "./session.ts";
import { DEFAULT_MAX_WAITERS, type Gate, type SessionContext } from "./session_context.ts";
import { Ticker, turnClock } from "./ticker.ts";
import { Sessions } from "./sessions.ts";
import { TokenStore } from "./tokens.ts";
import { openPort, type Transport } from "./transport.ts";
import { laneOf } from "./token_lanes.ts";
import type { LockServerOptions, ServerClusterOptions } from "./server_options.ts";

const SHUTDOWN_GRACE_MS = 2000;
const SERVE: Gate = { kind: "serve" };
const STOPPING: Refusal = { status: "E", text: SHUTTING_DOWN };
const SHUTTING: Gate = { kind: "refuse", refusal: STOPPING };

/**
 * A running lockd node.
 *
 * @example Start, then stop
 * ```ts ignore
 * const server = await LockServer.start({ port: 0, dataDir: "/tmp/lockd" });
 * console.log(server.addr.port);
 * await server.shutdown();
 * ```
 */
export class LockServer {
  #listener: Listener;
  #tokens: TokenStore;
  #table: LockTable<Ticket>;
  #ticker: Ticker;
  #batch = new Batch();
  #log: Logger;
  /** Refused peer handshakes: a misconfigured peer retries every heartbeat. */
  #peerRefusals = new LogLimit(10_000);
  #acceptor: Acceptor;
  #cluster: ClusterNode | undefined;
  #network: TcpPeerNetwork | undefined;
  #sessions: Sessions;
  #tls: LockServerOptions["tls"];
  #parked: { session: ClientSession; line: string }[] = [];
  #metrics: Metrics;
  #report: Report;
  #stopping = false;
  #transport: Transport;
  #exitCode = 0;
  #finished: Promise<number>;
  #finish!: (code: number) => void;
  #ready: Promise<Role>;

  private constructor(
    listener: Listener,
    transport: Transport,
    tokens: TokenStore,
    options: LockServerOptions,
    log: Logger,
  ) {
    this.#listener = listener;
    this.#transport = transport;
    // The epoll transport's loop failing (it never should) stops the node like any I/O fault.
    listener.done?.catch((error) => this.#fatal(error));
    this.#tokens = tokens;
    this.#log = log;
    this.#tls = options.tls;
    const turn = options.clock === undefined ? turnClock() : undefined;
    const clock = options.clock ?? turn!.now;
    const metrics = this.#metrics = new Metrics({
      clock,
      now: options.clock ?? (() => performance.now()),
      countsExpirations: () => this.#cluster === undefined || this.#cluster.role === "active",
    });
    this.#table = new LockTable<Ticket>({
      clock,
      nextToken: () => tokens.next(),
      counts: metrics.counts,
      // Only a cluster's active needs the change feed: a single node skips its cost.
      hooks: options.cluster === undefined ? ticketHooks : {
        ...ticketHooks,
        held: (key, token, deadline, owner) =>
          this.#cluster?.stream.held(key, token, deadline, owner),
        freed: (key, token) => this.#cluster?.stream.freed(key, token),
      },
    });
    this.#sessions = new Sessions({
      table: this.#table,
      graceMs: options.sessionGraceMs ?? 5000,
      clock,
      refresh: turn?.refresh,
      credentials: options.credentials,
      serving: () =>
        !this.#stopping && (this.#cluster === undefined || this.#cluster.role === "active"),
      canAdvance: () => this.#cluster?.canAdvance() ?? true,
      replicate: options.cluster === undefined ? undefined : {
        created: (owner) => this.#cluster?.stream.owner(owner),
        gone: (id) => this.#cluster?.stream.ownerGone(id),
      },
      released: () => this.#batch.soon(),
      log,
    });
    const sessions = this.#sessions;
    const ctx: SessionContext = {
      table: this.#table,
      maxLeaseMs: options.maxLeaseMs ?? DEFAULT_MAX_LEASE_MS,
      maxWaiters: options.maxWaiters ?? DEFAULT_MAX_WAITERS,
      gate: () => this.#stopping ? SHUTTING : this.#cluster?.gate() ?? SERVE,
      park: (session, line) => this.#parked.push({ session, line }),
      fatal: (error) => this.#fatal(error),
      hello: sessions.hello,
      owners: sessions.owners,
      grace: sessions.grace,
      later: (ms, fn) => sessions.later(ms, fn),
      inspect: { clock, owners: sessions.owners, status: () => this.status() },
      metrics,
      settleDue: () => this.#ticker.fire(),
    };
    this.#report = new Report({
      address: options.cluster?.self ?? formatHostPort(listener.addr as Deno.NetAddr),
      version: denoJson.version,
      clock,
      table: this.#table,
      tokens,
      metrics,
      owners: sessions.owners,
      connections: () => this.#acceptor.clients.size,
      sessions: () => sessions.grace.size,
      cluster: () => this.#cluster,
      replication: options.cluster?.replication ?? "async",
      stopping: () => this.#stopping,
    });
    this.#ticker = new Ticker(this.#table, {
      clock: options.clock ?? (() => performance.now()),
      refresh: turn?.refresh,
      afterTick: () => this.#batch.soon(),
      onError: (error) => this.#fatal(error),
      canAdvance: () => this.#cluster?.canAdvance() ?? true,
    });
    this.#batch.onEnd(() => {
      this.#ticker.arm();
      sessions.arm();
      metrics.tick();
    });
    this.#finished = new Promise((resolve) => this.#finish = resolve);
    const { promise: ready, resolve: settled } = Promise.withResolvers<Role>();
    this.#ready = ready;
    const cluster = options.cluster;
    if (cluster !== undefined) {
      this.#startCluster(cluster, clock, (role, description) => {
        if (role === "active" || role === "standby") settled(role);
        // Handing off, the grace timers hold still (not serving): a handover that is not
        // taken must not give every session a fresh grace, or failing ones postpone them.
        if (role === "active") sessions.promoted();
        else if (role !== "handing-off") sessions.demoted();
        options.onRole?.(role, description);
      });
    } else settled("active");
    this.#acceptor = new Acceptor(listener, {
      // The socket is the session's reply sink itself (no wrapper per connection).
      client: (socket) => new ClientSession(ctx, socket),
      peer: cluster === undefined ? undefined : (line, socket, admitted) => {
        const hello = decodePeer(line);
        const node = this.#cluster!;
        const refuse = (kind: string, why: string) => {
          // A misconfigured peer redials every heartbeat: one line per kind every 10 s (the
          // kind, not the text, which names an address the dialer chose).
          const held = this.#peerRefusals.pass(kind);
          if (held === undefined) return null;
          log.warn(`refused a peer handshake from ${socket.remote}: ${why}${LogLimit.more(held)}`, {
            event: "peer-refused",
            remote: socket.remote,
            suppressed: held,
          });
          return null;
        };
        if (hello.type === "error") {
          // Its message quotes at most a short field; a version mismatch says so (upgrades).
          const version = hello.message.includes("unsupported peer protocol");
          return refuse(version ? "version" : "malformed", hello.message);
        }
        if (hello.type !== "PEER") return refuse("malformed", "malformed");
        if (!node.knows(hello.address)) {
          return refuse("unknown", `${hello.address} is not in --peers`);
        }
        const secret = cluster.peerSecret;
        if (secret !== undefined && hello.nonce === undefined) {
          return refuse("no-proof", `${hello.address} offered no proof of the cluster secret`);
        }
        if (secret === undefined && hello.nonce !== undefined) {
          return refuse(
            "no-secret",
            `${hello.address} authenticates peers, this node has no --peer-secret-file`,
          );
        }
        const inbound = () => {
          admitted(hello.address);
          return guardedPeer(
            new PeerInbound(node, hello.address, {
              openedAt: clock(),
              close: () => socket.close(),
              log,
              trace: cluster.trace,
              traceHeartbeats: cluster.traceHeartbeats,
            }),
            this.#onFatal,
          );
        };
        if (secret === undefined) return inbound();
        return new AcceptorHandshake({
          secret,
          dialer: hello.address,
          self: cluster.self,
          dialerNonce: hello.nonce!,
          remote: socket.remote,
          send: (reply) => socket.send(reply),
          close: () => socket.close(),
          refused: (why) => refuse("wrong-proof", why),
          accepted: inbound,
        });
      },
    }, {
      maxConnections: options.maxConnections ?? 10_000,
      firstLineDue: options.credentials !== undefined,
      batch: this.#batch,
      log,
      // Sync replication: a client's replies wait for the standbys' acknowledgement.
      replies: cluster?.replication === "sync" ? this.#cluster?.stream : undefined,
      lateGrant: cluster?.replication === "sync"
        ? lateGrant(this.#table, metrics.counts)
        : undefined,
      refused: () => metrics.reject("limits"),
      tooLong: () => metrics.reject("limits"),
    });
  }

  /**
   * Opens the data directory (a single node reserves tokens) and starts listening.
   *
   * @throws {DataDirError} The data directory is unusable (see its message).
   * @throws {TokensExhaustedError} The stored mark is already 2^64-1.
   * @throws {Deno.errors.AddrInUse} The address is taken.
   */
  static start(options: LockServerOptions = {}): Promise<LockServer> {
    const log = options.log ?? stderrLogger();
    const self: { server?: LockServer } = {};
    const dataDir = options.dataDir ?? "./lockd-data";
    const cluster = options.cluster;
    const tokens = TokenStore.open(dataDir, {
      // A cluster's active announces every reserved block to its standbys before using it.
      onReserve: (mark) => self.server?.cluster?.stream.reserved(mark),
      log,
      // Two actives at once never issue the same token (docs/cluster.md, "Token succession").
      lane: cluster && laneOf(cluster.self, cluster.peers.map((p) => p.address)),
    });
    log.info(
      `data directory "${dataDir}": fencing tokens continue after ${tokens.last} ` +
        `(reserved up to ${tokens.reserved})`,
      { event: "start", dataDir, last: tokens.last, reserved: tokens.reserved },
    );
    let port: { listener: Listener; transport: Transport };
    try {
      port = openPort(options, log);
    } catch (error) {
      return tokens.close().then(() => Promise.reject(error));
    }
    self.server = new LockServer(port.listener, port.transport, tokens, options, log);
    return Promise.resolve(self.server);
  }

  /** The role machine of a cluster node; `undefined` for a single node. */
  get cluster(): ClusterNode | undefined {
    return this.#cluster;
  }

  /**
   * What serves the client and peer port: `epoll` (FFI), `portable` (the runtime's sockets)
   * or `tls` (docs/server.md, "The epoll transport").
   */
  get transport(): Transport {
    return this.#transport;
  }

  /** The address actually listened on (the real port when 0 was asked). */
  get addr(): Deno.NetAddr {
    return this.#listener.addr as Deno.NetAddr;
  }

  /** Resolves with the first settled role: at once for a single node. */
  get ready(): Promise<Role> {
    return this.#ready;
  }

  /** Resolves with the process exit code once the server has stopped. */
  get finished(): Promise<number> {
    return this.#finished;
  }

  /** This node's status (`S -`, `/status`; docs/protocol.md, "Inspection"), in any role. */
  status(): NodeStatus {
    return this.#report.status();
  }

  /**
   * Up to `limit` (1–1000) held keys starting with `prefix` (`""`: all), after `after`, in
   * key order (`/locks`). Reads this node's table as it stands (a standby's: its replica).
   *
   * @throws {RangeError} For a `limit` that is not a whole number from 1 to 1000.
   */
  locks(prefix: string, limit: number, after?: string): LocksPage {
    return this.#report.locks(prefix, limit, after);
  }

  /** This node's metrics in the Prometheus text format (`/metrics`; names `lockd_*`). */
  metricsText(): string {
    return this.#report.metricsText();
  }

  /** `/readyz`: the active while it serves, or a standby in sync; a single node until it stops. */
  isReady(): boolean {
    return this.#report.isReady();
  }

  /**
   * Graceful stop (SIGINT/SIGTERM). A cluster's active first hands over to its successor
   * and redirects queued acquires to it with `M`; otherwise queued acquires are answered
   * `E shutting down`. Then connections are flushed and closed and the token mark saved.
   */
  async shutdown(): Promise<void> {
    if (this.#stopping) return void await this.#finished;
    const handedOver = (await this.#cluster?.leave()) ?? false;
    this.#stopping = true;
    const accepting = this.#acceptor.close();
    // Requests parked during a handover that did not complete get the same answer.
    this.#unpark();
    if (!handedOver) this.#answerQueued(STOPPING);
    const clients = [...this.#acceptor.clients];
    for (const socket of clients) socket.closeAfterFlush();
    this.#batch.soon();
    const closing = clients.map((c) => c.done);
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      Promise.all(closing),
      new Promise((resolve) => timer = setTimeout(resolve, SHUTDOWN_GRACE_MS)),
    ]);
    clearTimeout(timer);
    for (const socket of clients) socket.close();
    await Promise.all(closing);
    await accepting;
    this.#cluster?.stop();
    await this.#network?.stop();
    await this.#acceptor.closePeers();
    await this.#acceptor.closeAll(SHUTDOWN_GRACE_MS);
    this.#ticker.stop();
    this.#sessions.stop();
    this.#batch.stop();
    try {
      await this.#tokens.close();
      const mark = this.#tokens.last;
      this.#log.info(`stopped; token mark ${mark} saved`, { event: "stop", mark });
    } catch (error) {
      this.#log.error(error instanceof Error ? error.message : String(error));
      this.#exitCode = 1;
    }
    this.#finish(this.#exitCode);
  }

  #startCluster(
    options: ServerClusterOptions,
    clock: () => number,
    roleChanged: (role: Role, description: string) => void,
  ): void {
    const self = options.self;
    const network = new TcpPeerNetwork({
      self,
      peers: new Map(
        options.peers.filter((p) => p.address !== self).map((p) => [p.address, p.target]),
      ),
      retryMs: options.heartbeatMs,
      connectTimeoutMs: options.failoverTimeoutMs,
      batch: this.#batch,
      log: this.#log,
      secret: options.peerSecret,
      tls: this.#tls === undefined ? undefined : { caCerts: this.#tls.caCerts },
    }, {
      up: (address) => guarded(() => this.#cluster?.linkUp(address), this.#onFatal)(),
      down: (address) => guarded(() => this.#cluster?.linkDown(address), this.#onFatal)(),
    });
    this.#network = network;
    this.#cluster = new ClusterNode({
      table: this.#table,
      tokens: this.#tokens,
      owners: this.#sessions.owners,
      clock,
      answerQueued: (refusal) => this.#answerQueued(refusal),
      unpark: () => this.#unpark(),
      dropUnconfirmed: () => {
        for (const socket of this.#acceptor.clients) if (socket.unconfirmed) socket.close();
      },
      prolongHeld: () => {
        for (const socket of this.#acceptor.clients) socket.prolongHeld();
      },
      promoted: (how) => this.#metrics.promoted(how),
      resumeTimers: (afterFreeze) => {
        this.#ticker.fire();
        if (afterFreeze && this.#cluster?.role === "active") this.#sessions.restart();
      },
      merged: () => this.#sessions.restart(),
      roleChanged,
      log: this.#log,
    }, {
      self,
      peers: options.peers.map((p) => p.address),
      heartbeatMs: options.heartbeatMs,
      failoverTimeoutMs: options.failoverTimeoutMs,
      replication: options.replication,
    }, { network, scheduler: guardedScheduler(realScheduler, this.#onFatal) });
    const stream = this.#cluster.stream;
    this.#batch.onSeal(() => stream.seal());
    network.start();
    this.#cluster.start();
  }

  /**
   * Answers every queued acquire with `refusal`, each key's waiters in queue order: replies
   * go out in that order, so redirected clients resend (and queue again) in that order.
   */
  #answerQueued(refusal: Refusal): void {
    for (const ticket of [...this.#table.queued()]) ticket.session.answerQueued(ticket, refusal);
    this.#batch.soon();
  }

  #unpark(): void {
    const parked = this.#parked;
    this.#parked = [];
    for (const { session, line } of parked) session.resume(line);
    this.#batch.soon();
  }

  /** {@linkcode #fatal} as a function value (the cluster's guarded timers and peer lines). */
  #onFatal = (error: unknown): void => this.#fatal(error);

  #fatal(error: Error | unknown): void {
    if (this.#exitCode === 1) return; // Once: every request after may fail the same way.
    this.#log.error(`${error instanceof Error ? error.message : error}; stopping`, {
      event: "fatal",
    });
    this.#exitCode = 1;
    queueMicrotask(() => this.shutdown());
  }
}
