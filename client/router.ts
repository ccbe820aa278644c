/**
 * Where each request goes (docs/client.md, "Connections" and "Retries"): round-robin over
 * the live connections, those of the known active node first; `M` replies followed to the
 * node they name; a request whose connection drops moves to the next one, failing only
 * after as many attempts as there are connections; a cluster with no active node waited out
 * for up to `retryTimeoutMs`.
 *
 * @module
 */

import { type Address, addressText, parseAddress } from "./address.ts";
import { type Reply, replyAction } from "./codec.ts";
import { LockError, LockRejectedError, LockUnavailableError } from "./errors.ts";
import { Exchange, PromiseExchange } from "./exchange.ts";
import { type HelloLine, ManagedConnection } from "./managed_connection.ts";
import { ConnectionLost } from "./pending_replies.ts";
import type { ResolvedOptions } from "./options.ts";
import { after } from "./timer.ts";

export { Exchange };

/** How the first try of an exchange ended, when it did not end it. */
interface Outcome {
  connection: ManagedConnection;
  reply: Reply | undefined;
  error: unknown;
}

/** Resolves with `promise`'s value, or with `fallback` once `until` (ms) has passed. */
function by<T>(promise: Promise<T>, until: number | undefined, fallback: T): Promise<T> {
  if (until === undefined) return promise;
  return new Promise<T>((resolve) => {
    const cancel = after(until - performance.now(), () => resolve(fallback));
    promise.then((value) => {
      cancel();
      resolve(value);
    }, () => {
      cancel();
      resolve(fallback);
    });
  });
}

/** How long connecting to a node an `M` named may take past an acquire's wait, ms. */
const REDIRECT_CONNECT_MS = 250;

/** The most latency a wait's margin allows for (see {@linkcode Router.replyLatency}), ms. */
export const MAX_REPLY_LATENCY_MS = 100;

/** Resolves after `ms`, or at once when `signal` aborts. */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const done = () => {
      cancel();
      signal.removeEventListener("abort", done);
      resolve();
    };
    const cancel = after(ms, done);
    signal.addEventListener("abort", done, { once: true });
  });
}

/** The connections of one client and the routing of its requests over them. */
export class Router {
  #connections: ManagedConnection[] = [];
  /** The connections added for a node an `M` named (not among the client's addresses). */
  #learned = new Set<ManagedConnection>();
  #next = 0;
  /** The node that served the last request (`M` targets included): preferred. */
  #active: string | undefined;
  #options: ResolvedOptions;
  #closed: AbortSignal;
  /** Set by {@linkcode quiesce}: resolves when the close aborts. */
  #quiet: Promise<void> | undefined;
  #lost: () => void;
  #hello: HelloLine | undefined;
  /** Whether this client speaks TLS: the nodes an `M` names are then reached with TLS. */
  #tls: boolean;
  /** Decaying maximum of measured round trips (ms): an upper bound of one-way latency. */
  #latency = 0;

  /**
   * @param addresses The client's addresses (one entry each).
   * @param options The client's options.
   * @param closed Aborts when the client closes.
   * @param lost Called when a connection drops.
   * @param hello The hello line sent first on every connection, if any.
   */
  constructor(
    addresses: readonly Address[],
    options: ResolvedOptions,
    closed: AbortSignal,
    lost: () => void,
    hello?: HelloLine,
  ) {
    this.#options = options;
    this.#closed = closed;
    this.#lost = lost;
    this.#hello = hello;
    this.#tls = addresses.some((a) => a.scheme === "tls");
    for (let i = 0; i < options.connectionsPerAddress; i++) {
      for (const address of addresses) this.#add(address);
    }
  }

  /** Every managed connection. */
  get connections(): readonly ManagedConnection[] {
    return this.#connections;
  }

  /** An upper bound of the one-way latency seen lately, in ms (0 before any measurement). */
  get latency(): number {
    return this.#latency;
  }

