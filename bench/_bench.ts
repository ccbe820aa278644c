/**
 * The benchmark's shared state: its options, the scenario context ({@linkcode Bench}) with
 * its scratch space, server start and stop, the load generator, and the anomalies it saw.
 *
 * @module
 */

import { runLoadgen, type ServerProcess, startLockd, startRedis } from "./_procs.ts";

export interface Options {
  quick: boolean;
  runs: number;
  heavyRuns: number;
  duration: number;
  warmup: number;
  locks: number;
  waiters: number;
  lease: number;
  failovers: number;
  redisRetryUs: number;
  redis: boolean;
  only: Set<number>;
  /** Idle connections opened by scenario 6. */
  connections: number;
  partial: boolean;
}

export type Kind = "lockd" | "redis";
/**
 * What the pairs scenario can drive: the two servers compared, lockd on the runtime's
 * sockets (`--io portable`), and the Deno floor.
 */
export type Server = Kind | "portable" | "floor";
export type Json = Record<string, unknown>;

/** Everything a scenario needs: options, the load generator, scratch space, the findings. */
export class Bench {
  readonly anomalies: string[] = [];
  #seq = 0;

  constructor(
    readonly options: Options,
    readonly loadgen: string,
    readonly tmp: string,
    readonly kinds: Kind[],
    readonly ticks: number,
  ) {}

  /** A fresh scratch directory. */
  dir(name: string): string {
    const path = `${this.tmp}/${name}-${++this.#seq}`;
    Deno.mkdirSync(path);
    return path;
  }

  /** Starts a fresh server of `kind`, runs `body`, stops it, and notes any misbehaviour. */
  async withServer<T>(kind: Kind, what: string, body: (s: ServerProcess) => Promise<T>) {
    const server = kind === "lockd"
      ? await startLockd({ dataDir: this.dir("lockd") })
      : await startRedis({ dir: this.dir("redis") });
    try {
      return await body(server);
    } finally {
      await this.stop(server, what);
    }
  }

  /** Stops `server` and notes a crash or a failed shutdown. */
  async stop(server: ServerProcess, what: string, expectRunning = true): Promise<void> {
    const early = server.exitCode();
    if (expectRunning && early !== undefined) {
      this.note(`${what}: ${server.name} exited by itself (code ${early})`, server.log());
      return;
    }
    const code = await server.stop();
    if (code !== 0 && server.name.startsWith("lockd")) {
      this.note(`${what}: ${server.name} exited with code ${code} after SIGTERM`, server.log());
    }
  }

  /** Runs the load generator; notes errors, lost replies and dropped connections. */
  async run(
    what: string,
    args: (string | number)[],
    onLine?: Parameters<typeof runLoadgen>[2],
  ): Promise<Json> {
    const result = await runLoadgen(this.loadgen, args.map(String), onLine);
    const errors = Number(result.errors ?? 0), lost = Number(result.lost ?? 0);
    const closed = Number(result.closed ?? 0);
    if (errors > 0 || lost > 0 || closed > 0) {
      this.note(
        `${what}: ${errors} unexpected replies, ${lost} requests without reply, ` +
          `${closed} connections closed by the server`,
        (result.error_samples as string[]).join("\n"),
      );
    }
    return result;
  }

  note(message: string, detail = ""): void {
    const text = detail.trim() === "" ? message : `${message}\n    ${detail.trim().slice(-600)}`;
    this.anomalies.push(text);
    console.error(`!! ${text}`);
  }
}

export function progress(message: string): void {
  console.error(message);
}
