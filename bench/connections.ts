/**
 * Scenario 6: memory per idle connection, and whether it is given back. The bench process
 * opens `--connections` connections to a fresh server, sends one request on each (lockd:
 * `R idle:<i> 1`, answered `N`; Redis: `PING`) so every connection is accepted and set up,
 * and leaves them idle; the server's RSS is read before, with every connection open, 3 s
 * after they all closed, and then every half second until the server has given back most of
 * what the connections took (or {@linkcode GIVE_BACK_WINDOW_MS} passed): a runtime may keep
 * freed memory for a while before it returns it (V8's memory reducer, jemalloc's purging).
 *
 * @module
 */

import type { Bench, Json } from "./_bench.ts";
import { progress } from "./_bench.ts";
import { rssBytes, type ServerProcess, sleep } from "./_procs.ts";
import { int, median, num } from "./_stats.ts";

/** What scenario 6 reports. */
export interface ConnectionsFigure {
  connections: number;
  runs: { lockd: Json[]; redis: Json[] };
  /** Medians, bytes of server RSS per open idle connection. */
  lockdPerConnection: number;
  redisPerConnection: number;
  /** Medians, bytes of RSS still held 3 s after every connection closed (over the baseline). */
  lockdKeptAfterClose: number;
  redisKeptAfterClose: number;
  /**
   * Medians, seconds from the close until the server held at most 30 % of what the open
   * connections took (`Infinity`: not within the window), and the bytes it held then.
   */
  lockdGivenBackS: number;
  redisGivenBackS: number;
  lockdKeptAfterGivingBack: number;
  redisKeptAfterGivingBack: number;
}

/** How long after the close the given-back memory is watched for, ms. */
export const GIVE_BACK_WINDOW_MS = 45_000;
/** Memory counts as given back when at most this share of the open connections' is kept. */
const GIVEN_BACK_SHARE = 0.3;

const encoder = new TextEncoder();

/** Opens `count` connections to `port`, each answered once; returns them open. */
async function openIdle(port: number, count: number, kind: string): Promise<Deno.TcpConn[]> {
  const conns: Deno.TcpConn[] = [];
  const buf = new Uint8Array(256);
  // In waves, so the server's accept backlog is never the limit.
  for (let start = 0; start < count; start += 500) {
    const wave = await Promise.all(
      Array.from(
        { length: Math.min(500, count - start) },
        () => Deno.connect({ hostname: "127.0.0.1", port }),
      ),
    );
    await Promise.all(wave.map(async (conn, i) => {
      const request = kind === "lockd" ? `R idle:${start + i} 1\n` : "PING\r\n";
      await conn.write(encoder.encode(request));
      const n = await conn.read(buf);
      if (n === null) throw new Error(`${kind} closed an idle connection`);
    }));
    conns.push(...wave);
  }
  return conns;
}

/** One run against `server`: RSS before, with `count` idle connections, and after closing. */
async function measure(server: ServerProcess, kind: string, count: number): Promise<Json> {
  await sleep(500);
  const before = rssBytes(server.pid);
  const conns = await openIdle(server.port, count, kind);
  await sleep(1000);
  const open = rssBytes(server.pid);
  for (const conn of conns) conn.close();
  const closed = performance.now();
  await sleep(3000);
  const after = rssBytes(server.pid);
  let kept = after - before;
  let givenBackS: number | null = null;
  for (;;) {
    const at = performance.now() - closed;
    if (kept <= GIVEN_BACK_SHARE * (open - before)) {
      givenBackS = at / 1000;
      break;
    }
    if (at >= GIVE_BACK_WINDOW_MS) break;
    await sleep(500);
    kept = rssBytes(server.pid) - before;
  }
  return {
    connections: count,
    rss_before: before,
    rss_open: open,
    rss_after_close: after,
    bytes_per_connection: (open - before) / count,
    kept_after_close: after - before,
    // null: still more than GIVEN_BACK_SHARE of it held at the end of the window.
    given_back_s: givenBackS,
    kept_after_giving_back: kept,
  };
}

/** Scenario 6, for every kind of server, `heavyRuns` times. */
export async function scenarioConnections(
  bench: Bench,
  count = 10_000,
): Promise<ConnectionsFigure> {
  const runs: ConnectionsFigure["runs"] = { lockd: [], redis: [] };
  for (let i = 0; i < bench.options.heavyRuns; i++) {
    for (const kind of bench.kinds) {
      const what = `scenario 6, ${int(count)} idle connections, ${kind}, run ${i + 1}`;
      const result = await bench.withServer(kind, what, (s) => measure(s, kind, count));
      runs[kind].push(result);
      progress(
        `${what}: ${num(Number(result.bytes_per_connection))} bytes per connection, ` +
          `${num(Number(result.kept_after_close) / 1e6)} MB kept 3 s after closing, ` +
          (result.given_back_s === null
            ? `most of it still kept after ${GIVE_BACK_WINDOW_MS / 1000} s`
            : `${num(Number(result.kept_after_giving_back) / 1e6)} MB after ` +
              `${num(Number(result.given_back_s))} s`),
      );
    }
  }
  const pick = (rs: Json[], field: string) =>
    median(rs.map((r) => r[field] === null ? Infinity : Number(r[field])));
  return {
    connections: count,
    runs,
    lockdPerConnection: pick(runs.lockd, "bytes_per_connection"),
    redisPerConnection: pick(runs.redis, "bytes_per_connection"),
    lockdKeptAfterClose: pick(runs.lockd, "kept_after_close"),
    redisKeptAfterClose: pick(runs.redis, "kept_after_close"),
    lockdGivenBackS: pick(runs.lockd, "given_back_s"),
    redisGivenBackS: pick(runs.redis, "given_back_s"),
    lockdKeptAfterGivingBack: pick(runs.lockd, "kept_after_giving_back"),
    redisKeptAfterGivingBack: pick(runs.redis, "kept_after_giving_back"),
  };
}
