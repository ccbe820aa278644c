/**
 * A scripted fake lockd server for client tests: an in-process TCP server on `127.0.0.1`
 * (port 0 by default) that records every line each connection sends and lets the test
 * answer with arbitrary lines, in any order, late or never; cut connections mid-request;
 * stop listening and listen again on the same port; and await events ("the next `A` line",
 * "three connections accepted") without fixed sleeps.
 *
 * Nothing is answered unless the test answers it (or sets {@linkcode FakeServer.handler}):
 * silence is the default. Dispose it (`await using server = await FakeServer.start()`) so the
 * listener, the connections and their pending reads are all closed before the test ends.
 *
 * @module
 */

import { Acceptor } from "./_acceptor.ts";
import { readLines } from "./_net.ts";
import { Waiters } from "./_waiters.ts";

const encoder = new TextEncoder();

/** Default limit of every wait, in ms: a failing test fails fast instead of hanging. */
export const DEFAULT_WAIT_MS = 3000;

/** Matches a received line: a prefix (`"A k "`), a regular expression or a predicate. */
export type LineMatch = string | RegExp | ((request: Received) => boolean);

/** Options of the waiting methods. */
export interface WaitOptions {
  /** Longest wait in ms (default {@linkcode DEFAULT_WAIT_MS}). */
  timeoutMs?: number;
}

/** One line received by the fake server. */
export interface Received {
  /** The connection it came on. */
  conn: FakeConnection;
  /** The line, without its line ending. */
  line: string;
  /** First field (`A`, `R`, `X`, ...). */
  op: string;
  /** Second field (the key), or `""`. */
  key: string;
  /** All fields. */
  fields: string[];
  /** When it was received (`performance.now()`). */
  at: number;
  /** Position in the server's log of every received line. */
  index: number;
  /** Whether {@linkcode FakeServer.take} has handed it out already. */
  taken: boolean;
  /** Sends `<op> <key> <rest...>` back on the same connection. */
  reply(...rest: (string | number | bigint)[]): Promise<void>;
}

/** Called for every received line, before waiters see it. */
export type Handler = (request: Received) => void;

function matches(request: Received, match: LineMatch | undefined): boolean {
  if (match === undefined) return true;
  if (typeof match === "string") return request.line.startsWith(match);
  if (match instanceof RegExp) return match.test(request.line);
  return match(request);
}

function describe(match: LineMatch | undefined): string {
  if (match === undefined) return "any line";
  if (typeof match === "string") return JSON.stringify(match);
  if (match instanceof RegExp) return String(match);
  return "a line matching the predicate";
}

/** Resolves after `ms` (for the few checks of *absence*, which cannot wait for an event). */
export function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Polls `condition` every `intervalMs` until it holds (for state that has no event, such as
 * `client.connected`). Rejects after `timeoutMs`; leaves no timer behind either way.
 */
export function waitUntil(
  condition: () => boolean,
  what = "condition",
  { timeoutMs = DEFAULT_WAIT_MS, intervalMs = 5 }: WaitOptions & { intervalMs?: number } = {},
): Promise<void> {
  if (condition()) return Promise.resolve();
  const deadline = performance.now() + timeoutMs;
  return new Promise((resolve, reject) => {
    const tick = () => {
      let ok: boolean;
      try {
        ok = condition();
      } catch (error) {
        return reject(error);
      }
      if (ok) return resolve();
      if (performance.now() >= deadline) {
        return reject(new Error(`Timed out after ${timeoutMs} ms waiting for ${what}`));
      }
      setTimeout(tick, intervalMs);
    };
    setTimeout(tick, intervalMs);
  });
}

/** One accepted connection of the fake server. */
export class FakeConnection {
  /** 1 for the first connection the server accepted, 2 for the next, ... */
  readonly id: number;
  /** Every line received on this connection, in order (hellos apart, see `hellos`). */
  readonly lines: string[] = [];
  /** The hello lines answered by the fake server on this connection. */
  readonly hellos: string[] = [];
  #conn: Deno.TcpConn;
  #server: FakeServer;
  #closed = false;
  #writes: Promise<void> = Promise.resolve();
  /** Resolves when the read loop has ended (the socket is closed and its op done). */
  readonly done: Promise<void>;

  /** Made by {@linkcode FakeServer}. */
  constructor(id: number, conn: Deno.TcpConn, server: FakeServer) {
    this.id = id;
    this.#conn = conn;
    this.#server = server;
    this.done = this.#read();
  }

