/**
 * The command line of docs/server.md: flags, their `LOCKD_*` environment variables, validation and
 * the `--help` page. Pure: turns arguments and an environment into a {@linkcode Config} or
 * a {@linkcode UsageError}; `main.ts` does the I/O.
 *
 * @module
 */

import { parseArgs } from "node:util";
import { parseSeconds } from "../client/codec.ts";
import { LOG_FORMATS, LOG_LEVELS, type LogFormat, type LogLevel } from "./log.ts";

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
  /** WebSocket bridge address, if any. */
  bridge: HostPort | undefined;
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
  /** How log lines on stderr are written: `text` or `json` (one object per line). */
  logFormat: LogFormat;
  /** The least severe level logged (`LOCKD_TRACE=1` lowers it to `debug`). */
  logLevel: LogLevel;
}

interface Flag {
  name: string;
  env: string;
  value: string;
  fallback?: string;
  help: string;
}

/** Every valued flag, its environment variable and default. */
const FLAGS: Flag[] = [
  {
    name: "listen",
    env: "LOCKD_LISTEN",
    value: "HOST:PORT",
    fallback: "127.0.0.1:7321",
    help: "TCP address for clients and peers. Port 0 picks a free port\n" +
      "(the ready line shows it). Loopback by default: exposing lockd\n" +
      "is a choice.",
  },
  {
    name: "peers",
    env: "LOCKD_PEERS",
    value: "A:P,B:P,...",
    help: "The cluster, in priority order (first = highest). The same list\n" +
      "on every node; it must contain this node's --advertise address.\n" +
      "Default: a single node.",
  },
  {
    name: "advertise",
    env: "LOCKD_ADVERTISE",
    value: "HOST:PORT",
    help: "How clients and peers reach this node, as used in M replies.\n" +
      "Default: the listen address.",
  },
  {
    name: "data-dir",
    env: "LOCKD_DATA_DIR",
    value: "DIR",
    fallback: "./lockd-data",
    help: "Where the fencing-token high-water mark lives. One directory\n" +
      "per node.",
  },
  {
    name: "max-lease",
    env: "LOCKD_MAX_LEASE",
    value: "SECONDS",
    fallback: "86400",
    help: "Longest lease a client may ask for.",
  },
  {
    name: "max-connections",
    env: "LOCKD_MAX_CONNECTIONS",
    value: "N",
    fallback: "10000",
    help: "Connections served at once; the next one is answered\n" +
      "'- - E too many connections' and closed.",
  },
  {
    name: "bridge",
    env: "LOCKD_BRIDGE",
    value: "HOST:PORT",
    help: "Also serve the WebSocket bridge for browsers at this address.\n" +
      "Default: off.",
  },
  {
    name: "bridge-origins",
    env: "LOCKD_BRIDGE_ORIGINS",
    value: "ORIGIN,...",
    help: "Origins (https://app.example.com) whose pages may use the bridge.\n" +
      "Default: only pages served from the bridge's own host.",
  },
  {
    name: "auth-file",
    env: "LOCKD_AUTH_FILE",
    value: "FILE",
    help: "Require a credential on every client connection: one per line,\n" +
      "'<name> <secret or sha256:hex> <key prefix or *>'. Re-read when it\n" +
      "changes. Secrets are never taken from the command line.\n" +
      "Default: no authentication.",
  },
  {
    name: "session-grace",
    env: "LOCKD_SESSION_GRACE",
    value: "SECONDS",
    fallback: "5",
    help: "How long every connection of a session may be gone before its\n" +
      "session-bound locks are released.",
  },
  {
    name: "peer-secret-file",
    env: "LOCKD_PEER_SECRET_FILE",
    value: "FILE",
    help: "The cluster's shared secret (the file's first line): peers prove\n" +
      "they know it (HMAC over a nonce; it never crosses the wire), and\n" +
      "a peer that does not is refused. Default: peers not authenticated.",
  },
  {
    name: "tls-cert",
    env: "LOCKD_TLS_CERT",
    value: "FILE",
    help: "Serve TLS on the client and peer port (and wss:// on the bridge)\n" +
      "with this PEM certificate chain; needs --tls-key.",
  },
  {
    name: "tls-key",
    env: "LOCKD_TLS_KEY",
    value: "FILE",
    help: "The PEM private key of --tls-cert.",
  },
  {
    name: "tls-ca",
    env: "LOCKD_TLS_CA",
    value: "FILE",
    help: "PEM CA certificate(s) peers' certificates are verified with.\n" +
      "Default: the system's roots.",
  },
  {
    name: "bridge-token-file",
    env: "LOCKD_BRIDGE_TOKEN_FILE",
    value: "FILE",
    help: "Bearer tokens the bridge requires, one per line (sent as\n" +
      "'Authorization: Bearer <token>' or the WebSocket protocol\n" +
      "'bearer.<token>'). Default: none required.",
  },
  {
    name: "heartbeat",
    env: "LOCKD_HEARTBEAT",
    value: "SECONDS",
    fallback: "0.1",
    help: "Interval of heartbeats between peers.",
  },
  {
    name: "replication",
    env: "LOCKD_REPLICATION",
    value: "async|sync",
    fallback: "async",
    help: "How the active answers grants, releases and extends in a cluster:\n" +
      "async answers at once (a kill -9 of the active can lose a change its\n" +
      "standbys had not received); sync answers once an in-sync standby\n" +
      "acknowledged the change (with none in sync it answers at once and\n" +
      "logs that it is degraded).",
  },
  {
    name: "failover-timeout",
    env: "LOCKD_FAILOVER_TIMEOUT",
    value: "SECONDS",
    fallback: "1",
    help: "Silence after which a peer is taken for dead and a standby promotes.",
  },
  {
    name: "log-format",
    env: "LOCKD_LOG_FORMAT",
    value: "text|json",
    fallback: "text",
    help: "How log lines on standard error are written: text\n" +
      "('<time> <LEVEL> <message> key=value...') or json (one object\n" +
      "per line: time, level, msg and the event's fields).",
  },
  {
    name: "log-level",
    env: "LOCKD_LOG_LEVEL",
    value: "debug|info|warn|error",
    fallback: "info",
    help: "The least severe level logged. LOCKD_TRACE=1 (every peer message)\n" +
      "implies debug.",
  },
];

