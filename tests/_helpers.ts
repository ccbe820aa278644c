/**
 * Test helpers: run a real lockd process (on a free port, or to its exit), talk to it with
 * raw lines, and check its grant replies.
 *
 * @module
 */

import assert from "node:assert/strict";
import { setTimeout as delay } from "node:timers/promises";
import { readLines } from "./_net.ts";

const ROOT = new URL("../", import.meta.url);
const MAIN = new URL("server/main.ts", ROOT).pathname;
const encoder = new TextEncoder();

/** A lockd process started for a test. */
export interface ServerProcess {
  /** The real port from the ready line. */
  port: number;
  /** `127.0.0.1:<port>`. */
  address: string;
  /** The ready line. */
  ready: string;
  /** Its data directory. */
  dataDir: string;
  /** The child process. */
  child: Deno.ChildProcess;
  /** Everything written to stderr so far (complete once `exited` resolved). */
  stderr(): string;
  /** Sends a signal and waits for the exit code. */
  stop(signal?: Deno.Signal): Promise<number>;
  /** Resolves with the exit code. */
  exited: Promise<number>;
}

/** Options of {@linkcode startServer}. */
export interface StartOptions {
  /** Extra command-line arguments. */
  args?: string[];
  /** Data directory to use (default: a fresh temp dir). */
  dataDir?: string;
  /** Listen address (default `127.0.0.1:0`). */
  listen?: string;
  /** Extra environment. */
  env?: Record<string, string>;
  /** Run it with at most this many open file descriptors (`ulimit -n`, through `bash`). */
  fdLimit?: number;
}

/** The command that runs `server/main.ts` with `args`: stdin closed, stdout and stderr piped. */
function mainCommand(args: string[], env?: Record<string, string>, fdLimit?: number): Deno.Command {
  const run = [Deno.execPath(), "run", "-A", MAIN, ...args];
  const [command, ...rest] = fdLimit === undefined
    ? run
    : ["bash", "-c", `ulimit -n ${fdLimit} && exec "$0" "$@"`, ...run];
  return new Deno.Command(command, {
    args: rest,
    env,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  });
}

/** Starts `server/main.ts` with `args` (stdin closed, stdout and stderr piped). */
export function spawnMain(
  args: string[],
  env?: Record<string, string>,
  fdLimit?: number,
): Deno.ChildProcess {
  return mainCommand(args, env, fdLimit).spawn();
}

/** Runs `server/main.ts` with `args` and no expectations (for CLI tests). */
export async function runMain(
  args: string[],
  env?: Record<string, string>,
): Promise<{ code: number; stdout: string; stderr: string }> {
  const out = await mainCommand(args, env).output();
  const decoder = new TextDecoder();
  return { code: out.code, stdout: decoder.decode(out.stdout), stderr: decoder.decode(out.stderr) };
}

/**
 * Runs `server/main.ts` to its exit, killing it if it is still running after `timeoutMs`
 * (a guard against a server that starts when it should not).
 */
export async function runToExit(
  args: string[],
  env?: Record<string, string>,
  timeoutMs = 20_000,
): Promise<{ code: number; stdout: string; stderr: string; timedOut: boolean }> {
  const child = spawnMain(args, env);
  const output = child.output();
  let timer: ReturnType<typeof setTimeout> | undefined;
  let timedOut = false;
  await Promise.race([
    output,
    new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        timedOut = true;
        child.kill("SIGKILL");
        resolve();
      }, timeoutMs);
    }),
  ]);
  clearTimeout(timer);
  const out = await output;
  const decoder = new TextDecoder();
  return {
    code: out.code,
    stdout: decoder.decode(out.stdout),
    stderr: decoder.decode(out.stderr),
    timedOut,
  };
}