  /** Whether the connection is closed (by either side). */
  get closed(): boolean {
    return this.#closed;
  }

  /** Writes `lines`, each followed by `\n`, after anything sent before. Errors are ignored. */
  send(...lines: string[]): Promise<void> {
    return this.write(lines.map((l) => l + "\n").join(""));
  }

  /** Writes raw text (no line ending added) after anything sent before. */
  write(text: string): Promise<void> {
    const data = encoder.encode(text);
    this.#writes = this.#writes.then(async () => {
      if (this.#closed) return;
      try {
        let offset = 0;
        while (offset < data.length) offset += await this.#conn.write(data.subarray(offset));
      } catch {
        // The peer is gone: what the test wanted to say no longer matters.
      }
    });
    return this.#writes;
  }

  /** Sends `lines` after `ms` (the timer is cleared if the server closes first). */
  sendLater(ms: number, ...lines: string[]): void {
    this.#server.later(ms, () => void this.send(...lines));
  }

  /**
   * Closes the connection now (mid-request if a request is outstanding). Lines already
   * passed to {@linkcode send} are written first.
   */
  close(): Promise<void> {
    this.#writes = this.#writes.then(() => this.#closeNow());
    return this.#writes.then(() => this.done);
  }

  #closeNow(): void {
    if (this.#closed) return;
    this.#closed = true;
    try {
      this.#conn.close();
    } catch {
      // Already closed.
    }
    this.#server.notify();
  }

  async #read(): Promise<void> {
    await readLines(this.#conn, (line) => {
      if (line === "?" && this.#server.answerPings) {
        // The client's latency probe (an unknown op): answered as lockd would, not logged.
        this.send("? - E unknown op");
        return;
      }
      if (line.startsWith("HELLO ") && this.#server.answerHellos) {
        // The client's hello: accepted as lockd without auth would, kept apart from the log.
        this.hellos.push(line);
        this.send(`HELLO ${line.split(" ")[2] ?? "-"} OK`);
        return;
      }
      this.lines.push(line);
      this.#server.received(this, line);
    }, { stripCr: true, bufferBytes: 16 * 1024 });
    await this.#writes.catch(() => {});
    this.#closeNow();
  }
}

/**
 * The fake server. Every connection and every line is recorded; the test (or a
 * {@linkcode handler}) decides what to answer.
 *
 * @example A test scripting the server
 * ```ts ignore
 * await using server = await FakeServer.start();
 * const client = new LockClient(server.address);
 * const acquiring = client.acquire("k", { wait: 5 });
 * const a = await server.take("A k ");
 * await a.reply("A", 7);                 // -> "A k A 7"
 * const lock = await acquiring;
 * ```
 */
export class FakeServer implements AsyncDisposable {
  /** The port (the same after {@linkcode stopListening} and {@linkcode listen}). */
  readonly port: number;
  /** Every connection accepted so far, in order (closed ones included). */
  readonly connections: FakeConnection[] = [];
  /** Every line received so far, on any connection, in order. */
  readonly log: Received[] = [];
  /** Called for every received line (an auto-responder), or `undefined` for silence. */
  handler: Handler | undefined;
  /** Answer the client's `?` latency probe like lockd (`? - E unknown op`) without logging it. */
  answerPings = true;
  /**
   * Answer the client's hello like lockd without auth (`HELLO <session> OK`), keeping it out
   * of the log (see {@linkcode FakeConnection.hellos}). False: a hello is an ordinary line.
   */
  answerHellos = true;
  #acceptor: Acceptor;
  #waiters = new Waiters();
  #timers = new Set<ReturnType<typeof setTimeout>>();
  #closed = false;