function optionsHelp(): string {
  return FLAGS.map((f) => {
    const head = `    --${f.name} ${f.value}`;
    const body =
      (f.help + (f.fallback ? `\n(default ${f.fallback})` : "") + `\nEnvironment: ${f.env}.`)
        .split("\n").map((line) => `            ${line}`).join("\n");
    return `${head}\n${body}`;
  }).join("\n\n");
}

/** The `--help` page, written like a man page. */
export const HELP: string = `NAME
    lockd - lock server with fencing tokens, FIFO queues, leases and failover

SYNOPSIS
    deno run -A server/main.ts [OPTIONS]
    lockd [OPTIONS]            (the binary built by 'deno task compile')

DESCRIPTION
    lockd hands out locks over TCP. A grant carries a fencing token: a 64-bit
    number greater than every token issued before, across restarts and failover.
    Waiters for a key are served first come, first served; a lease takes the
    lock back from a holder that dies; a wait limit bounds queueing.

    The protocol is one line of text per message:
        A <key> <lease> <wait>      acquire  ->  A <key> A <token> | A <key> T
        R <key> <token>             release  ->  R <key> R | R <key> N
        X <key> <token> <lease>     extend   ->  X <key> X | X <key> N
    lease and wait are decimal seconds (wait 0 = no limit). Any request may be
    answered 'M <host:port>' (ask the active node there) or 'E <message>'.
    A connection may open with a hello naming its client and session (and,
    with --auth-file, a credential):
        HELLO 1 <session> <name> [<credential> <secret>]  ->  HELLO <session> OK
    and then bind locks to its session: 'A <key> <lease> <wait> s'.

    When ready, lockd prints one line on standard output:
        listening on HOST:PORT as ROLE
    Everything else goes to standard error, one log line per event with
    its time (UTC), level, message and fields (see --log-format):
        2026-12-01T12:34:56.789Z INFO  shutting down (SIGTERM) event=...

OPTIONS
${optionsHelp()}

    --bridge-demo
            Serve the browser demo page at / and the client bundle at
            /client.js on the bridge. Environment: LOCKD_BRIDGE_DEMO=1.

    -h, --help
            Show this page and exit.

    -V, --version
            Print the version and exit.

    A flag wins over its environment variable.

SIGNALS
    SIGINT, SIGTERM, SIGHUP
            Graceful shutdown: stop accepting, answer queued acquires
            'E shutting down' (or hand over to the next node of a cluster),
            persist the token mark, exit 0 (within about two seconds).

EXIT STATUS
    0   stopped after SIGINT, SIGTERM or SIGHUP
    1   could not run: data directory unusable or corrupt, address in use,
        fencing tokens exhausted
    2   bad command line

FILES
    DIR/tokens    the fencing-token high-water mark (one decimal number)
    DIR/lock      held while lockd runs, so two nodes never share DIR
    --auth-file   credentials; re-read within a second of a change (a bad
                  new file is logged and the old credentials stay)
    --peer-secret-file, --tls-cert, --tls-key, --tls-ca, --bridge-token-file
                  read once at start; keep them readable by lockd only

EXAMPLES
    Start a node on the default port and take a lock with nc:
        deno run -A server/main.ts
        printf 'A orders:17 30 5\\n' | nc -N 127.0.0.1 7321

    Any free port, separate data directory:
        deno run -A server/main.ts --listen 127.0.0.1:0 --data-dir /tmp/lockd-a
`;

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
  const maxConnectionsText = get("max-connections")!;
  if (!/^[1-9][0-9]{0,8}$/.test(maxConnectionsText)) {
    throw new UsageError(
      `${
        source["max-connections"]
      } must be a whole number from 1 to 999999999, got "${maxConnectionsText}"`,
    );
  }
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
    maxConnections: Number(maxConnectionsText),
    bridge: bridgeText === undefined ? undefined : parseHostPort(bridgeText, source.bridge),
    bridgeOrigins: get("bridge-origins")?.split(",").map((o) => o.trim()).filter((o) => o !== ""),
    bridgeDemo: values["bridge-demo"] === true || env("LOCKD_BRIDGE_DEMO") === "1",
    heartbeatMs: positiveSeconds(get("heartbeat")!, source.heartbeat),
    failoverTimeoutMs: positiveSeconds(get("failover-timeout")!, source["failover-timeout"]),
    replication: replicationMode(get("replication")!, source.replication),
    authFile: get("auth-file"),
    sessionGraceMs: positiveSeconds(get("session-grace")!, source["session-grace"]),
    peerSecretFile: get("peer-secret-file"),
    tls: undefined,
    tlsCaFile: get("tls-ca"),
    bridgeTokenFile: get("bridge-token-file"),
    logFormat: oneOf(LOG_FORMATS, get("log-format")!, source["log-format"]),
    logLevel: oneOf(LOG_LEVELS, get("log-level")!, source["log-level"]),
  };
  const certFile = get("tls-cert");
  const keyFile = get("tls-key");
  if ((certFile === undefined) !== (keyFile === undefined)) {
    throw new UsageError("--tls-cert and --tls-key go together");
  }
  if (certFile !== undefined && keyFile !== undefined) config.tls = { certFile, keyFile };
  if (config.heartbeatMs >= config.failoverTimeoutMs) {
    throw new UsageError("--heartbeat must be shorter than --failover-timeout");
  }
  return config;
}
