/**
 * The limit on repeated log lines (server/log_limit.ts, docs/server.md "Logs"): one line per
 * key and interval, the next one saying how many were held back, keys independent.
 */

import assert from "node:assert/strict";
import { LogLimit } from "../server/log_limit.ts";

Deno.test("LogLimit passes one line per key and interval and counts the rest", () => {
  let now = 0;
  const limit = new LogLimit(1000, () => now);
  assert.equal(limit.pass("a"), 0, "the first line goes out");
  now = 10;
  assert.equal(limit.pass("a"), undefined);
  assert.equal(limit.pass("a"), undefined);
  assert.equal(limit.pass("b"), 0, "another key is not held back");
  now = 999;
  assert.equal(limit.pass("a"), undefined);
  now = 1000;
  assert.equal(limit.pass("a"), 3, "the next line says how many were held back");
  now = 5000;
  assert.equal(limit.pass("a"), 0, "none held back since");
  assert.equal(LogLimit.more(3), "; 3 more since the last such line");
  assert.equal(LogLimit.more(0), "");
});

Deno.test("LogLimit forgets its keys at once past 1,024 instead of growing without bound", () => {
  let now = 0;
  const limit = new LogLimit(1000, () => now);
  for (let i = 0; i < 1024; i++) limit.pass(`k${i}`);
  now = 2000;
  // The 1,025th key makes room by forgetting them all; a forgotten key starts afresh.
  assert.equal(limit.pass("new"), 0);
  assert.equal(limit.pass("k0"), 0);
  now = 2001;
  assert.equal(limit.pass("k0"), undefined);
});
