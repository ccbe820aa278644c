/**
 * Test helpers of the session tests (docs/protocol.md, "Sessions"), on one node
 * (`session_locks_test.ts`) and in a cluster (`session_failover_test.ts`).
 */

import assert from "node:assert/strict";
import type { LineClient } from "./_helpers.ts";

/** A fresh session id: 32 lowercase hex digits. */
export function newSession(): string {
  return crypto.randomUUID().replaceAll("-", "");
}

/**
 * Sends `A <key> 60 <wait>` on `c` and proves that it is queued: a later request of the same
 * connection is answered first (the server handles a connection's lines in order).
 */
export async function queue(c: LineClient, key: string, wait: number): Promise<void> {
  await c.send(`A ${key} 60 ${wait}`);
  assert.equal(await c.request("R probe 1"), "R probe N", `A ${key} should be queued`);
}

/** The next line on `c` (a queued acquire's answer) and when it arrived (`performance.now()`). */
export async function arrival(
  c: LineClient,
  timeoutMs: number,
): Promise<{ reply: string; at: number }> {
  const reply = await c.readLine(timeoutMs);
  return { reply: reply ?? "(end of stream)", at: performance.now() };
}

/** Every `session ... gone ... released N lock(s)` line (`event=session-expired`) a node logged so far. */
export function releasesLogged(node: { stderr(): string }): { session: string; count: number }[] {
  const re =
    /session ([A-Za-z0-9_-]{8}) gone for its grace period: released (\d+) lock\(s\) event=session-expired released=\2\b/g;
  return [...node.stderr().matchAll(re)].map((m) => ({ session: m[1], count: Number(m[2]) }));
}
