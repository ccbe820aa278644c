/**
 * The cluster's guarded work (server/cluster/fatal_guard.ts): what a timer callback throws
 * goes to the fatal path; a peer line's data-directory failure does too, while any other
 * error of a peer line still ends only that link. No sockets, no timers.
 */

import assert from "node:assert/strict";
import { guarded, guardedPeer, guardedScheduler } from "../server/cluster/fatal_guard.ts";
import type { Scheduler } from "../server/cluster/ports.ts";
import { DataDirError } from "../server/tokens.ts";

Deno.test("guardedScheduler() sends what a callback throws to fatal, and runs the others", () => {
  const fatal: unknown[] = [];
  const callbacks: (() => void)[] = [];
  const fake: Scheduler = {
    every: (_ms, fn) => (callbacks.push(fn), () => {}),
    after: (_ms, fn) => (callbacks.push(fn), () => {}),
  };
  const scheduler = guardedScheduler(fake, (e) => fatal.push(e));
  const boom = new DataDirError("disk full");
  let ran = 0;
  scheduler.every(100, () => {
    throw boom;
  });
  scheduler.after(100, () => ran++);
  for (const fn of callbacks) fn();
  assert.deepEqual(fatal, [boom]);
  assert.equal(ran, 1);
  guarded(() => ran++, () => assert.fail("nothing was thrown"))();
  assert.equal(ran, 2);
});

Deno.test("guardedPeer() sends a DataDirError to fatal and lets other errors end the link", () => {
  const fatal: unknown[] = [];
  const lines: string[] = [];
  let closed = 0;
  const handler = guardedPeer({
    line(text) {
      if (text === "W 5") throw new DataDirError("cannot save the mark");
      if (text === "bug") throw new TypeError("a bug");
      lines.push(text);
    },
    closed: () => closed++,
  }, (e) => fatal.push(e));
  handler.line("HB x");
  handler.line("W 5");
  assert.throws(() => handler.line("bug"), TypeError);
  handler.closed();
  assert.deepEqual(lines, ["HB x"]);
  assert.equal(fatal.length, 1);
  assert.ok(fatal[0] instanceof DataDirError);
  assert.equal(closed, 1);
});
