/**
 * The command line of docs/server.md: flags and their `LOCKD_*` environment variables (listed,
 * with the `--help` page, in `flags.ts`) and their validation. Pure: turns arguments and an
 * environment into a {@linkcode Config} or a {@linkcode UsageError}; `main.ts` does the I/O.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { parseSeconds } from "../client/codec.ts";
import { epollRuledOutBy, FLAGS, HELP, IO_MODES, type IoMode } from "./flags.ts";
import { LOG_FORMATS, LOG_LEVELS, type LogFormat, type LogLevel } from "./log.ts";

export { HELP };

/** A bad command line: exit code 2, message on stderr. */
export class UsageError extends Error {
  /** @param message What is wrong, in one line. */
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/** A TCP address as given on the command line. */
export interface HostPort {
  /** Host name or IP (IPv6 without brackets). */
  hostname: string;
  /** Port, 0–65535. */
  port: number;
}

/** The server's configuration after flags and environment are read. */
export interface Config {
  /** `--help` was asked: print {@linkcode HELP} and exit 0. */
  help: boolean;
  /** `--version` was asked. */
  version: boolean;
  /** Where to listen. */
  listen: HostPort;
  /** How others reach this node (`M` replies, peers); `undefined` = the listen address. */
  advertise: HostPort | undefined;
  /** The cluster in priority order; empty for a single node. */
  peers: HostPort[];
  /** Token high-water mark directory. */
  dataDir: string;
  /** Longest lease, in ms. */
  maxLeaseMs: number;
  /** Connections served at once. */
  maxConnections: number;
  /** Acquires queued at once across all connections. */
  maxWaiters: number;
  /** WebSocket bridge address, if any. */
  bridge: HostPort | undefined;
  /** Address of the HTTP endpoints and status page (`--http`), if any. */
  http: HostPort | undefined;
  /** Origins allowed to use the bridge (`undefined`: same host only). */
  bridgeOrigins: string[] | undefined;
  /** Serve the browser demo page and client bundle on the bridge. */
  bridgeDemo: boolean;
  /** Peer heartbeat interval, in ms. */
  heartbeatMs: number;
  /** Silence after which a peer counts as dead, in ms. */
  failoverTimeoutMs: number;
  /** Replication mode of a cluster: `async`, or `sync` (answer once a standby has it). */
  replication: "async" | "sync";
  /** The credentials file; `undefined`: no authentication. */
  authFile: string | undefined;
  /** How long a session may have no connection before its bound locks go, in ms. */
  sessionGraceMs: number;
  /** The file holding the cluster's peer secret; `undefined`: peers are not authenticated. */
  peerSecretFile: string | undefined;
  /** TLS certificate and key files (PEM); `undefined`: plain TCP. */
  tls: { certFile: string; keyFile: string } | undefined;
  /** CA certificate file (PEM) to verify peers' certificates with. */
  tlsCaFile: string | undefined;
  /** A file of bearer tokens the bridge requires (one per line); `undefined`: none. */
  bridgeTokenFile: string | undefined;
  /** The transport of the plain-TCP port (docs/server.md, "The epoll transport"). */
  io: IoMode;
  /** How log lines on stderr are written: `text` or `json` (one object per line). */
  logFormat: LogFormat;
  /** The least severe level logged (`LOCKD_TRACE=1` lowers it to `debug`). */
  logLevel: LogLevel;
}

/**
 * Parses `host:port` (`[v6]:port` for IPv6).
 *
 * @throws {UsageError} When it is not an address with a port 0–65535.
 */
export function parseHostPort(text: string, what: string): HostPort {
  const match = /^(?:\[([0-9A-Fa-f:.]+)\]|([^\s:\[\]]+)):([0-9]{1,5})$/.exec(text);
  const port = match ? Number(match[3]) : NaN;
  if (!match || port > 65535) {
    throw new UsageError(`${what} must be HOST:PORT (e.g. 127.0.0.1:7321), got "${text}"`);
  }
  return { hostname: match[1] ?? match[2], port };
}

/** Formats an address as `host:port`, bracketing IPv6. */
export function formatHostPort(addr: HostPort): string {
  return addr.hostname.includes(":")
    ? `[${addr.hostname}]:${addr.port}`
    : `${addr.hostname}:${addr.port}`;
}

function positiveSeconds(text: string, what: string): number {
  const ms = parseSeconds(text);
  if (ms === Infinity) {
    throw new UsageError(`${what} must be at most 999999999999 seconds, got "${text}"`);
  }
  if (!(ms > 0)) {
    throw new UsageError(`${what} must be a positive number of seconds, got "${text}"`);
  }
  return ms;
}

/**
 * An on/off environment variable: `1` or `true` is on; unset, empty, `0` or `false` off.
 *
 * @throws {UsageError} For any other value.
 */
/** A count from 1 to 999,999,999 (`--max-connections`, `--max-waiters`). */
function count(text: string, what: string): number {
  if (!/^[1-9][0-9]{0,8}$/.test(text)) {
    throw new UsageError(`${what} must be a whole number from 1 to 999999999, got "${text}"`);
  }
  return Number(text);
}

function envSwitch(text: string | undefined, what: string): boolean {
  const value = text?.toLowerCase() ?? "";
  if (value === "1" || value === "true") return true;
  if (value === "" || value === "0" || value === "false") return false;
  throw new UsageError(`${what} must be 1, true, 0 or false, got "${text}"`);
}

function replicationMode(text: string, what: string): "async" | "sync" {
  if (text !== "async" && text !== "sync") {
    throw new UsageError(`${what} must be async or sync, got "${text}"`);
  }
  return text;
}

function oneOf<T extends string>(allowed: readonly T[], text: string, what: string): T {
  if (!(allowed as readonly string[]).includes(text)) {
    const names = allowed.slice(0, -1).join(", ") + " or " + allowed[allowed.length - 1];
    throw new UsageError(`${what} must be ${names}, got "${text}"`);
  }
  return text as T;
}

/**
 * Reads the configuration from command-line arguments and the environment.
 *
 * @param args The arguments after the script name.
 * @param env Environment lookup (e.g. `(name) => Deno.env.get(name)`).
 * @throws {UsageError} On an unknown flag, a missing or bad value, or stray arguments.
 */
export function parseConfig(args: string[], env: (name: string) => string | undefined): Config {
  const options: Record<string, { type: "string" | "boolean"; short?: string }> = {
    help: { type: "boolean", short: "h" },
    version: { type: "boolean", short: "V" },
    "bridge-demo": { type: "boolean" },
  };
  for (const f of FLAGS) options[f.name] = { type: "string" };
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({ args, options, strict: true, allowPositionals: false }));
  } catch (error) {
    const message = error instanceof Error ? error.message.split("\n")[0] : String(error);
    // parseArgs takes "--max-lease -1" for a flag without its value: say what to write.
    const ambiguous = /^Option '(--[a-z-]+)[^']*' argument is ambiguous/.exec(message);
    if (ambiguous !== null) {
      const flag = ambiguous[1];
      throw new UsageError(`${flag} got a value starting with "-": write it as ${flag}=VALUE`);
    }
    throw new UsageError(message.replace(/\. To specify .*$/, ""));
  }
  if (values.help === true || values.version === true) {
    return {
      ...parseConfig([], () => undefined),
      help: values.help === true,
      version: values.version === true,
    };
  }
  /** Where each value came from, for error messages: the flag or its variable. */
  const source: Record<string, string> = {};
  const get = (name: string): string | undefined => {
    const flag = FLAGS.find((f) => f.name === name)!;
    const given = values[name] as string | undefined;
    if (given === "") throw new UsageError(`--${name} needs a value`);
    const fromEnv = env(flag.env) || undefined; // an empty variable counts as unset
    source[name] = given !== undefined
      ? `--${name}`
      : fromEnv !== undefined
      ? flag.env
      : `--${name}`;
    return given ?? fromEnv ?? flag.fallback;
  };
  const listen = parseHostPort(get("listen")!, source.listen);
  const advertiseText = get("advertise");
  const peersText = get("peers");
  const bridgeText = get("bridge");
  const httpText = get("http");
  const config: Config = {
    help: false,
    version: false,
    listen,
    advertise: advertiseText === undefined
      ? undefined
      : parseHostPort(advertiseText, source.advertise),
    peers: peersText === undefined
      ? []
      : peersText.split(",").map((p) => parseHostPort(p.trim(), `each ${source.peers} entry`)),
    dataDir: get("data-dir")!,
    maxLeaseMs: positiveSeconds(get("max-lease")!, source["max-lease"]),
    maxConnections: count(get("max-connections")!, source["max-connections"]),
    maxWaiters: count(get("max-waiters")!, source["max-waiters"]),
    bridge: bridgeText === undefined ? undefined : parseHostPort(bridgeText, source.bridge),
    http: httpText === undefined ? undefined : parseHostPort(httpText, source.http),
    bridgeOrigins: get("bridge-origins")?.split(",").map((o) => o.trim()).filter((o) => o !== ""),
    bridgeDemo: values["bridge-demo"] === true ||
      envSwitch(env("LOCKD_BRIDGE_DEMO"), "LOCKD_BRIDGE_DEMO"),
    heartbeatMs: positiveSeconds(get("heartbeat")!, source.heartbeat),
    failoverTimeoutMs: positiveSeconds(get("failover-timeout")!, source["failover-timeout"]),
    replication: replicationMode(get("replication")!, source.replication),
    authFile: get("auth-file"),
    sessionGraceMs: positiveSeconds(get("session-grace")!, source["session-grace"]),
    peerSecretFile: get("peer-secret-file"),
    tls: undefined,
    tlsCaFile: get("tls-ca"),
    bridgeTokenFile: get("bridge-token-file"),
    io: oneOf(IO_MODES, get("io")!, source.io),
    logFormat: oneOf(LOG_FORMATS, get("log-format")!, source["log-format"]),
    logLevel: oneOf(LOG_LEVELS, get("log-level")!, source["log-level"]),
  };
  const certFile = get("tls-cert");
  const keyFile = get("tls-key");
  if ((certFile === undefined) !== (keyFile === undefined)) {
    throw new UsageError("--tls-cert and --tls-key go together");
  }
  if (certFile !== undefined && keyFile !== undefined) config.tls = { certFile, keyFile };
  if (config.io === "epoll") {
    const other = epollRuledOutBy({
      tls: config.tls !== undefined,
      peers: config.peers.length > 0,
      bridge: config.bridge !== undefined,
    });
    if (other !== undefined) {
      throw new UsageError(`--io epoll serves a single node's plain TCP only: not with ${other}`);
    }
  }
  // A node takes a heartbeat later than half the failover timeout for a pause of its own
  // (docs/cluster.md, "Two actives at once"): one that long every time would stop elections.
  if (config.heartbeatMs * 2 >= config.failoverTimeoutMs) {
    throw new UsageError("--heartbeat must be under half of --failover-timeout");
  }
  // --http at the bridge's HOST:PORT shares its listener, and / is the status page there.
  const shared = config.http !== undefined && config.bridge !== undefined &&
    formatHostPort(config.http) === formatHostPort(config.bridge);
  if (config.bridgeDemo && shared) {
    throw new UsageError(
      `${source.http} shares the bridge's address, where / is the status page: ` +
        "--bridge-demo needs a --bridge of its own",
    );
  }
  return config;
}
