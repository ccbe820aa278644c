/**
 * Shared helpers of the `LockClient` tests against a scripted fake server
 * (tests/client_fake_*_test.ts, tests/_fake_server.ts).
 */

import assert from "node:assert/strict";
import { LockClient, type LockClientOptions } from "../mod.ts";
import { waitUntil } from "./_fake_server.ts";

/** Fast background reconnection, so tests wait milliseconds rather than 3 s. */
export const FAST: LockClientOptions = { reconnectIntervalMs: 50 };

/** A client whose connections are all up (so round-robin has every connection to pick). */
export async function readyClient(
  servers: string | string[],
  options: LockClientOptions = {},
): Promise<LockClient> {
  const client = new LockClient(servers, { ...FAST, ...options });
  await waitUntil(
    () => client.connected === client.connections,
    "every client connection to be up",
  );
  return client;
}

/** Rejects if `promise` has not settled within `ms` (instead of hanging the test). */
export function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: not settled within ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** Settles with the error `promise` rejects with (fails if it resolves). */
export async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  assert.fail("expected a rejection");
}
