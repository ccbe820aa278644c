/**
 * Shared harness of the lock table unit tests (tests/lock_table_test.ts,
 * lock_table_deadlines_test.ts, lock_table_state_test.ts): a table on a fake clock with a
 * counter for fencing tokens, every hook call logged as a line, and acquires that must be
 * granted at once or must queue.
 *
 * @module
 */

import assert from "node:assert/strict";
import { LockTable, type LockTableHooks, Waiter } from "../server/engine/lock_table.ts";

/** A table on a fake clock, with a log of every hook call. */
export interface Harness {
  table: LockTable<string>;
  /** Hook calls, e.g. `granted b k 2`, `timedOut c k`, `held k 2 1100`, `freed k 1`. */
  log: string[];
  /** Sets the fake clock (ms). */
  at(ms: number): void;
  /** Returns the log lines since the last call and forgets them. */
  take(): string[];
  /** When true, nextToken throws (token exhaustion). */
  exhausted: boolean;
}

/** A fresh harness: tokens from `firstToken` (default 1n), all hooks or only the required ones. */
export function harness(
  options: { firstToken?: bigint; hooks?: "all" | "required" } = {},
): Harness {
  let now = 0;
  let token = (options.firstToken ?? 1n) - 1n;
  const log: string[] = [];
  const h: Harness = {
    table: undefined as unknown as LockTable<string>,
    log,
    at(ms) {
      now = ms;
    },
    take() {
      return log.splice(0, log.length);
    },
    exhausted: false,
  };
  const hooks: LockTableHooks<string> = {
    granted: (who, key, t) => log.push(`granted ${who} ${key} ${t}`),
    timedOut: (who, key) => log.push(`timedOut ${who} ${key}`),
  };
  if (options.hooks !== "required") {
    hooks.held = (key, t, deadline) => log.push(`held ${key} ${t} ${deadline}`);
    hooks.freed = (key, t) => log.push(`freed ${key} ${t}`);
  }
  h.table = new LockTable<string>({
    clock: () => now,
    nextToken: () => {
      if (h.exhausted) throw new Error("Fencing tokens are exhausted");
      return ++token;
    },
    hooks,
  });
  return h;
}

/** Acquire that must be granted at once. */
export function grab(h: Harness, key: string, leaseMs: number, who = "x"): bigint {
  const result = h.table.acquire(key, leaseMs, 0, who);
  assert.equal(typeof result, "bigint", `${who} should get ${key} at once`);
  return result as bigint;
}

/** Acquire that must queue. */
export function queue(h: Harness, key: string, leaseMs: number, waitMs: number, who: string) {
  const result = h.table.acquire(key, leaseMs, waitMs, who);
  assert.ok(result instanceof Waiter, `${who} should queue for ${key}`);
  return result as Waiter<string>;
}
