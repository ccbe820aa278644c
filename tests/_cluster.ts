/**
 * Test helpers for lockd clusters (docs/cluster.md): N real `server/main.ts` processes on 127.0.0.1,
 * each on a free port with its own data directory, started with the same `--peers` list.
 * A member can be killed (`SIGKILL`), stopped gracefully (`SIGTERM`), paused (`SIGSTOP`),
 * resumed (`SIGCONT`) and restarted on the same port and data directory. Who is active is
 * found by asking each node a harmless request (`R probe 1`: `N` from the active, `M` from a
 * standby). Every node runs with `LOCKD_TRACE=1`, so the peer messages it receives are in
 * its stderr: tests wait for them (replication reached a standby, a takeover happened) and
 * failures print them.
 *
 * @module
 */

import { LineClient, spawnMain } from "./_helpers.ts";
import { freePorts, sleep } from "./_net.ts";

export { freePorts, sleep };

/** Prefix of every data directory made here (and so of the nodes' command lines). */
export const DATA_DIR_PREFIX = "lockd-cluster-test-";

/** Longest time a node may take to print its ready line. */
const READY_TIMEOUT_MS = 15_000;

/** Pause between two rounds of probes. */
const POLL_MS = 25;

/**
 * Settles like `promise`, or rejects with `what` after `ms` (the promise keeps running: it
 * must end by itself, e.g. because the process it watches is killed).
 */
export function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** One run of a node's process. */
class NodeProcess {
  readonly child: Deno.ChildProcess;
  /** The ready line; rejects if the process exits first. */
  readonly ready: Promise<string>;
  /** The exit code (after stdout and stderr were read to the end). */
  readonly exited: Promise<number>;
  paused = false;
  done = false;
  #err = "";
  #listeners = new Set<() => void>();

