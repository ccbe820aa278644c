/**
 * Shared helpers of the line I/O unit tests (tests/line_io_test.ts, line_io_order_test.ts,
 * line_io_socket_test.ts): text to bytes and back, and one macrotask turn.
 *
 * @module
 */

const encoder = new TextEncoder();

/** Decodes the bytes a fake write was given. */
export const decoder = new TextDecoder();

/** `data` as bytes (text is encoded as UTF-8). */
export function bytes(data: string | Uint8Array): Uint8Array {
  return typeof data === "string" ? encoder.encode(data) : data;
}

/** Lets pending microtasks and I/O callbacks run: one macrotask turn. */
export function tick(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 0));
}
