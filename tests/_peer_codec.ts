/**
 * Shared parts of the peer codec tests (tests/peer_codec_test.ts, peer_codec_fuzz_test.ts):
 * every message type the codec knows, and decoded messages shown as JSON.
 *
 * @module
 */

export { show } from "./_codec.ts";

/** Every peer message type (docs/cluster.md, "Peer protocol"), sorted: each test covers all. */
export const PEER_TYPES: readonly string[] = [
  "ABORT",
  "ACK",
  "COMMIT",
  "F",
  "H",
  "HANDOFF",
  "HANDOFFEND",
  "HB",
  "O",
  "OGONE",
  "PEER",
  "SEQ",
  "SNAP",
  "SNAPEND",
  "SYNC",
  "TAKEN",
  "W",
];
