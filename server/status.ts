/**
 * A node's status snapshot (docs/protocol.md, "Inspection"), the JSON of `S -`, the HTTP
 * `/status` and what `/metrics` renders: built by a pure function over the server's parts,
 * so it is tested without sockets.
 *
 * @module
 */

import type { NodeStatus } from "../client/codec.ts";
import type { ClusterStatus } from "./cluster/peer_status.ts";
import type { Metrics } from "./metrics.ts";

/** The parts of a server a status is built from. */
export interface StatusParts {
  /** This node's address (its `--peers` entry, or its listen address). */
  address: string;
  /** The server's version. */
  version: string;
  /** Now and the start, in ms on the server's monotonic clock. */
  now: number;
  /** When the server started (ms, same clock). */
  startedAt: number;
  /** Whether it is stopping (a single node then reports `leaving`). */
  stopping: boolean;
  /** The lock table's sizes. */
  table: { readonly held: number; readonly waiting: number };
  /** The token mark: the last token issued or known, and the mark reserved. */
  tokens: { readonly last: bigint; readonly reserved: bigint };
  /** Counters and the grant rate. */
  metrics: Metrics;
  /** Client connections open. */
  connections: number;
  /** Sessions with a connection open or within their grace. */
  sessions: number;
  /** A cluster node's part (see `clusterStatus`); `undefined` for a single node. */
  cluster: ClusterStatus | undefined;
}

/** Milliseconds as seconds with millisecond precision. */
function seconds(ms: number): number {
  return Math.round(ms) / 1000;
}

/** The status of a node made of `parts`. */
export function buildStatus(parts: StatusParts): NodeStatus {
  const { metrics, cluster } = parts;
  const counts = metrics.counts;
  return {
    address: parts.address,
    version: parts.version,
    role: cluster?.role ?? (parts.stopping ? "leaving" : "active"),
    active: cluster === undefined ? (parts.stopping ? null : parts.address) : cluster.active,
    uptimeSeconds: seconds(parts.now - parts.startedAt),
    replication: cluster?.replication ?? { mode: "none", degraded: false, inSync: [] },
    peers: cluster?.peers ?? [],
    connections: parts.connections,
    sessions: parts.sessions,
    holders: parts.table.held,
    waiters: parts.table.waiting,
    tokens: { last: String(parts.tokens.last), mark: String(parts.tokens.reserved) },
    counts: {
      grants: counts.grants,
      releases: counts.releases,
      extends: counts.extends,
      expirations: counts.expirations,
      timeouts: counts.timeouts,
      rejections: { ...metrics.rejections },
      failovers: metrics.failovers,
      handoffs: metrics.handoffs,
    },
    grantsPerSecond: metrics.grantsPerSecond(),
  };
}
