/**
 * Test helper: a made-up node status (the JSON of `S`, docs/protocol.md, "Inspection") for
 * the tests of what renders or serves one. Every count is zero unless overridden.
 */

import type { NodeCounts, NodeStatus } from "../mod.ts";

/** Counts of a node that has done nothing, with `parts` overriding. */
export function zeroCounts(parts: Partial<NodeCounts> = {}): NodeCounts {
  return {
    grants: 0,
    releases: 0,
    extends: 0,
    expirations: 0,
    timeouts: 0,
    rejections: {
      bad_request: 0,
      auth: 0,
      prefix: 0,
      no_active: 0,
      shutting_down: 0,
      limits: 0,
      other: 0,
    },
    failovers: 0,
    handoffs: 0,
    ...parts,
  };
}

/** An idle single active node at 127.0.0.1:7321, with `parts` overriding. */
export function nodeStatus(parts: Partial<NodeStatus> = {}): NodeStatus {
  return {
    address: "127.0.0.1:7321",
    version: "0.1.0",
    role: "active",
    active: "127.0.0.1:7321",
    uptimeSeconds: 1,
    replication: { mode: "none", degraded: false, inSync: [] },
    peers: [],
    connections: 0,
    sessions: 0,
    holders: 0,
    waiters: 0,
    tokens: { last: "0", mark: "1000000" },
    counts: zeroCounts(),
    grantsPerSecond: [],
    ...parts,
  };
}
