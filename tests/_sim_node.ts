/**
 * One simulated lockd node for the cluster simulator (`_sim_cluster.ts`), wired the way
 * `server/server.ts` wires a real one but without I/O: a real {@linkcode LockTable} whose
 * change feed goes to the node's replication stream, an in-memory {@linkcode TokenMark}
 * that reserves blocks like `server/tokens.ts`, a {@linkcode ServerPort} that records what
 * the role machine asks of the server, and client connections served by the real
 * {@linkcode ClientSession} (so `gate()` decides: serve, park, or refuse with `M` / `E`).
 *
 * @module
 */

import { DEFAULT_MAX_LEASE_MS, type Refusal, SHUTTING_DOWN } from "../client/codec.ts";
import type { Role } from "../server/cluster/election.ts";
import { ClusterNode } from "../server/cluster/node.ts";
import type { PeerNetwork, ServerPort, TokenMark } from "../server/cluster/ports.ts";
import { LockTable } from "../server/engine/lock_table.ts";
import type { Logger } from "../server/log.ts";
import { Owners } from "../server/owners.ts";
import { laneAhead, laneOf, OwnMarks, tokenAfter } from "../server/token_lanes.ts";
import { ClientSession, type Ticket, ticketHooks } from "../server/session.ts";
import type { Gate } from "../server/session_context.ts";
import type { SimProcess, SimTime } from "./_sim_time.ts";

/**
 * A token mark kept in memory, reserving like `TokenStore`: a block ahead, the next block
 * once half of the current one is used, each reservation announced (`onReserve`) before any
 * token of it is issued. `durable` is what a data directory holds after a kill -9.
 */
export class FakeTokenMark implements TokenMark {
  /** Tokens per reserved block. */
  readonly block: bigint;
  /** Called with each new reserved mark, before it is used (the active announces `W`). */
  onReserve: ((mark: bigint) => void) | undefined;
  #last: bigint;
  #reserved: bigint;

  #lane: number | undefined;
  #ownMarks: OwnMarks;
  #own: bigint;

  /**
   * @param stored The mark found in the data directory. @param block Tokens per block.
   * @param lane The node's token lane (server/token_lanes.ts), as `TokenStore` takes it.
   */
  constructor(stored: bigint, block: bigint, lane?: number) {
    this.block = block;
    this.#lane = lane;
    this.#ownMarks = new OwnMarks(lane);
    this.#last = stored;
    this.#own = stored;
    // As TokenStore.open: a single node reserves a block at start, a cluster node on its
    // first token.
    this.#reserved = lane === undefined ? stored + block : stored;
    if (lane === undefined) this.#ownMarks.announced(this.#reserved);
  }

  /** The last token issued or known. */
  get last(): bigint {
    return this.#last;
  }

  /** As `TokenStore.own`. */
  get own(): bigint {
    return this.#own;
  }

  /** The mark reserved "on disk": no token above it was issued. */
  get reserved(): bigint {
    return this.#reserved;
  }

  /** As `TokenStore.owns`. */
  owns(mark: bigint): boolean {
    return this.#ownMarks.owns(mark, this.#reserved);
  }

  /** The mark announced (reservations are synchronous here: the reserved one). */
  get announced(): bigint {
    return this.#reserved;
  }

