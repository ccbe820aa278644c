/**
 * Every valued flag of the server (docs/server.md, "Options"): its `LOCKD_*` variable, its
 * default and its help text, and the `--help` page made from them. Pure data; `cli.ts`
 * parses and validates.
 *
 * @module
 */

/**
 * The transport of the plain-TCP port (`--io`, docs/server.md "The epoll transport"). `auto`:
 * the epoll transport for a single node without TLS or a bridge, on Linux, listening on an
 * IPv4 address, with FFI allowed; the runtime's sockets otherwise. `epoll`: that transport or
 * a start error. `portable`: the runtime's sockets.
 */
export type IoMode = "auto" | "epoll" | "portable";

/** The values of `--io`. */
export const IO_MODES: readonly IoMode[] = ["auto", "epoll", "portable"];

/**
 * The flag that rules out the epoll transport for a node, if any: its loop would starve the
 * runtime's own connections (TLS, peer links, the bridge's relay) while the port is busy
 * (docs/server.md, "The epoll transport"). `--io epoll` with it is refused; `auto` then
 * keeps the runtime's sockets.
 */
export function epollRuledOutBy(
  node: { tls: boolean; peers: boolean; bridge: boolean },
): string | undefined {
  return node.tls ? "--tls-cert" : node.peers ? "--peers" : node.bridge ? "--bridge" : undefined;
}

/** The transport `io` comes to for a node with `ruledOutBy` (see {@linkcode epollRuledOutBy}). */
export function effectiveIo(io: IoMode, ruledOutBy: string | undefined): IoMode {
  return io === "auto" && ruledOutBy !== undefined ? "portable" : io;
}

/** One valued flag: `--<name> <value>`, or its variable `env`. */
export interface Flag {
  /** The flag without its dashes. */
  name: string;
  /** Its environment variable. */
  env: string;
  /** What its value looks like in --help. */
  value: string;
  /** Its default, as text; none: unset. */
  fallback?: string;
  /** Its text in --help. */
  help: string;
}

/** Every valued flag, its environment variable and default. */
export const FLAGS: readonly Flag[] = [
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
    help: "The cluster, in priority order (first = highest), at most 16\n" +
      "nodes. The same list on every node; it must contain this node's\n" +
      "--advertise address. Default: a single node.",
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
    name: "max-waiters",
    env: "LOCKD_MAX_WAITERS",
    value: "N",
    fallback: "1000000",
    help: "Acquires queued at once across all connections (each about\n" +
      "750 bytes); the next is answered 'E too many queued acquires\n" +
      "on this server'. One connection may queue at most 100000.",
  },
  {
    name: "bridge",
    env: "LOCKD_BRIDGE",
    value: "HOST:PORT",
    help: "Also serve the WebSocket bridge for browsers at this address.\n" +
      "Default: off.",
  },
  {
    name: "http",
    env: "LOCKD_HTTP",
    value: "HOST:PORT",
    help: "Serve /healthz, /readyz, /metrics, /status, /locks and a status\n" +
      "page at / over HTTP (HTTPS with TLS). The same HOST:PORT as\n" +
      "--bridge shares its listener. Default: off.",
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
    name: "io",
    env: "LOCKD_IO",
    value: "auto|epoll|portable",
    fallback: "auto",
    help: "The transport of the plain-TCP port: epoll serves every ready\n" +
      "socket per wake through FFI (Linux, IPv4 --listen, FFI allowed);\n" +
      "portable uses the runtime's sockets. auto picks epoll for a single\n" +
      "node without TLS or --bridge where it can run, portable otherwise.",
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
    deno run -A server/main.ts [serve] [OPTIONS]
    lockd [serve] [OPTIONS]    (the binary built by 'deno task compile')
    lockd COMMAND ...          (run, acquire, release, extend, status, locks)

COMMANDS
    serve        the server (this page; also with no command, or a flag first)
    run KEY -- CMD [ARGS...]
                 run CMD under a lock, released when it exits
    acquire KEY  take a lock and print its token
    release KEY TOKEN, extend KEY TOKEN SECONDS
                 the other halves, for scripts
    status       every node's role, sync state and counts
    locks        who holds what
    'lockd help COMMAND' or 'lockd COMMAND --help' describes each one
    (docs/cli.md).

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
    (with ', bridge on ws://HOST:PORT/' and ', http on http://HOST:PORT/'
    appended when --bridge and --http are on; wss:// and https:// with TLS).
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
    --auth-file   credentials; checked every second and re-read 1 to 2 s
                  after a change (a bad new file is logged and the old
                  credentials stay)
    --peer-secret-file, --tls-cert, --tls-key, --tls-ca, --bridge-token-file
                  read once at start; keep them readable by lockd only

EXAMPLES
    Start a node on the default port and take a lock with nc:
        deno run -A server/main.ts
        printf 'A orders:17 30 5\\n' | nc -N 127.0.0.1 7321

    Any free port, separate data directory:
        deno run -A server/main.ts --listen 127.0.0.1:0 --data-dir /tmp/lockd-a

    Health checks, Prometheus metrics and the status page on port 9321:
        deno run -A server/main.ts --http 127.0.0.1:9321
        curl -fsS http://127.0.0.1:9321/readyz
`;
