/**
 * Shared fixture of the `LockClient` tests against a real server (tests/client_test.ts,
 * client_lease_test.ts, client_drop_test.ts): a `server/main.ts` process whose clients are
 * closed at the end, and assertions on locks and signals.
 */

import assert from "node:assert/strict";
import { LockClient, type LockClientOptions } from "../mod.ts";
import { type ServerProcess, type StartOptions, startServer } from "./_helpers.ts";
import { assertNoUnhandledRejections } from "./_unhandled.ts";

/** Closes every client made through it, stops the server and removes its directory. */
export class Fixture {
  #clients: LockClient[] = [];
  #cleanups: (() => Promise<void> | void)[] = [];
  constructor(readonly server: ServerProcess) {}

  /** A client of the server (or of `address`), closed at the end. */
  client(
    address: string | string[] = this.server.address,
    options: LockClientOptions = {},
  ): LockClient {
    const client = new LockClient(address, options);
    this.#clients.push(client);
    return client;
  }

  /** Runs `fn` at the end, before the server stops. */
  defer(fn: () => Promise<void> | void): void {
    this.#cleanups.push(fn);
  }

  async cleanup(): Promise<void> {
    for (const fn of this.#cleanups.reverse()) await fn();
    await Promise.all(this.#clients.map((c) => c.close()));
    await this.server.stop();
    await Deno.remove(this.server.dataDir, { recursive: true }).catch(() => {});
  }
}

/** Starts a server, runs `fn`, then cleans up and checks for unhandled rejections. */
export async function withFixture(
  options: StartOptions,
  fn: (f: Fixture) => Promise<void>,
): Promise<void> {
  const fixture = new Fixture(await startServer(options));
  try {
    await fn(fixture);
  } finally {
    await fixture.cleanup();
  }
  await assertNoUnhandledRejections();
}

/** Tracks whether a promise has settled, without ever leaving it unhandled. */
export function watch<T>(promise: Promise<T>): { settled: () => boolean; promise: Promise<T> } {
  let settled = false;
  promise.then(() => settled = true, () => settled = true);
  return { settled: () => settled, promise };
}

/** Resolves with the ms elapsed until `signal` aborts; rejects after `timeoutMs`. */
export function abortedWithin(signal: AbortSignal, timeoutMs: number): Promise<number> {
  const start = performance.now();
  if (signal.aborted) return Promise.resolve(0);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      reject(new Error(`lock.signal did not fire within ${timeoutMs} ms`));
    }, timeoutMs);
    const onAbort = () => {
      clearTimeout(timer);
      resolve(performance.now() - start);
    };
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/** Asserts that `other` can take `key` at once (it is free), and releases it again. */
export async function assertFree(other: LockClient, key: string, message?: string): Promise<void> {
  const lock = await other.tryAcquire(key, { lease: 5 });
  assert.ok(lock !== null, message ?? `"${key}" should be free`);
  await lock.release();
}

/** Asserts that `other` cannot take `key` now (someone holds it). */
export async function assertHeld(other: LockClient, key: string, message?: string): Promise<void> {
  const lock = await other.tryAcquire(key, { lease: 5 });
  if (lock !== null) await lock.release();
  assert.equal(lock, null, message ?? `"${key}" should be held`);
}

/** A free TCP port on 127.0.0.1 with nothing listening. */
export function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

/** Time since `start` in ms. */
export function since(start: number): number {
  return performance.now() - start;
}

/** The `A <key> ...` lines a proxied connection carried. */
export function acquiresOf(lines: readonly string[], key: string): string[] {
  return lines.filter((l) => l.startsWith(`A ${key} `));
}
