/**
 * Processes of the benchmark: a lockd node, a Redis server or the Deno floor started fresh
 * for one run, the C load generator, and what `/proc` says about a process (RSS, CPU time).
 *
 * @module
 */

import { freePorts, sleep } from "../tests/_net.ts";

export { freePorts, sleep };

const ROOT = new URL("..", import.meta.url).pathname;
const FLOOR_MAIN = `${ROOT}bench/floor_server.ts`;
const READY_TIMEOUT_MS = 15_000;
const STOP_TIMEOUT_MS = 10_000;
const TAIL_CHARS = 4000;

/** Output of a command, or `undefined` if it cannot run. */
export async function commandOutput(cmd: string, args: string[]): Promise<string | undefined> {
  try {
    const out = await new Deno.Command(cmd, { args, stdout: "piped", stderr: "piped" }).output();
    return out.success ? new TextDecoder().decode(out.stdout).trim() : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The commit of the checkout at `root`, and whether what is measured (the server, the client,
 * `mod.ts`, `deno.json`) has uncommitted changes: "abc1234" or "abc1234 with uncommitted
 * changes to the server or client"; "unknown" outside git.
 */
export async function gitState(root: string): Promise<string> {
  const head = await commandOutput("git", ["-C", root, "rev-parse", "--short", "HEAD"]);
  if (head === undefined) return "unknown";
  const paths = ["server", "client", "mod.ts", "deno.json"];
  const dirty = await commandOutput("git", ["-C", root, "status", "--porcelain", "--", ...paths]);
  return `${head}${dirty ? " with uncommitted changes to the server or client" : ""}`;
}

/** Yields the lines of a byte stream. */
async function* lines(stream: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  let rest = "";
  for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
    rest += chunk;
    let nl;
    while ((nl = rest.indexOf("\n")) >= 0) {
      yield rest.slice(0, nl);
      rest = rest.slice(nl + 1);
    }
  }
  if (rest !== "") yield rest;
}

/** Keeps the last few thousand characters of a stream (a server's log, for error reports). */
export function tail(
  stream: ReadableStream<Uint8Array>,
): { text: () => string; done: Promise<void> } {
  let text = "";
  const done = (async () => {
    for await (const chunk of stream.pipeThrough(new TextDecoderStream())) {
      text = (text + chunk).slice(-TAIL_CHARS);
    }
  })();
  return { text: () => text, done };
}

/** A server process started for one run. */
export interface ServerProcess {
  /** What it is, for messages (`lockd`, `redis`, `lockd standby`). */
  readonly name: string;
  /** Process id (for `/proc` and signals). */
  readonly pid: number;
  /** TCP port on 127.0.0.1. */
  readonly port: number;
  /** Role from the ready line (lockd) or `master`/`replica` (Redis). */
  readonly role: string;
  /** Exit code once it has exited, else `undefined`. */
  exitCode(): number | undefined;
  /** The end of its stderr (lockd) or log (Redis). */
  log(): string;
  /** Sends a signal (`SIGKILL`, `SIGTERM`). */
  signal(signal: Deno.Signal): void;
  /** Resolves with the exit code. */
  readonly exited: Promise<number>;
  /** SIGTERM, then SIGKILL if it has not exited within 10 s; resolves with the exit code. */
  stop(): Promise<number>;
}

/** A {@linkcode ServerProcess} over a spawned child (its log from `log`, drained by `drained`). */
export function wrap(
  name: string,
  child: Deno.ChildProcess,
  port: number,
  role: string,
  log: () => string,
  drained: Promise<unknown>,
): ServerProcess {
  let code: number | undefined;
  const exited = child.status.then(async (s) => {
    await drained.catch(() => {});
    code = s.code;
    return s.code;
  });
  const signal = (sig: Deno.Signal) => {
    try {
      child.kill(sig);
    } catch {
      // Already gone.
    }
  };
  return {
    name,
    pid: child.pid,
    port,
    role,
    exitCode: () => code,
    log,
    signal,
    exited,
    async stop() {
      if (code !== undefined) return code;
      signal("SIGTERM");
      let timer: ReturnType<typeof setTimeout> | undefined;
      const late = new Promise<void>((resolve) => timer = setTimeout(resolve, STOP_TIMEOUT_MS));
      await Promise.race([exited, late]);
      clearTimeout(timer);
      if (code === undefined) signal("SIGKILL");
      return await exited;
    },
  };
}

/** Options of {@linkcode startLockd}. */
export interface LockdOptions {
  /** Data directory (fresh). */
  dataDir: string;
  /** Port to listen on; 0 (default) picks one. */
  port?: number;
  /** Cluster peers in priority order (`host:port`), including this node. */
  peers?: string[];
  /** Name for messages. */
  name?: string;
  /** More command-line arguments (e.g. `--replication sync`). */
  args?: string[];
  /** A copy of the package (ending in `/`) to run `server/main.ts` from; default this one. */
  root?: string;
}

/**
 * Starts `deno run -A server/main.ts` and waits for its ready line
 * (`listening on HOST:PORT as ROLE`).
 */
export function startLockd(options: LockdOptions): Promise<ServerProcess> {
  const args = ["--listen", `127.0.0.1:${options.port ?? 0}`, "--data-dir", options.dataDir];
  if (options.peers) args.push("--peers", options.peers.join(","));
  if (options.args) args.push(...options.args);
  const root = options.root ?? ROOT;
  return startDenoServer(`${root}server/main.ts`, args, options.name ?? "lockd", root);
}

/**
 * Starts the Deno floor (`bench/floor_server.ts`: a line server that answers acquires and
 * releases without any lock logic) and waits for its ready line.
 */
export function startFloor(): Promise<ServerProcess> {
  return startDenoServer(FLOOR_MAIN, [], "Deno floor");
}

/** Runs `deno run -A <script> <args>` and waits for `listening on HOST:PORT as ROLE`. */
async function startDenoServer(
  script: string,
  scriptArgs: string[],
  name: string,
  cwd = ROOT,
): Promise<ServerProcess> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", script, ...scriptArgs],
    cwd,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const err = tail(child.stderr);
  const out = lines(child.stdout);
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`${name} printed no ready line within ${READY_TIMEOUT_MS} ms`)),
      READY_TIMEOUT_MS,
    );
  });
  let ready: IteratorResult<string>;
  try {
    ready = await Promise.race([out.next(), timeout]);
  } catch (error) {
    child.kill("SIGKILL");
    await child.status;
    throw new Error(`${error instanceof Error ? error.message : error}\n${err.text()}`);
  } finally {
    clearTimeout(timer);
  }
  const match = ready.done ? null : /listening on (\S+):(\d+) as (\w+)/.exec(ready.value);
  if (match === null) {
    await child.status;
    await err.done;
    throw new Error(`${name} did not start: ${ready.value ?? "(no output)"}\n${err.text()}`);
  }
  // Keep reading stdout so that the process never blocks on it.
  const drained = Promise.all([
    err.done,
    (async () => {
      for await (const _ of out);
    })(),
  ]);
  return wrap(name, child, Number(match[2]), match[3], err.text, drained);
}