  /** The next token (the lock table's `nextToken`). */
  next(): bigint {
    const token = tokenAfter(this.#last, this.#lane);
    const [block, lane] = [this.block, this.#lane];
    if (token > this.#reserved) this.#reserve(laneAhead(token, block, lane));
    else if (this.#reserved < laneAhead(token, block / 2n, lane)) {
      this.#reserve(laneAhead(this.#reserved, block, lane));
    }
    this.#last = token;
    this.#own = token;
    return token;
  }

  /** Makes every later token greater than `floor`. */
  raiseTo(floor: bigint): void {
    if (floor <= this.#last) return;
    this.#last = floor;
    if (floor > this.#reserved) this.#reserve(floor);
  }

  #reserve(mark: bigint): void {
    this.onReserve?.(mark);
    this.#reserved = mark;
    this.#ownMarks.announced(mark);
  }
}

/** A role change the role machine reported. */
export interface RoleChange {
  /** Fake time, ms. */
  at: number;
  /** The new role. */
  role: Role;
  /** Why (`promoted`, `took over from b:7002`, ...). */
  description: string;
}

/** Options of {@linkcode SimNode}. */
export interface SimNodeOptions {
  /** This node's address. */
  self: string;
  /** Every address, in priority order. */
  peers: readonly string[];
  /** Heartbeat interval, ms. */
  heartbeatMs: number;
  /** Failover timeout, ms. */
  failoverTimeoutMs: number;
  /** Replication mode (the stream's only: requests are answered at once here). */
  replication?: "async" | "sync";
  /** The clock. */
  time: SimTime;
  /** The process it runs in. */
  process: SimProcess;
  /** Its peer links. */
  network: PeerNetwork;
  /** The token mark its data directory holds. */
  mark: bigint;
  /** Tokens per reserved block. */
  block: bigint;
  /** Activation ids. */
  newActivation: () => string;
  /** Wall clock, ms since the epoch. */
  wallClock: () => number;
}

const STOPPING: Refusal = { status: "E", text: SHUTTING_DOWN };
const SHUTTING: Gate = { kind: "refuse", refusal: STOPPING };

/** A lockd node: the role machine and the lock server it drives. */
export class SimNode {
  /** Its address. */
  readonly address: string;
  /** The process it runs in (pause, resume, kill). */
  readonly process: SimProcess;
  /** The role machine under test. */
  readonly node: ClusterNode;
  /** Its lock table. */
  readonly table: LockTable<Ticket>;
  /** Its token mark. */
  readonly tokens: FakeTokenMark;
  /** Who holds what (mirrored from the active on a standby). */
  readonly owners: Owners;
  /** Every role change, in order. */
  readonly roles: RoleChange[] = [];
  /** Every `answerQueued` refusal, with the replies it produced in order. */
  readonly answered: { at: number; refusal: Refusal; replies: string[] }[] = [];
  /** Times `unpark` was called. */
  readonly unparks: number[] = [];
  /** When the node asked to close the connections of unacknowledged replies (a step-down). */
  readonly unconfirmedDrops: number[] = [];
  /** When `prolongHeld` was called (before each handover it sends), and in which role. */
  readonly prolongs: { at: number; role: Role }[] = [];
  /** Times `resumeTimers` was called. */
  readonly resumes: number[] = [];
  /** Warnings logged. */
  readonly warnings: string[] = [];
  /** The logger its parts write to. */
  readonly log: Logger;
  /** Set once it stopped after `leave()` (graceful exit). */
  exited = false;
  #time: SimTime;
  #parked: { session: ClientSession; line: string }[] = [];
  #stopping = false;
  #sessions = new Set<ClientSession>();
  #answering: string[] | undefined;

  /** @param options Addresses, timings, clock, process, links and token mark. */
  constructor(options: SimNodeOptions) {
    this.address = options.self;
    this.process = options.process;
    this.#time = options.time;
    const time = options.time;
    const clock = () => time.now;
    this.log = {
      debug: () => {},
      info: () => {},
      warn: (message) => this.warnings.push(message),
      error: (message) => this.warnings.push(message),
    };
    this.tokens = new FakeTokenMark(
      options.mark,
      options.block,
      laneOf(options.self, options.peers),
    );
    const stream = () => this.node?.stream;
    this.table = new LockTable<Ticket>({
      clock,
      nextToken: () => this.tokens.next(),
      hooks: {
        ...ticketHooks,
        held: (key, token, deadline, owner) => stream()?.held(key, token, deadline, owner),
        freed: (key, token) => stream()?.freed(key, token),
      },
    });
    this.tokens.onReserve = (mark) => stream()?.reserved(mark);
    this.owners = new Owners({
      created: (owner) => stream()?.owner(owner),
      gone: (id) => stream()?.ownerGone(id),
    });
    const port: ServerPort = {
      table: this.table,
      tokens: this.tokens,
      owners: this.owners,
      clock,
      answerQueued: (refusal) => this.#answerQueued(refusal),
      unpark: () => {
        this.unparks.push(time.now);
        this.#unpark();
      },
      // No reply waits for acknowledgements here: the times it was asked.
      dropUnconfirmed: () => void this.unconfirmedDrops.push(time.now),
      prolongHeld: () => void this.prolongs.push({ at: time.now, role: this.node.role }),
      resumeTimers: () => {
        this.resumes.push(time.now);
        this.settleLeases();
      },
      roleChanged: (role, description) => this.roles.push({ at: time.now, role, description }),
      log: this.log,
    };
    this.node = new ClusterNode(port, {
      self: options.self,
      peers: options.peers,
      heartbeatMs: options.heartbeatMs,
      failoverTimeoutMs: options.failoverTimeoutMs,
      replication: options.replication,
    }, {
      network: options.network,
      scheduler: options.process.scheduler,
      newActivation: options.newActivation,
      wallClock: options.wallClock,
    });
  }

  /** The current role. */
  get role(): Role {
    return this.node.role;
  }

  /** Whether it runs: neither killed, exited nor paused. */
  get running(): boolean {
    return this.process.alive && !this.process.paused && !this.exited;
  }

  /** Requests parked now. */
  get parked(): number {
    return this.#parked.length;
  }

  /** The last role change, if any. */
  get lastRole(): RoleChange | undefined {
    return this.roles.at(-1);
  }

  /** The current grant of `key` (holder and token), if any. */
  holder(key: string): bigint | undefined {
    return this.table.holder(key)?.token;
  }

  /** A client connection accepted now; its replies go to `send`. */
  accept(send: (line: string) => void): ClientSession {
    const session = new ClientSession({
      table: this.table,
      maxLeaseMs: DEFAULT_MAX_LEASE_MS,
      gate: () => this.#stopping ? SHUTTING : this.node.gate(),
      park: (session, line) => this.#parked.push({ session, line }),
      fatal: (error) => {
        throw error;
      },
      owners: this.owners,
    }, {
      send: (line) => {
        this.#answering?.push(line);
        send(line);
      },
    });
    this.#sessions.add(session);
    return session;
  }

  /** A client connection closed. */
  closed(session: ClientSession): void {
    this.#sessions.delete(session);
    session.closed();
  }

  /**
   * The lease timer firing (server/ticker.ts): settles what is due unless the role machine
   * freezes leases now. Like the real timer it asks `canAdvance()` only when something is
   * due (that call also notices a freeze): never on every event.
   */
  settleLeases(): void {
    if (!this.running) return;
    const due = this.table.nextDeadline();
    if (due === undefined || due > this.#time.now || !this.node.canAdvance()) return;
    this.table.advance();
  }

  /** When the lease timer fires next, if it is armed. */
  nextLeaseDeadline(): number | undefined {
    return this.running ? this.table.nextDeadline() : undefined;
  }

  /**
   * What `LockServer.shutdown` does after `leave()`: requests are refused from now on,
   * parked ones are answered, queued acquires get `E shutting down` unless handed over,
   * the role machine stops. The links are closed by the simulator.
   */
  stopServing(handedOver: boolean): void {
    this.#stopping = true;
    this.#unpark();
    if (!handedOver) this.#answerQueued(STOPPING);
    this.node.stop();
    this.exited = true;
    for (const session of this.#sessions) session.closed();
    this.#sessions.clear();
  }

  /** A kill -9: its client connections are gone. */
  crashed(): void {
    this.#sessions.clear();
    this.#parked = [];
  }

  #answerQueued(refusal: Refusal): void {
    const replies: string[] = [];
    this.answered.push({ at: this.#time.now, refusal, replies });
    this.#answering = replies;
    try {
      for (const ticket of [...this.table.queued()]) {
        ticket.session.answerQueued(ticket, refusal);
      }
    } finally {
      this.#answering = undefined;
    }
  }

  #unpark(): void {
    const parked = this.#parked;
    this.#parked = [];
    for (const { session, line } of parked) session.line(line);
  }
}
