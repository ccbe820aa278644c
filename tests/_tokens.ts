/**
 * Shared helpers of the fencing-token tests (tests/tokens_test.ts, tokens_errors_test.ts,
 * tokens_process_test.ts): a temp data dir, the mark on disk, and an assertion on the type
 * of a thrown error.
 */

import assert from "node:assert/strict";

/** Runs `fn` with a fresh temp dir, removed afterwards. */
export async function withTempDir(fn: (dir: string) => Promise<void> | void): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "lockd-tokens-" });
  try {
    await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** The text of the mark on disk (`<dir>/tokens`). */
export function readMark(dir: string): string {
  return Deno.readTextFileSync(`${dir}/tokens`);
}

/** Asserts that `fn` throws an instance of `type`; returns the error. */
export function throwsA<E extends Error>(fn: () => unknown, type: new (...args: never[]) => E): E {
  let caught: unknown;
  try {
    fn();
  } catch (error) {
    caught = error;
  }
  assert.ok(
    caught instanceof type,
    `expected ${type.name}, got ${caught instanceof Error ? caught.stack : String(caught)}`,
  );
  return caught;
}