/** Options of {@linkcode startRedis}. */
export interface RedisOptions {
  /** Working directory (fresh): a replica's transfer file goes there. */
  dir: string;
  /** Start as a replica of this port. */
  replicaOf?: number;
  /** Name for messages. */
  name?: string;
}

/** Starts `redis-server` on a free port, without persistence, and waits until it answers. */
export async function startRedis(options: RedisOptions): Promise<ServerProcess> {
  const [port] = freePorts(1);
  const args = [
    "--port",
    String(port),
    "--bind",
    "127.0.0.1",
    "--save",
    "",
    "--appendonly",
    "no",
    "--dir",
    options.dir,
    "--logfile",
    "",
    "--loglevel",
    "warning",
  ];
  if (options.replicaOf !== undefined) {
    args.push("--replicaof", "127.0.0.1", String(options.replicaOf));
  }
  const child = new Deno.Command("redis-server", {
    args,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const out = tail(child.stdout);
  const err = tail(child.stderr);
  const name = options.name ?? "redis";
  const server = wrap(
    name,
    child,
    port,
    options.replicaOf === undefined ? "master" : "replica",
    () => out.text() + err.text(),
    Promise.all([out.done, err.done]),
  );
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    try {
      if ((await redisCommand(port, ["PING"])) === "PONG") break;
    } catch {
      // Not listening yet.
    }
    if (server.exitCode() !== undefined || Date.now() > deadline) {
      await server.stop();
      throw new Error(`${name} did not start\n${server.log()}`);
    }
    await sleep(20);
  }
  if (options.replicaOf !== undefined) {
    for (;;) {
      const info = await redisCommand(port, ["INFO", "replication"]);
      if (/master_link_status:up/.test(info)) break;
      if (Date.now() > deadline) {
        await server.stop();
        throw new Error(`${name} did not connect to its master\n${info}`);
      }
      await sleep(50);
    }
  }
  return server;
}

/** Sends one command to Redis and returns its reply as text (status, bulk or integer). */
export async function redisCommand(port: number, args: string[]): Promise<string> {
  const encoder = new TextEncoder();
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  try {
    const request = `*${args.length}\r\n` +
      args.map((a) => `$${encoder.encode(a).length}\r\n${a}\r\n`).join("");
    await conn.write(encoder.encode(request));
    let data = new Uint8Array(0);
    const buf = new Uint8Array(64 * 1024);
    for (;;) {
      const n = await conn.read(buf);
      if (n === null) throw new Error("Redis closed the connection");
      const next = new Uint8Array(data.length + n);
      next.set(data);
      next.set(buf.subarray(0, n), data.length);
      data = next;
      const text = new TextDecoder().decode(data);
      const nl = text.indexOf("\r\n");
      if (nl < 0) continue;
      const head = text.slice(0, nl);
      if (head[0] === "-") throw new Error(`Redis: ${head.slice(1)}`);
      if (head[0] !== "$") return head.slice(1);
      const length = Number(head.slice(1));
      if (length < 0) return "";
      if (data.length >= encoder.encode(head).length + 2 + length + 2) {
        return text.slice(nl + 2, text.length - 2);
      }
    }
  } finally {
    conn.close();
  }
}

/** A numeric field of Redis `INFO <section>` (e.g. `used_memory`). */
export async function redisInfo(port: number, section: string, field: string): Promise<number> {
  const info = await redisCommand(port, ["INFO", section]);
  const match = new RegExp(`^${field}:(\\d+)`, "m").exec(info);
  if (match === null) throw new Error(`INFO ${section} has no ${field}`);
  return Number(match[1]);
}

/** Resident set size of a process, in bytes (`VmRSS` of `/proc/<pid>/status`). */
export function rssBytes(pid: number): number {
  const status = Deno.readTextFileSync(`/proc/${pid}/status`);
  const match = /^VmRSS:\s+(\d+) kB/m.exec(status);
  if (match === null) throw new Error(`no VmRSS for process ${pid}`);
  return Number(match[1]) * 1024;
}

/** CPU time (user + system, all threads) of a process so far, in clock ticks. */
export function cpuTicks(pid: number): number {
  const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
  // The command name may contain spaces: fields are counted after its closing parenthesis.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(fields[11]) + Number(fields[12]); // utime, stime (fields 14 and 15)
}

/** The machine's CPU time so far, in clock ticks: all of it, and the part stolen by the host. */
export interface MachineTicks {
  total: number;
  steal: number;
}

/**
 * The machine's CPU time from the `cpu` line of `/proc/stat`; `steal` is the time the
 * hypervisor ran something else while this machine's CPUs wanted to run.
 */
export function machineTicks(): MachineTicks {
  const line = Deno.readTextFileSync("/proc/stat").split("\n", 1)[0];
  const fields = line.trim().split(/\s+/).slice(1, 9).map(Number);
  return { total: fields.reduce((a, b) => a + b, 0), steal: fields[7] ?? 0 };
}

/** The share of the machine's CPU time stolen by the host between two readings (0–1). */
export function stealShare(before: MachineTicks, after: MachineTicks): number {
  const total = after.total - before.total;
  return total > 0 ? (after.steal - before.steal) / total : 0;
}

/** Clock ticks per second (`getconf CLK_TCK`, normally 100). */
export async function ticksPerSecond(): Promise<number> {
  return Number(await commandOutput("getconf", ["CLK_TCK"])) || 100;
}

/** CPU use of a process over `ms` milliseconds, in percent of one core. */
export async function cpuPercent(pid: number, ms: number, ticks: number): Promise<number> {
  const before = cpuTicks(pid);
  const start = performance.now();
  await sleep(ms);
  const used = cpuTicks(pid) - before;
  return (used / ticks) / ((performance.now() - start) / 1000) * 100;
}

/** Talks to a running load generator between its phases. */
export interface LoadgenControl {
  /** Sends "go": the load generator starts its next phase. */
  go(): Promise<void>;
  /** Closes its stdin: the load generator finishes and prints its result. */
  end(): Promise<void>;
}

/**
 * Runs the load generator and returns its JSON result (its last line). Other lines (phase
 * words: `baseline`, `filled`, `queued`, `loaded <s>`) go to `onLine`, which may measure the
 * server and then tell the load generator to go on.
 */
export async function runLoadgen(
  binary: string,
  args: string[],
  onLine?: (line: string, control: LoadgenControl) => Promise<void>,
): Promise<Record<string, unknown>> {
  const child = new Deno.Command(binary, {
    args,
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  let open = true;
  const control: LoadgenControl = {
    go: () => writer.write(new TextEncoder().encode("go\n")),
    end: async () => {
      if (open) {
        open = false;
        await writer.close();
      }
    },
  };
  const err = tail(child.stderr);
  let result: Record<string, unknown> | undefined;
  for await (const line of lines(child.stdout)) {
    if (line.startsWith("{")) result = JSON.parse(line);
    else await onLine?.(line, control);
  }
  await control.end().catch(() => {});
  const status = await child.status;
  await err.done;
  if (!status.success || result === undefined) {
    throw new Error(`loadgen ${args.join(" ")} failed (exit ${status.code}): ${err.text()}`);
  }
  return result;
}