  constructor(args: string[], env: Record<string, string>) {
    const child = spawnMain(args, env);
    this.child = child;
    const errDone = (async () => {
      for await (const chunk of child.stderr.pipeThrough(new TextDecoderStream())) {
        this.#err += chunk;
        for (const listener of [...this.#listeners]) listener();
      }
    })();
    const { promise: ready, resolve, reject } = Promise.withResolvers<string>();
    this.ready = ready;
    ready.catch(() => {}); // Whoever awaits it sees the rejection; nobody else must.
    const outDone = (async () => {
      let text = "";
      for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) {
        text += chunk;
        const nl = text.indexOf("\n");
        if (nl >= 0) resolve(text.slice(0, nl));
      }
    })();
    this.exited = (async () => {
      const status = await child.status;
      await Promise.all([errDone, outDone]);
      this.done = true;
      for (const listener of [...this.#listeners]) listener();
      reject(new Error(`lockd exited with ${status.code} before it was ready`));
      return status.code;
    })();
  }

  get stderr(): string {
    return this.#err;
  }

  /** Resolves with the first match of `pattern` in stderr from offset `since` on. */
  waitForLog(pattern: RegExp, since: number, timeoutMs: number): Promise<RegExpExecArray> {
    const search = () => pattern.exec(this.#err.slice(since));
    const found = search();
    if (found !== null) return Promise.resolve(found);
    return new Promise((resolve, reject) => {
      const finish = (error?: Error, match?: RegExpExecArray) => {
        clearTimeout(timer);
        this.#listeners.delete(listener);
        if (error) reject(error);
        else resolve(match!);
      };
      const listener = () => {
        const match = search();
        if (match !== null) finish(undefined, match);
        else if (this.done) finish(new Error(`the node exited before logging ${pattern}`));
      };
      const timer = setTimeout(
        () => finish(new Error(`no ${pattern} in the node's stderr within ${timeoutMs} ms`)),
        timeoutMs,
      );
      this.#listeners.add(listener);
    });
  }

  signal(signal: Deno.Signal): void {
    if (this.done) return;
    try {
      this.child.kill(signal);
    } catch {
      // Exited meanwhile.
    }
  }
}

/** What a node answered to `R probe 1`. */
export type Probe =
  /** `R probe N`: it serves requests. */
  | { state: "active" }
  /** `R probe M <address>`: a standby following `active`. */
  | { state: "standby"; active: string }
  /** `R probe E no active node`. */
  | { state: "no-active" }
  /** Connected, but no reply in time (paused, or parking requests while its role settles). */
  | { state: "silent" }
  /** The connection was refused. */
  | { state: "down" }
  /** Anything else. */
  | { state: "other"; reply: string };

/** Options of {@linkcode Cluster.start}. */
export interface ClusterOptions {
  /** Extra command-line arguments for every node. */
  args?: string[];
  /** Extra environment for every node (`LOCKD_TRACE=1` is always set). */
  env?: Record<string, string>;
  /**
   * How the test opens a connection to a member (probes, {@linkcode withLine}): default plain
   * TCP; a secured cluster passes one that dials TLS and sends a hello.
   */
  connect?: (port: number) => Promise<LineClient>;
}

/** One node of a test cluster: a fixed port and data directory, and its current process. */
export class Member {
  /** Position in `--peers` (0 = highest priority). */
  readonly index: number;
  /** `127.0.0.1:<port>`, as listed in `--peers`. */
  readonly address: string;
  /** Its port. */
  readonly port: number;
  /** Its data directory (kept across restarts). */
  readonly dataDir: string;
  #args: string[];
  #env: Record<string, string>;
  #connect: (port: number) => Promise<LineClient>;
  #proc: NodeProcess | undefined;
  #history = "";
  #ready = "";

  /** Made by {@linkcode Cluster.start}. */
  constructor(
    index: number,
    port: number,
    dataDir: string,
    args: string[],
    env: Record<string, string>,
    connect: (port: number) => Promise<LineClient> = LineClient.connect,
  ) {
    this.index = index;
    this.port = port;
    this.address = `127.0.0.1:${port}`;
    this.dataDir = dataDir;
    this.#args = args;
    this.#env = env;
    this.#connect = connect;
  }

  /** Opens a connection to it the way the cluster was told to (plain, or TLS and a hello). */
  connect(): Promise<LineClient> {
    return this.#connect(this.port);
  }

  /** Whether its process is running (paused or not). */
  get running(): boolean {
    return this.#proc !== undefined && !this.#proc.done;
  }

  /** Whether its process is paused by `SIGSTOP`. */
  get paused(): boolean {
    return this.running && this.#proc!.paused;
  }

  /** The ready line of the current (or last) process. */
  get readyLine(): string {
    return this.#ready;
  }

  /** Resolves with the exit code of the current process. */
  get exited(): Promise<number> {
    if (this.#proc === undefined) return Promise.reject(new Error(`${this.address} never ran`));
    return this.#proc.exited;
  }

  /** The stderr of every process it ran so far, the runs separated by a marker line. */
  stderr(): string {
    return this.#history + (this.#proc?.stderr ?? "");
  }

  /** An offset into the current process's stderr, for {@linkcode waitForLog}. */
  logMark(): number {
    return this.#proc?.stderr.length ?? 0;
  }

  /**
   * Resolves with the first match of `pattern` in the current process's stderr after
   * `since` (default: from its start); rejects after `timeoutMs` or if the process exits.
   */
  waitForLog(
    pattern: RegExp,
    options: { since?: number; timeoutMs?: number } = {},
  ): Promise<RegExpExecArray> {
    if (this.#proc === undefined) return Promise.reject(new Error(`${this.address} never ran`));
    return this.#proc.waitForLog(pattern, options.since ?? 0, options.timeoutMs ?? 5000);
  }

  /**
   * Starts its process and waits for the ready line (`listening on ... as <role>`).
   *
   * @throws If it is running already, exits before it is ready, or is not ready in 15 s.
   */
  async start(): Promise<string> {
    if (this.running) throw new Error(`${this.address} is running already`);
    if (this.#proc !== undefined) {
      this.#history += this.#proc.stderr + `---- ${this.address} restarted ----\n`;
    }
    const proc = new NodeProcess(
      ["--listen", this.address, "--data-dir", this.dataDir, ...this.#args],
      this.#env,
    );
    this.#proc = proc;
    try {
      this.#ready = await within(proc.ready, READY_TIMEOUT_MS, `${this.address} ready line`);
    } catch (error) {
      proc.signal("SIGKILL");
      const code = await proc.exited;
      throw new Error(
        `${this.address} did not start (exit ${code}): ${(error as Error).message}\n${proc.stderr}`,
      );
    }
    return this.#ready;
  }

  /** Sends `signal` to the current process (nothing if it is not running). */
  signal(signal: Deno.Signal): void {
    if (!this.running) return;
    this.#proc!.signal(signal);
    if (signal === "SIGSTOP") this.#proc!.paused = true;
    if (signal === "SIGCONT") this.#proc!.paused = false;
  }

  /** Sends `signal` (default `SIGKILL`) and resolves with the exit code. */
  async kill(signal: Deno.Signal = "SIGKILL"): Promise<number> {
    if (this.#proc === undefined) throw new Error(`${this.address} never ran`);
    if (this.paused && signal !== "SIGKILL") this.signal("SIGCONT");
    this.signal(signal);
    return await this.#proc.exited;
  }

  /** `SIGSTOP`: the process freezes (its sockets stay open). */
  pause(): void {
    this.signal("SIGSTOP");
  }

  /** `SIGCONT`. */
  resume(): void {
    this.signal("SIGCONT");
  }

  /** Kills the current process if it runs (`SIGKILL`), then starts a new one. */
  async restart(): Promise<string> {
    if (this.running) await this.kill("SIGKILL");
    return await this.start();
  }

  /** Sends one request line on a new connection and returns the reply (`null`: none in time). */
  async request(line: string, timeoutMs = 1000): Promise<string | null> {
    const client = await this.connect();
    try {
      return await client.request(line, timeoutMs);
    } catch {
      return null;
    } finally {
      await client.close();
    }
  }

  /** Asks `R probe 1` (never held: tests do not use the key `probe`). */
  async probe(timeoutMs = 250): Promise<Probe> {
    if (!this.running) return { state: "down" };
    if (this.paused) return { state: "silent" }; // It could not answer: don't wait for it.
    let reply: string | null;
    try {
      reply = await this.request("R probe 1", timeoutMs);
    } catch {
      return { state: "down" };
    }
    if (reply === null) return { state: "silent" };
    if (reply === "R probe N") return { state: "active" };
    if (reply === "R probe E no active node") return { state: "no-active" };
    const redirect = /^R probe M (\S+)$/.exec(reply);
    if (redirect) return { state: "standby", active: redirect[1] };
    return { state: "other", reply };
  }

  /** Ends the process for good (`SIGCONT` first if paused, then `SIGKILL`). */
  async dispose(): Promise<void> {
    if (this.#proc === undefined) return;
    if (this.running) {
      if (this.paused) this.signal("SIGCONT");
      this.signal("SIGKILL");
    }
    await this.#proc.exited;
  }
}

/** Options of {@linkcode Cluster.waitForOneActive}. */
export interface WaitForActiveOptions {
  /** Give up after this long. Default 5000 ms. */
  timeoutMs?: number;
  /** Members that must not be the one (e.g. the node just killed). */
  not?: Member[];
}

/** N lockd processes started with the same `--peers` list. */
export class Cluster implements AsyncDisposable {
  /** The members, in priority order. */
  readonly members: Member[];
  /** The `--peers` value. */
  readonly peers: string;

  private constructor(members: Member[], peers: string) {
    this.members = members;
    this.peers = peers;
  }

  /**
   * Starts `size` nodes at once and waits for their ready lines (a cold-started cluster
   * settles after about the failover timeout).
   */
  static async start(size: number, options: ClusterOptions = {}): Promise<Cluster> {
    const ports = freePorts(size);
    const peers = ports.map((p) => `127.0.0.1:${p}`).join(",");
    const env = { LOCKD_TRACE: "1", ...options.env };
    const members: Member[] = [];
    for (const [index, port] of ports.entries()) {
      const dataDir = await Deno.makeTempDir({ prefix: DATA_DIR_PREFIX });
      members.push(
        new Member(
          index,
          port,
          dataDir,
          ["--peers", peers, ...(options.args ?? [])],
          env,
          options.connect,
        ),
      );
    }
    const cluster = new Cluster(members, peers);
    const started = await Promise.allSettled(members.map((m) => m.start()));
    const failed = started.find((s) => s.status === "rejected");
    if (failed !== undefined) {
      await cluster.close();
      throw (failed as PromiseRejectedResult).reason;
    }
    return cluster;
  }

  /**
   * Starts a cluster, runs `fn`, and always stops it. On failure the error message gets
   * every node's stderr appended (with `LOCKD_TRACE=1`: the peer messages it received).
   */
  static async run(
    size: number,
    fn: (cluster: Cluster) => Promise<void>,
    options: ClusterOptions = {},
  ): Promise<void> {
    const cluster = await Cluster.start(size, options);
    let failed = false;
    let failure: unknown;
    try {
      await fn(cluster);
    } catch (error) {
      failed = true;
      failure = error;
    }
    await cluster.close(); // Before reading the logs: they are complete once the nodes exited.
    if (failed) {
      if (failure instanceof Error) failure.message += `\n${cluster.logs()}`;
      throw failure;
    }
  }

  /** Member `i`. */
  at(i: number): Member {
    return this.members[i];
  }

  /** Every member's address, in priority order. */
  get addresses(): string[] {
    return this.members.map((m) => m.address);
  }

  /** The member with `address`. */
  byAddress(address: string): Member | undefined {
    return this.members.find((m) => m.address === address);
  }

  /** Probes every member at once. */
  probeAll(timeoutMs = 250): Promise<Probe[]> {
    return Promise.all(this.members.map((m) => m.probe(timeoutMs)));
  }

  /** The one member that answers as active, if exactly one does now. */
  async findActive(): Promise<Member | undefined> {
    const probes = await this.probeAll();
    const actives = this.members.filter((_, i) => probes[i].state === "active");
    return actives.length === 1 ? actives[0] : undefined;
  }

  /**
   * Waits until exactly one running member answers as active and every other running,
   * unpaused member redirects to it; polls every 25 ms (asking is the only way to know).
   *
   * @throws After `timeoutMs`, with the last answers.
   */
  async waitForOneActive(options: WaitForActiveOptions = {}): Promise<Member> {
    const until = performance.now() + (options.timeoutMs ?? 5000);
    let last = "";
    for (;;) {
      const probes = await this.probeAll();
      const live = this.members.filter((m) => m.running && !m.paused);
      const actives = this.members.filter((_, i) => probes[i].state === "active");
      if (actives.length === 1 && !(options.not ?? []).includes(actives[0])) {
        const active = actives[0];
        const agree = live.every((m) => {
          const p = probes[m.index];
          return m === active || (p.state === "standby" && p.active === active.address);
        });
        if (agree) return active;
      }
      last = this.members.map((m, i) => `${m.address}: ${JSON.stringify(probes[i])}`).join(
        ", ",
      );
      if (performance.now() > until) {
        throw new Error(`no single agreed active node in time; last answers: ${last}`);
      }
      await sleep(POLL_MS);
    }
  }

  /** Every node's stderr, for failure messages. */
  logs(): string {
    return this.members.map((m) => `==== ${m.address} stderr ====\n${m.stderr()}`).join("\n");
  }

  /** Kills every process (`SIGCONT` first for paused ones) and removes the data directories. */
  async close(): Promise<void> {
    await Promise.all(this.members.map((m) => m.dispose()));
    await Promise.all(
      this.members.map((m) => Deno.remove(m.dataDir, { recursive: true }).catch(() => {})),
    );
  }

  /** Same as {@linkcode close}. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

/** Parses `A <key> A <token>`; throws on anything else. */
export function tokenOf(reply: string | null, key: string): bigint {
  const match = /^A (\S+) A ([1-9][0-9]*)$/.exec(reply ?? "");
  if (match === null || match[1] !== key) {
    throw new Error(`expected a grant of ${JSON.stringify(key)}, got ${JSON.stringify(reply)}`);
  }
  return BigInt(match[2]);
}

/** Waits until `member` received the replicated grant `key`/`token` (from its trace). */
export function replicated(member: Member, key: string, token: bigint): Promise<RegExpExecArray> {
  return member.waitForLog(new RegExp(` > H ${key} ${token} `), { timeoutMs: 3000 });
}

/** Runs `fn` with a raw connection to `member`, closed afterwards. */
export async function withLine<T>(member: Member, fn: (c: LineClient) => Promise<T>): Promise<T> {
  const client = await member.connect();
  try {
    return await fn(client);
  } finally {
    await client.close();
  }
}

/**
 * Asks every running member for `A <prefix>-<n> 30 0` (a fresh key each time) until one
 * grants it, every 20 ms; measures from `since`.
 *
 * @returns The granting member, its token and the time since `since` in ms.
 * @throws After `timeoutMs` without a grant.
 */
export async function firstGrant(
  cluster: Cluster,
  prefix: string,
  since: number,
  timeoutMs = 5000,
): Promise<{ member: Member; token: bigint; key: string; elapsedMs: number }> {
  let n = 0;
  for (;;) {
    const tries = cluster.members.filter((m) => m.running && !m.paused).map(async (m) => {
      const key = `${prefix}-${n++}`;
      let reply: string | null = null;
      try {
        reply = await m.request(`A ${key} 30 0`, 300);
      } catch {
        return undefined; // Refused: down.
      }
      return reply?.startsWith(`A ${key} A `)
        ? { member: m, key, token: tokenOf(reply, key) }
        : undefined;
    });
    const granted = (await Promise.all(tries)).find((g) => g !== undefined);
    const elapsedMs = performance.now() - since;
    if (granted !== undefined) return { ...granted, elapsedMs };
    if (elapsedMs > timeoutMs) throw new Error(`no grant within ${timeoutMs} ms`);
    await sleep(20);
  }
}