  /**
   * The latency to allow a reply's trip when timing a wait, in ms: {@linkcode latency}, but
   * at most {@linkcode MAX_REPLY_LATENCY_MS}. A round trip longer than that was a node that
   * froze (its replies arrive in a burst when it resumes), not the network: it must not
   * stretch every later wait by seconds.
   */
  get replyLatency(): number {
    return Math.min(this.#latency, MAX_REPLY_LATENCY_MS);
  }

  /** Starts connecting every connection in the background. */
  start(): void {
    for (const connection of this.#connections) connection.connect();
  }

  /**
   * The client's close began (client/close_drain.ts): until the close aborts, nothing more is
   * sent and no connection is opened; a request that would retry waits for the abort.
   * Resolves once every connection with requests outstanding was drained.
   */
  quiesce(): Promise<void> {
    this.#quiet ??= new Promise<void>((resolve) => {
      if (this.#closed.aborted) resolve();
      else this.#closed.addEventListener("abort", () => resolve(), { once: true });
    });
    return Promise.all(this.#connections.map((c) => c.drain())).then(() => {});
  }

  /**
   * Sends one request until it gets a final reply: moves to the next connection when one
   * drops (failing after as many attempts as connections), follows `M`, and waits out a
   * cluster with no active node for up to `retryTimeoutMs`.
   *
   * @param line Builds the line for the connection it goes out on (an acquire asks for the
   * wait that is left).
   * @throws {LockUnavailableError} No connection could carry it.
   * @throws {LockError} The client closed.
   */
  exchange(
    op: string,
    key: string,
    line: (connection: ManagedConnection) => string,
  ): Promise<Reply> {
    return new Promise<Reply>((resolve, reject) => {
      const exchange = new PromiseExchange(op, key, line, { resolve, reject });
      exchange.startedAt = performance.now();
      this.send(exchange);
    });
  }

  /**
   * Sends `exchange` as {@linkcode exchange} does, telling it the final reply (`done`) or
   * the error (`failed`). Its first try goes out at once (synchronously) when a connection
   * is up. Set its `startedAt` first.
   */
  send(exchange: Exchange): void {
    if (!this.#closed.aborted && this.#quiet === undefined && !exchange.abandoned) {
      const connection = this.#pick(exchange.op, exchange.key);
      if (connection !== undefined) {
        exchange.sentOn(this, connection);
        connection.send(exchange.op, exchange.key, exchange.line(connection), exchange);
        return;
      }
    }
    this.#retry(exchange, undefined);
  }

  /** `connection` served a request: its node is preferred from now on. @internal */
  served(connection: ManagedConnection): void {
    this.#active = connection.address.key;
  }

  /**
   * The first try of `exchange` on `connection` did not end it (it dropped, or the answer
   * was `M` or a retry): the retry loop takes over, in a microtask (as after an await), not
   * in the middle of the connection's own work. @internal
   */
  resume(exchange: Exchange, connection: ManagedConnection, reply?: Reply, error?: unknown): void {
    const outcome: Outcome = { connection, reply, error };
    queueMicrotask(() => this.#retry(exchange, outcome));
  }

  #retry(exchange: Exchange, first: Outcome | undefined): void {
    this.#loop(exchange, first).then(
      (reply) => exchange.done(reply),
      (error) => exchange.failed(error),
    );
  }

  /** The retry loop of {@linkcode exchange}, after a first try that did not end it. */
  async #loop(ex: Exchange, first: Outcome | undefined): Promise<Reply> {
    const { op, key } = ex;
    const closed = this.#closed;
    // retryTimeoutMs counts the time spent retrying, from now: the first try, however long a
    // node held it, is over. An acquire that a node then held in its queue before it
    // redirected it or answered "no active node" (a handoff, a step-down) gets that time back:
    // it was waiting, not retrying. Nothing else can be queued, and a drop may be a frozen
    // node, so no other time is given back (docs/client.md, "Retries").
    let giveUpAt = Math.min(
      performance.now() + this.#options.retryTimeoutMs,
      ex.until ?? Infinity,
    );
    const held = (since: number, reply: Reply | undefined) => {
      if (op !== "A" || reply === undefined) return;
      giveUpAt = Math.min(giveUpAt + (performance.now() - since), ex.until ?? Infinity);
    };
    // Connecting counts against the wait too, except while no connection is up at all (a
    // fresh client: one connection attempt is allowed), and a node an `M` named is asked
    // once even past the wait (its grant or `T` is the answer): it gets a short grace.
    const connectBy = (redirected = false) => {
      const until = ex.until;
      if (until === undefined) return until;
      const now = performance.now();
      if (!this.#connections.some((c) => c.up)) {
        return Math.max(until, now + this.#options.connectTimeoutMs);
      }
      return redirected ? Math.max(until, now + REDIRECT_CONNECT_MS) : until;
    };
    let failures = 0;
    let lastProblem = "";
    let target: ManagedConnection | undefined;
    let backoff = 25;
    let hops = 0;
    /** The nodes whose connection dropped while it was sent there (froze, or died). */
    const dropped = new Set<string>();
    const unavailable = () =>
      new LockUnavailableError(
        `No usable lockd connection for ${op} "${key}" (${
          [...new Set(this.#connections.map((c) => addressText(c.address)))].join(", ")
        })` + (lastProblem ? `: ${lastProblem}` : ""),
      );
    const pause = async () => {
      if (performance.now() + backoff > giveUpAt) throw unavailable();
      await sleep(backoff, closed);
      backoff = Math.min(backoff * 2, 200);
    };
    let outcome = first;
    for (;;) {
      if (outcome === undefined) {
        if (this.#quiet !== undefined) await this.#quiet; // Closing: nothing more goes out.
        if (closed.aborted) throw new LockError("The client is closed");
        if (ex.abandoned) throw new LockError("Abandoned");
        let connection = target ?? this.#pick(op, key);
        const redirected = target !== undefined;
        target = undefined;
        if (
          connection !== undefined && !connection.up &&
          !(await by(connection.connect(), connectBy(redirected), false))
        ) {
          if (connection.refusal !== undefined) {
            throw new LockRejectedError(op, key, connection.refusal);
          }
          // A redirect to a node that is down: the cluster is failing over. Ask again soon.
          lastProblem = `${addressText(connection.address)} is unreachable`;
          if (this.#active === connection.address.key) this.#active = undefined;
          await pause();
          continue;
        }
        connection ??= await by(this.#anyUp(), connectBy(), undefined);
        if (connection === undefined) {
          // A server that refused this client's hello (a wrong credential) will go on doing so.
          const refusal = this.#connections.find((c) => c.refusal !== undefined)?.refusal;
          if (refusal !== undefined) throw new LockRejectedError(op, key, refusal);
          const reasons = [...new Set(this.#connections.map((c) => c.lastError).filter((e) => e))];
          lastProblem = reasons.length > 0 ? reasons.join("; ") : "no node could be reached";
          if (
            ++failures >= this.#connections.length || performance.now() >= (ex.until ?? Infinity)
          ) {
            throw unavailable();
          }
          continue;
        }
        if (closed.aborted) throw new LockError("The client is closed");
        if (this.#quiet !== undefined) continue; // The close began while it connected.
        if (ex.abandoned) throw new LockError("Abandoned"); // Given up while it connected.
        const sentAt = performance.now();
        try {
          outcome = {
            connection,
            reply: await connection.request(op, key, ex.line(connection)),
            error: undefined,
          };
        } catch (error) {
          outcome = { connection, reply: undefined, error };
        }
        held(sentAt, outcome.reply);
      }
      const { connection, reply, error } = outcome;
      outcome = undefined;
      if (reply === undefined) {
        if (!(error instanceof ConnectionLost)) throw error;
        // The server refused this client's hello (a wrong credential) and closed.
        if (connection.refusal !== undefined) {
          throw new LockRejectedError(op, key, connection.refusal);
        }
        lastProblem = error.message;
        dropped.add(connection.address.key);
        if (this.#active === connection.address.key) this.#active = undefined;
        // Give up only once as many attempts as connections failed and none is usable.
        if (++failures >= this.#connections.length && !this.#connections.some((c) => c.up)) {
          throw unavailable();
        }
        continue;
      }
      const action = replyAction(reply);
      if (action === "redirect") {
        target = this.#connectionFor(reply.text!);
        if (++hops > 3) await pause(); // Nodes pointing at each other: let the cluster settle.
        if (target === connection) target = undefined; // A node naming itself: don't loop on it.
        else this.#active = target?.address.key;
        lastProblem = `redirected to ${reply.text}`;
        // Past its wait, an acquire follows no redirect back to a node whose connection dropped
        // while it was sent there: a node that has not failed over yet names it, still frozen.
        const back = target !== undefined && dropped.has(target.address.key);
        if (back && performance.now() >= (ex.until ?? Infinity)) throw unavailable();
        if (target === undefined) await pause();
        continue;
      }
      if (action === "retry") {
        lastProblem = `${addressText(connection.address)} answered "${reply.text}"`;
        await pause();
        continue;
      }
      this.#active = connection.address.key; // It served the request: prefer it from now on.
      return reply;
    }
  }

  /**
   * Sends one request to the node at `addressKey` itself (an address the client was given):
   * no redirect is followed and no other node is asked. Tries each connection to it once,
   * connecting it if needed.
   *
   * @throws {LockUnavailableError} No connection to that node could carry it.
   * @throws {LockRejectedError} It refused this client's hello.
   * @throws {LockError} The client closed.
   */
  async direct(addressKey: string, op: string, key: string, line: string): Promise<Reply> {
    const connections = this.#connections.filter((c) => c.address.key === addressKey)
      .sort((a, b) => Number(b.up) - Number(a.up));
    let problem = "the client has no connection to it";
    for (const connection of connections) {
      if (this.#closed.aborted) throw new LockError("The client is closed");
      if (!connection.up && !(await connection.connect())) {
        if (connection.refusal !== undefined) {
          throw new LockRejectedError(op, key, connection.refusal);
        }
        problem = connection.lastError ?? "unreachable";
        continue;
      }
      try {
        return await connection.request(op, key, line);
      } catch (error) {
        if (!(error instanceof ConnectionLost)) throw error;
        if (connection.refusal !== undefined) {
          throw new LockRejectedError(op, key, connection.refusal);
        }
        problem = error.message;
      }
    }
    if (this.#closed.aborted) throw new LockError("The client is closed");
    const where = connections.length > 0 ? addressText(connections[0].address) : addressKey;
    throw new LockUnavailableError(`No usable connection to ${where}: ${problem}`);
  }

  #add(address: Address): ManagedConnection {
    const connection = new ManagedConnection(address, {
      connect: this.#options.connect,
      reconnectIntervalMs: this.#options.reconnectIntervalMs,
      connectTimeoutMs: this.#options.connectTimeoutMs,
      closed: this.#closed,
      roundTrip: (ms) => this.#latency = Math.max(ms, this.#latency * 0.9),
      staleAfterMs: this.#options.staleConnectionMs,
      lost: () => this.#lost(),
      // A bridge speaks for its pages: they do not say hello to it.
      hello: address.url === undefined ? this.#hello : undefined,
    });
    this.#connections.push(connection);
    return connection;
  }

  /**
   * The next connection, round-robin over those usable now: those of the known active node
   * first and, for an acquire, those without an earlier acquire of the same key outstanding
   * (the server answers those in order, so a try-lock would wait behind a long wait).
   * A release or extend of a key with an acquire waiting is the exception (see inside).
   * Counted in place, without making the lists.
   */
  #pick(op: string, key: string): ManagedConnection | undefined {
    const all = this.#connections;
    const active = this.#active;
    let up = 0;
    let preferred = 0;
    for (let i = 0; i < all.length; i++) {
      const c = all[i];
      if (!c.up) continue;
      up++;
      if (c.address.key === active) preferred++;
    }
    if (up === 0) return undefined;
    const onlyActive = preferred > 0;
    let size = onlyActive ? preferred : up;
    let onlyFree = false;
    if (op === "A" && size > 1) {
      let free = 0;
      for (let i = 0; i < all.length; i++) {
        const c = all[i];
        if (c.up && (!onlyActive || c.address.key === active) && !c.outstanding(op, key)) free++;
      }
      if (free > 0) {
        onlyFree = true;
        size = free;
      }
    }
    if (size > 1 && (op === "R" || op === "X")) {
      // A release or extend of a key this client also waits for goes on the connection its
      // next grant will come on (the one with the oldest acquire of it outstanding), so the
      // server passes the key on in one write and the client reads both replies at once.
      let best: ManagedConnection | undefined;
      let oldest = Infinity;
      for (let i = 0; i < all.length; i++) {
        const c = all[i];
        if (!c.up || (onlyActive && c.address.key !== active)) continue;
        const sent = c.oldest("A", key);
        if (sent < oldest) [best, oldest] = [c, sent];
      }
      if (best !== undefined) return best;
    }
    let index = this.#next++ % size;
    for (let i = 0; i < all.length; i++) {
      const c = all[i];
      if (!c.up || (onlyActive && c.address.key !== active)) continue;
      if (onlyFree && c.outstanding(op, key)) continue;
      if (index-- === 0) return c;
    }
    return undefined;
  }

  /** Connects every idle connection now and resolves with the first that comes up. */
  async #anyUp(): Promise<ManagedConnection | undefined> {
    const attempts = this.#connections.map(async (c) => (await c.connect()) ? c : undefined);
    return await Promise.any(
      attempts.map(async (a) => (await a) ?? Promise.reject(new Error("down"))),
    ).catch(() => undefined);
  }

  /** The connection to the node an `M` reply names, added if the client had none. */
  #connectionFor(addressText: string): ManagedConnection | undefined {
    let address: Address;
    try {
      address = parseAddress(addressText);
    } catch {
      return undefined;
    }
    if (address.scheme === "tcp" && this.#tls) {
      address = { ...address, scheme: "tls", caCerts: this.#options.caCerts };
    }
    const known = this.#connections.find((c) => c.address.key === address.key);
    if (known !== undefined) return known;
    this.#retireDormant();
    const added = this.#add(address);
    this.#learned.add(added);
    return added;
  }

  /**
   * Drops the connections an `M` added that are down and unused: a cluster whose nodes come
   * back at new addresses (a container's new IP on each restart) would otherwise leave one
   * connection per old address, retried forever (docs/client.md, "Connections").
   */
  #retireDormant(): void {
    if (this.#learned.size === 0) return;
    const kept: ManagedConnection[] = [];
    for (const c of this.#connections) {
      if (this.#learned.has(c) && c.dormant) {
        this.#learned.delete(c);
        c.retire();
        if (this.#active === c.address.key) this.#active = undefined;
      } else kept.push(c);
    }
    this.#connections = kept;
  }
}