/** Starts lockd on a free port and waits for its ready line. */
export async function startServer(options: StartOptions = {}): Promise<ServerProcess> {
  const dataDir = options.dataDir ?? await Deno.makeTempDir({ prefix: "lockd-test-" });
  const child = spawnMain(
    ["--listen", options.listen ?? "127.0.0.1:0", "--data-dir", dataDir, ...(options.args ?? [])],
    options.env,
    options.fdLimit,
  );
  let errText = "";
  const errDone = (async () => {
    for await (const chunk of child.stderr.pipeThrough(new TextDecoderStream())) errText += chunk;
  })();
  const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let outText = "";
  let ready: string | undefined;
  while (ready === undefined) {
    const { value, done } = await lines.read();
    if (done) break;
    outText += value;
    const nl = outText.indexOf("\n");
    if (nl >= 0) ready = outText.slice(0, nl);
  }
  // Keep draining stdout so the child never blocks on it.
  const outDone = (async () => {
    while (!(await lines.read()).done) { /* drain */ }
  })();
  const exited = (async () => {
    const status = await child.status;
    await Promise.all([errDone, outDone]);
    return status.code;
  })();
  if (ready === undefined) {
    const code = await exited;
    throw new Error(`lockd exited with ${code} before it was ready:\n${errText}`);
  }
  const match = /listening on (\S+):(\d+)/.exec(ready);
  if (!match) throw new Error(`unexpected ready line: ${ready}`);
  const port = Number(match[2]);
  return {
    port,
    address: `127.0.0.1:${port}`,
    ready,
    dataDir,
    child,
    exited,
    stderr: () => errText,
    async stop(signal: Deno.Signal = "SIGTERM") {
      try {
        child.kill(signal);
      } catch {
        // Already gone.
      }
      return await exited;
    },
  };
}

/** A raw TCP client that writes text and reads reply lines, for black-box tests. */
export class LineClient {
  #conn: Deno.Conn;
  #lines: string[] = [];
  #waiting: ((line: string | null) => void) | null = null;
  #eof = false;
  #reader: Promise<void>;

  private constructor(conn: Deno.Conn) {
    this.#conn = conn;
    this.#reader = this.#read();
  }

  /** Connects to `127.0.0.1:port`. */
  static async connect(port: number): Promise<LineClient> {
    return new LineClient(await Deno.connect({ hostname: "127.0.0.1", port }));
  }

  /** Connects with TLS to `127.0.0.1:port`, trusting `caCerts` (PEM). */
  static async connectTls(port: number, caCerts: string[]): Promise<LineClient> {
    return new LineClient(await Deno.connectTls({ hostname: "127.0.0.1", port, caCerts }));
  }

  /** The underlying connection (for low-level tricks). */
  get conn(): Deno.Conn {
    return this.#conn;
  }

  /** Writes `text` as is (add `\n` yourself). */
  async write(text: string | Uint8Array): Promise<void> {
    const data = typeof text === "string" ? encoder.encode(text) : text;
    let offset = 0;
    while (offset < data.length) offset += await this.#conn.write(data.subarray(offset));
  }

  /** Sends one line. */
  send(line: string): Promise<void> {
    return this.write(line + "\n");
  }

  /** Next line, or `null` at end of stream; rejects after `timeoutMs`. */
  readLine(timeoutMs = 5000): Promise<string | null> {
    const line = this.#lines.shift();
    if (line !== undefined) return Promise.resolve(line);
    if (this.#eof) return Promise.resolve(null);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#waiting = null;
        reject(new Error(`no line within ${timeoutMs} ms`));
      }, timeoutMs);
      this.#waiting = (l) => {
        clearTimeout(timer);
        this.#waiting = null;
        resolve(l);
      };
    });
  }

  /** Reads `n` lines. */
  async readLines(n: number, timeoutMs = 5000): Promise<string[]> {
    const out: string[] = [];
    for (let i = 0; i < n; i++) {
      const line = await this.readLine(timeoutMs);
      if (line === null) throw new Error(`end of stream after ${out.length} of ${n} lines`);
      out.push(line);
    }
    return out;
  }

  /** Sends a request and reads one reply line. */
  async request(line: string, timeoutMs = 5000): Promise<string | null> {
    await this.send(line);
    return await this.readLine(timeoutMs);
  }

  /** Asserts-friendly: resolves `true` if no line arrives within `ms`. */
  async silentFor(ms: number): Promise<boolean> {
    if (this.#lines.length > 0) return false;
    try {
      await this.readLine(ms);
      return false;
    } catch {
      return true;
    }
  }

  /** Resolves when the server closed the connection (after reading any remaining lines). */
  async closedByPeer(timeoutMs = 5000): Promise<string[]> {
    const rest: string[] = [];
    for (;;) {
      const line = await this.readLine(timeoutMs);
      if (line === null) return rest;
      rest.push(line);
    }
  }

  /** Closes the connection. */
  async close(): Promise<void> {
    try {
      this.#conn.close();
    } catch {
      // Already closed.
    }
    await this.#reader;
  }

  async #read(): Promise<void> {
    await readLines(this.#conn, (line) => this.#push(line));
    this.#eof = true;
    this.#waiting?.(null);
  }

  #push(line: string): void {
    if (this.#waiting) this.#waiting(line);
    else this.#lines.push(line);
  }
}

