/**
 * Test helper: records unhandled promise rejections so that a test can assert there were
 * none. Importing this module installs the listener for the whole test file (it also keeps
 * such rejections from failing the run on their own: the assertion reports them instead).
 *
 * @module
 */

import assert from "node:assert/strict";
import { setTimeout as delay } from "node:timers/promises";

/** Unhandled promise rejections seen during the run: there must be none. */
const unhandled: unknown[] = [];
globalThis.addEventListener("unhandledrejection", (event) => {
  event.preventDefault();
  unhandled.push(event.reason);
});

/** Asserts that no promise rejection went unhandled so far (after one macrotask). */
export async function assertNoUnhandledRejections(): Promise<void> {
  await delay(0);
  assert.deepEqual(unhandled.splice(0), [], "unhandled promise rejections");
}
