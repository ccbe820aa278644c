/**
 * The options of {@linkcode LockServer.start}: where a node listens, its limits, its cluster,
 * its credentials and TLS (docs/server.md, "Options").
 *
 * @module
 */

import type { Role } from "./cluster/election.ts";
import type { HostPort } from "./cli.ts";
import type { ReplicationMode } from "./cluster/replication.ts";
import type { Logger } from "./log.ts";
import type { Credentials } from "./auth.ts";
import type { IoMode } from "./flags.ts";

/** Cluster settings of {@linkcode LockServerOptions} (docs/cluster.md). */
export interface ServerClusterOptions {
  /** This node's address, as it appears in `peers`. */
  self: string;
  /** Every node, in priority order (this one included), with its parsed address. */
  peers: { address: string; target: HostPort }[];
  /** Heartbeat interval, in ms. */
  heartbeatMs: number;
  /** Silence after which a peer counts as dead, in ms. */
  failoverTimeoutMs: number;
  /** `sync`: answer changes once an in-sync standby acknowledged them. Default `async`. */
  replication?: ReplicationMode;
  /** The cluster secret: peers must prove they know it (docs/security.md, "Peers"). */
  peerSecret?: string;
  /** Log every peer message but heartbeats (`LOCKD_TRACE=1`). */
  trace?: boolean;
  /** Log heartbeats too (`LOCKD_TRACE_HB=1`). */
  traceHeartbeats?: boolean;
}

/** Options of {@linkcode LockServer.start}. */
export interface LockServerOptions {
  /** Interface to listen on. Default `127.0.0.1`. */
  hostname?: string;
  /** TCP port; 0 picks a free one. Default 7321. */
  port?: number;
  /** Directory of the token high-water mark. Default `./lockd-data`. */
  dataDir?: string;
  /** Longest lease a client may ask for, in ms. Default 86,400,000 (one day). */
  maxLeaseMs?: number;
  /** Connections served at once; the next one gets `- - E too many connections`. Default 10,000. */
  maxConnections?: number;
  /**
   * Acquires queued at once across all connections; the next gets `E too many queued acquires
   * on this server` (docs/protocol.md, "Limits and overload"). Default 1,000,000.
   */
  maxWaiters?: number;
  /** Monotonic clock in ms. Default `performance.now`, read once per event-loop run. */
  clock?: () => number;
  /** Cluster settings; a single node without them. */
  cluster?: ServerClusterOptions;
  /** Called on every role change of a cluster node (for logs). */
  onRole?: (role: Role, description: string) => void;
  /** Where events are logged. Default: stderr. */
  log?: Logger;
  /**
   * The credentials in force, read at each hello (the auth file may change); `undefined`,
   * or a function returning it, when the server requires none.
   */
  credentials?: () => Credentials | undefined;
  /** How long a session may have no connection before its bound locks go, ms. Default 5000. */
  sessionGraceMs?: number;
  /**
   * Serve TLS on the client and peer port with this certificate chain and key (PEM), and
   * dial peers with TLS, verifying them with `caCerts` (default: the system's roots).
   */
  tls?: { cert: string; key: string; caCerts?: string[] };
  /**
   * The transport of the plain-TCP port (docs/server.md, "The epoll transport"). Default
   * `auto`: epoll by FFI for a single node on Linux with FFI allowed, the runtime's sockets
   * otherwise.
   */
  io?: IoMode;
}