  private constructor(port: number) {
    this.#acceptor = new Acceptor(port, (conn, current) => {
      if (this.#closed || !current()) {
        conn.close();
        return;
      }
      this.connections.push(new FakeConnection(this.connections.length + 1, conn, this));
      this.notify();
    });
    this.port = this.#acceptor.port;
  }

  /** Starts listening on `127.0.0.1:port` (port 0: a free one). */
  static start(port = 0): Promise<FakeServer> {
    return Promise.resolve(new FakeServer(port));
  }

  /** `127.0.0.1:<port>`, as a client address and as in `M` replies. */
  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  /** Whether the server accepts new connections. */
  get listening(): boolean {
    return this.#acceptor.listening;
  }

  /** Number of connections accepted so far. */
  get accepted(): number {
    return this.connections.length;
  }

  /** Connections that are open now. */
  get open(): FakeConnection[] {
    return this.connections.filter((c) => !c.closed);
  }

  /** Lines received so far that match (all of them without `match`). */
  lines(match?: LineMatch): Received[] {
    return this.log.filter((r) => matches(r, match));
  }

  /** Number of lines received so far that match. */
  count(match?: LineMatch): number {
    return this.lines(match).length;
  }

  /**
   * Resolves with the oldest received line that matches and was not taken yet, waiting for
   * it if needed, and marks it taken. Rejects after `timeoutMs`.
   */
  async take(match?: LineMatch, options: WaitOptions = {}): Promise<Received> {
    let found: Received | undefined;
    await this.until(
      () => {
        found = this.log.find((r) => !r.taken && matches(r, match));
        if (found !== undefined) found.taken = true;
        return found !== undefined;
      },
      `${describe(match)} to arrive`,
      options,
    );
    return found!;
  }

  /**
   * Resolves once `condition` holds, checking it now and after every server event (a
   * connection accepted or closed, a line received). Rejects after `timeoutMs`.
   */
  until(condition: () => boolean, what = "condition", options: WaitOptions = {}): Promise<void> {
    return this.#waiters.until(condition, what, options.timeoutMs ?? DEFAULT_WAIT_MS);
  }

  /** Resolves once `n` connections have been accepted in all. */
  untilAccepted(n: number, options?: WaitOptions): Promise<void> {
    return this.until(() => this.accepted >= n, `${n} connections`, options);
  }

  /** Resolves once exactly `n` connections are open. */
  untilOpen(n: number, options?: WaitOptions): Promise<void> {
    return this.until(() => this.open.length === n, `${n} open connections`, options);
  }

  /** Stops accepting: new connections are refused (the port is free until {@linkcode listen}). */
  stopListening(): Promise<void> {
    return this.#acceptor.stop();
  }

  /** Closes every open connection (each mid-request if one is outstanding). */
  async dropAll(): Promise<void> {
    await Promise.all(this.open.map((c) => c.close()));
  }

  /** Stops listening and closes every connection: the node is down. */
  async stop(): Promise<void> {
    await this.stopListening();
    await this.dropAll();
  }

  /** Listens again on the same port: the node is back. */
  listen(): void {
    if (!this.#closed) this.#acceptor.listen();
  }

  /** Runs `fn` after `ms`, unless the server is closed first. */
  later(ms: number, fn: () => void): void {
    const timer = setTimeout(() => {
      this.#timers.delete(timer);
      fn();
    }, ms);
    this.#timers.add(timer);
  }

  /** Stops everything and waits until every socket op has ended. */
  async close(): Promise<void> {
    this.#closed = true;
    for (const timer of this.#timers) clearTimeout(timer);
    this.#timers.clear();
    await this.stop();
    await Promise.all(this.connections.map((c) => c.done));
  }

  /** Same as {@linkcode close}, for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /** Wakes the waiters. Internal. */
  notify(): void {
    this.#waiters.notify();
  }

  /** Records a line. Internal (called by connections). */
  received(conn: FakeConnection, line: string): void {
    const fields = line.split(" ");
    const request: Received = {
      conn,
      line,
      op: fields[0],
      key: fields[1] ?? "",
      fields,
      at: performance.now(),
      index: this.log.length,
      taken: false,
      reply: (...rest) => conn.send([fields[0], fields[1] ?? "-", ...rest].join(" ")),
    };
    this.log.push(request);
    this.handler?.(request);
    this.notify();
  }
}

/** Options of {@linkcode lockServer}. */
export interface LockServerOptions {
  /** First token to grant (default 1). */
  firstToken?: bigint;
  /** Ops to leave unanswered (e.g. `["X"]` for a server that stops renewing). */
  silent?: string[];
}

/**
 * A handler that behaves like a permissive lockd node: every `A` is granted with the next
 * token, every `R` answered `R`, every `X` answered `X` (no real lock table: for tests of
 * the client's plumbing, not of lock semantics).
 */
export function lockServer(options: LockServerOptions = {}): Handler {
  let token = options.firstToken ?? 1n;
  const silent = new Set(options.silent ?? []);
  return (request) => {
    if (silent.has(request.op)) return;
    if (request.op === "A") void request.reply("A", token++);
    else if (request.op === "R") void request.reply("R");
    else if (request.op === "X") void request.reply("X");
  };
}
