/**
 * Shared assertions of the codec tests (tests/codec_*_test.ts): a request line that must be
 * accepted or rejected by `parseRequest()`.
 */

import assert from "node:assert/strict";
import { parseRequest, type Request, type RequestError } from "../client/codec.ts";

/** JSON with bigints shown as `123n`. */
export function show(value: unknown): string {
  return JSON.stringify(value, (_key, v) => typeof v === "bigint" ? `${v}n` : v);
}

/** Parses `line` and asserts it is rejected; returns the error. */
export function rejected(line: string, options?: { maxLeaseMs?: number }): RequestError {
  const result = parseRequest(line, options);
  assert.ok("kind" in result, `expected ${JSON.stringify(line)} to be rejected`);
  assert.equal(result.kind, "E");
  assert.equal(typeof result.message, "string");
  assert.ok(result.message.length > 0, "the message must not be empty");
  assert.ok(!result.message.includes("\n"), "the message must fit on the reply line");
  return result;
}

/** Parses `line` and asserts it is accepted; returns the request. */
export function accepted(line: string, options?: { maxLeaseMs?: number }): Request {
  const result = parseRequest(line, options);
  assert.ok(
    !("kind" in result),
    `expected ${JSON.stringify(line)} to be accepted, got ${show(result)}`,
  );
  return result;
}