/** Waits until `check()` is true, polling every `everyMs`, failing after `timeoutMs`. */
export async function waitFor(
  check: () => boolean | Promise<boolean>,
  what: string,
  timeoutMs = 5000,
  everyMs = 10,
): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** Opens clients against one server and closes them all at the end. */
export class Clients {
  #open: LineClient[] = [];
  constructor(readonly port: number) {}

  /** Connects a new client, closed by {@linkcode closeAll}. */
  async connect(): Promise<LineClient> {
    const client = await LineClient.connect(this.port);
    this.#open.push(client);
    return client;
  }

  /**
   * Connects until the server accepts the connection, that is, answers a request (with
   * `--max-connections`, this proves that the server has processed the close of an earlier
   * connection).
   */
  async connectAccepted(timeoutMs = 3000): Promise<LineClient> {
    const until = Date.now() + timeoutMs;
    for (;;) {
      const client = await this.connect();
      let line: string | null = null;
      try {
        line = await client.request("R accept-probe 1", 1000);
      } catch {
        line = null;
      }
      if (line === "R accept-probe N") return client;
      await client.close();
      if (Date.now() > until) throw new Error(`no connection accepted within ${timeoutMs} ms`);
      await delay(10);
    }
  }

  /** Closes every client opened so far. */
  async closeAll(): Promise<void> {
    await Promise.all(this.#open.map((c) => c.close()));
    this.#open = [];
  }
}

/** Starts a server, runs `fn`, then closes every client, stops the server, removes its dir. */
/**
 * The transports of a single node's plain-TCP port (`--io`): black-box suites of the
 * protocol and its limits run on each.
 */
export const TRANSPORTS = ["epoll", "portable"] as const;

/** Registers a test; its name gets the transport appended. */
export type TransportTest = (name: string, fn: (t: Deno.TestContext) => Promise<void>) => void;

/**
 * Runs `body` once per transport: its `test` registers a test named for the transport, and
 * its `serve` is {@linkcode withServer} with the node on that transport.
 */
export function onEachTransport(
  body: (test: TransportTest, serve: typeof withServer) => void,
): void {
  for (const io of TRANSPORTS) {
    body(
      (name, fn) => Deno.test(`${name} (--io ${io})`, fn),
      (options, fn) => withServerOn(io, options, fn),
    );
  }
}

/** {@linkcode withServer} with the node on transport `io` (`LOCKD_IO`). */
export function withServerOn(
  io: typeof TRANSPORTS[number],
  options: StartOptions,
  fn: (server: ServerProcess, clients: Clients) => Promise<void>,
): Promise<void> {
  return withServer({ ...options, env: { LOCKD_IO: io, ...options.env } }, fn);
}

export async function withServer(
  options: StartOptions,
  fn: (server: ServerProcess, clients: Clients) => Promise<void>,
): Promise<void> {
  const server = await startServer(options);
  const clients = new Clients(server.port);
  try {
    await fn(server, clients);
  } finally {
    await clients.closeAll();
    await server.stop();
    await removeDir(server.dataDir);
  }
}

/** Removes a temp dir (already gone is fine: cleanup must not hide a test's own error). */
async function removeDir(dir: string): Promise<void> {
  try {
    await Deno.remove(dir, { recursive: true });
  } catch (error) {
    if (!(error instanceof Deno.errors.NotFound)) throw error;
  }
}

/** The largest fencing token, 2^64-1 (docs/protocol.md, "Semantics"). */
export const MAX_TOKEN = 18446744073709551615n;

/**
 * Asserts that `reply` is `A <key> A <token>` and returns the token, of any size (the
 * failure message shortens a long key or reply). {@linkcode grantOf} also checks the bound.
 */
export function parseGrant(reply: string | null, key: string): bigint {
  const parts = (reply ?? "").split(" ");
  assert.ok(
    parts.length === 4 && parts[0] === "A" && parts[1] === key && parts[2] === "A" &&
      /^[1-9][0-9]*$/.test(parts[3]),
    `expected a grant of ${JSON.stringify(key).slice(0, 80)}, got ${
      JSON.stringify(reply)?.slice(0, 200)
    }`,
  );
  return BigInt(parts[3]);
}

/** Asserts that `reply` is `A <key> A <token>` with a token of at most 2^64-1; returns it. */
export function grantOf(reply: string | null, key: string): bigint {
  const token = parseGrant(reply, key);
  assert.ok(token <= MAX_TOKEN, `token ${token} is above 2^64-1`);
  return token;
}
