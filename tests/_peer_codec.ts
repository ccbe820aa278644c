/**
 * Shared helper of the peer codec tests (tests/peer_codec_test.ts, peer_codec_fuzz_test.ts):
 * decoded messages shown as JSON.
 *
 * @module
 */

/** JSON with bigints shown as `123n`. */
export function show(value: unknown): string {
  return JSON.stringify(value, (_key, v) => typeof v === "bigint" ? `${v}n` : v);
}
