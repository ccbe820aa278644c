/**
 * What a running server tells about itself (docs/protocol.md, "Inspection"): its status
 * (`S -`, `/status`), pages of held keys (`/locks`), its metrics in the Prometheus text
 * format (`/metrics`) and whether it is ready (`/readyz`). It reads the server's parts and
 * changes none of them; `LockServer` delegates its public inspection methods here.
 *
 * @module
 */

import { type LocksPage, MAX_LOCKS_LIMIT, type NodeStatus } from "../client/codec.ts";
import { clusterReady, clusterStatus, type ClusterView } from "./cluster/peer_status.ts";
import type { ReplicationMode } from "./cluster/replication.ts";
import { type InspectedTable, keyInfos } from "./inspect.ts";
import { type Metrics, renderPrometheus } from "./metrics.ts";
import type { Owners } from "./owners.ts";
import { buildStatus } from "./status.ts";

/** The parts of a server a {@linkcode Report} reads. */
export interface ReportParts {
  /** This node's address (its `--peers` entry, or its listen address). */
  address: string;
  /** The server's version. */
  version: string;
  /** The lock table's clock (ms). */
  clock(): number;
  /** The lock table. */
  table: InspectedTable & { readonly held: number; readonly waiting: number };
  /** The token mark. */
  tokens: { readonly last: bigint; readonly reserved: bigint };
  /** Counters, histogram, grant rate. */
  metrics: Metrics;
  /** Who holds what. */
  owners: Owners;
  /** Client connections open now. */
  connections(): number;
  /** Sessions with a connection open or within their grace. */
  sessions(): number;
  /** The role machine of a cluster node; `undefined` for a single node. */
  cluster(): ClusterView | undefined;
  /** The replication mode of a cluster. */
  replication: ReplicationMode;
  /** Whether the server is stopping. */
  stopping(): boolean;
}

/** A server's status, locks, metrics and readiness, read on demand. */
export class Report {
  #parts: ReportParts;
  #startedAt: number;

  /** @param parts What to read. */
  constructor(parts: ReportParts) {
    this.#parts = parts;
    this.#startedAt = parts.clock();
  }

  /** This node's status now. */
  status(): NodeStatus {
    const p = this.#parts;
    const now = p.clock();
    const cluster = p.cluster();
    return buildStatus({
      address: p.address,
      version: p.version,
      now,
      startedAt: this.#startedAt,
      stopping: p.stopping(),
      table: p.table,
      tokens: p.tokens,
      metrics: p.metrics,
      connections: p.connections(),
      sessions: p.sessions(),
      cluster: cluster && clusterStatus(cluster, p.address, p.replication, now),
    });
  }

  /**
   * Up to `limit` held keys starting with `prefix`, after `after`, in key order.
   *
   * @throws {RangeError} For a `limit` that is not a whole number from 1 to 1000.
   */
  locks(prefix: string, limit: number, after?: string): LocksPage {
    if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LOCKS_LIMIT) {
      throw new RangeError(`limit must be a whole number from 1 to ${MAX_LOCKS_LIMIT}`);
    }
    const p = this.#parts;
    return keyInfos(p.table, { clock: p.clock, owners: p.owners }, prefix, limit, after);
  }

  /** The Prometheus text format of the metrics. */
  metricsText(): string {
    const metrics = this.#parts.metrics;
    return renderPrometheus(this.status(), metrics.histogram(), metrics.requests);
  }

  /** Whether the node is ready (see `LockServer.isReady`). */
  isReady(): boolean {
    if (this.#parts.stopping()) return false;
    const cluster = this.#parts.cluster();
    return cluster === undefined || clusterReady(cluster);
  }
}
