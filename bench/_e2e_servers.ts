/**
 * The servers of the end-to-end benchmark, each started fresh for one run: lockd, Redis
 * (no persistence: `--save "" --appendonly no`) and a single-node etcd with a fresh data
 * directory (on tmpfs when `/dev/shm` exists, so that its fsyncs cost what Redis's missing
 * persistence costs: nothing); and CPU pinning with `taskset`.
 *
 * @module
 */

import {
  commandOutput,
  freePorts,
  type ServerProcess,
  sleep,
  startLockd,
  startRedis,
  tail,
  wrap,
} from "./_procs.ts";

/** The lock systems compared; the server each one talks to. */
export type SystemName = "lockd" | "redlock" | "semaphore" | "etcd3";

const READY_TIMEOUT_MS = 15_000;

/** A server started for one run, and how to remove what it left behind. */
export interface StartedServer {
  server: ServerProcess;
  /** Stops it and removes its data directory. */
  stop(): Promise<number>;
}

/** `/dev/shm` if it is there (tmpfs), else the system's temporary directory. */
function scratchRoot(): string | undefined {
  try {
    return Deno.statSync("/dev/shm").isDirectory ? "/dev/shm" : undefined;
  } catch {
    return undefined;
  }
}

/** Options of {@linkcode startServer}. */
export interface StartOptions {
  /** Pin every thread of the server to these CPUs (`taskset` syntax). */
  cpus?: string;
  /** The copy of the package lockd runs from (see `startLockd`). */
  root?: string;
}

/** Starts the server `system` talks to, fresh. */
export async function startServer(
  system: SystemName,
  options: StartOptions = {},
): Promise<StartedServer> {
  const { cpus, root } = options;
  const dir = await Deno.makeTempDir({
    prefix: `lockd-e2e-${system}-`,
    dir: system === "etcd3" ? scratchRoot() : undefined,
  });
  let server: ServerProcess;
  try {
    server = system === "lockd"
      ? await startLockd({ dataDir: dir, root })
      : system === "etcd3"
      ? await startEtcd(dir)
      : await startRedis({ dir });
  } catch (error) {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    throw error;
  }
  const stop = async () => {
    const code = await server.stop();
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    return code;
  };
  if (cpus !== undefined) {
    try {
      await pin(server.pid, cpus);
    } catch (error) {
      await stop();
      throw error;
    }
  }
  return { server, stop };
}

/** Pins every thread of process `pid` to `cpus` (`taskset -a -p -c`). */
export async function pin(pid: number, cpus: string): Promise<void> {
  const out = await new Deno.Command("taskset", {
    args: ["-a", "-p", "-c", cpus, String(pid)],
    stdout: "null",
    stderr: "piped",
  }).output();
  if (!out.success) {
    throw new Error(
      `taskset -a -p -c ${cpus} ${pid} failed: ${new TextDecoder().decode(out.stderr)}`,
    );
  }
}

/** Whether `taskset` runs here. */
export async function hasTaskset(): Promise<boolean> {
  return (await commandOutput("taskset", ["-c", "0", "true"])) !== undefined;
}

/** `etcd --version`'s first line's version, or `undefined` if etcd is not on the PATH. */
export async function etcdVersion(): Promise<string | undefined> {
  const out = await commandOutput("etcd", ["--version"]);
  return out === undefined ? undefined : /etcd Version:\s*(\S+)/.exec(out)?.[1] ?? out;
}

/** `redis-server --version`'s version, or `undefined` if it is not on the PATH. */
export async function redisVersion(): Promise<string | undefined> {
  const out = await commandOutput("redis-server", ["--version"]);
  return out === undefined ? undefined : /v=(\S+)/.exec(out)?.[1] ?? out;
}

/** Starts a single-node etcd with its data in `dir` and waits until `/health` says so. */
export async function startEtcd(dir: string): Promise<ServerProcess> {
  const [client, peer] = freePorts(2);
  const clientUrl = `http://127.0.0.1:${client}`;
  const peerUrl = `http://127.0.0.1:${peer}`;
  const child = new Deno.Command("etcd", {
    args: [
      "--name",
      "bench",
      "--data-dir",
      `${dir}/data`,
      "--listen-client-urls",
      clientUrl,
      "--advertise-client-urls",
      clientUrl,
      "--listen-peer-urls",
      peerUrl,
      "--initial-advertise-peer-urls",
      peerUrl,
      "--initial-cluster",
      `bench=${peerUrl}`,
      "--logger",
      "zap",
      "--log-level",
      "error",
    ],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const out = tail(child.stdout);
  const err = tail(child.stderr);
  const server = wrap(
    "etcd",
    child,
    client,
    "leader",
    () => out.text() + err.text(),
    Promise.all([out.done, err.done]),
  );
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    try {
      const response = await fetch(`${clientUrl}/health`);
      const body = await response.text();
      if (response.ok && /"health":\s*"true"/.test(body)) break;
    } catch {
      // Not listening yet.
    }
    if (server.exitCode() !== undefined || Date.now() > deadline) {
      await server.stop();
      throw new Error(`etcd did not start\n${server.log()}`);
    }
    await sleep(50);
  }
  return server;
}
