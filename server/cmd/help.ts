/**
 * The `--help` pages of the `lockd` subcommands, written like man pages (the server's own
 * page is `HELP` in `server/cli.ts`), and the overview of `lockd help`. Pure text.
 *
 * @module
 */

const CONNECTION = `CONNECTION OPTIONS
    --servers A,B,...
            The lockd nodes: every node of a cluster, in any order. An
            address is host:port (port 7321 when left out), tcp://host:port,
            tls://host:port (TLS), or a bridge's ws:// or wss:// URL.
            Environment: LOCKD_SERVERS. Default 127.0.0.1:7321.

    --ca-file FILE
            PEM CA certificate(s) that tls:// addresses are verified with.
            Environment: LOCKD_CA_FILE. Default: the system's roots.

    --auth-name NAME
            The credential's name, for a server with --auth-file.
            Environment: LOCKD_AUTH_NAME.

    --auth-secret-file FILE
            The credential's secret, on the file's first line. The secret
            may also come from LOCKD_AUTH_SECRET (or the file's name from
            LOCKD_AUTH_SECRET_FILE); it is never taken from the command
            line, where ps would show it.

    --bearer-file FILE
            The bearer token a bridge requires (ws:// and wss:// servers),
            on the file's first line. The token may also come from
            LOCKD_BEARER (or the file's name from LOCKD_BEARER_FILE).

    --name NAME
            The client name whoever inspects a key sees as its holder.
            Default lockd-<command>@<hostname>:<pid>.

    -h, --help
            Show this page and exit.

    A flag wins over its environment variable; an empty variable counts as
    unset.`;

const COMMON_EXIT = `    64  bad usage (the message says what), or a request the server refused
        as invalid (a lease above its --max-lease)
    66  a file named by an option cannot be read
    69  no lockd node could be reached
    77  the credential was refused, or the key is outside its prefix`;

/** `lockd run --help`. */
export const RUN_HELP: string = `NAME
    lockd run - run a command while holding a lock

SYNOPSIS
    lockd run KEY [--lease S] [--wait S] [--kill-grace S] [CONNECTION OPTIONS]
              -- CMD [ARGS...]

DESCRIPTION
    Acquires KEY, then runs CMD with ARGS directly (no shell: arguments
    arrive exactly as given) in a process group of its own, with standard
    input, output and error inherited, LOCKD_AUTH_SECRET and LOCKD_BEARER
    taken out of its environment and two variables added:
        LOCKD_KEY     the key
        LOCKD_TOKEN   the fencing token of the grant (decimal)
    The lease is renewed at a third of its length while CMD runs. The lock
    is released the moment CMD exits, and lockd run exits with CMD's exit
    status (128+N if a signal N killed it).

    SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 received by lockd
    run are passed on to CMD's process group. While lockd run still waits
    for the lock, they end the wait (exit 128+N).

    If the lock is lost while CMD runs (an extend is answered N: the lease
    ran out or the grant was released by someone else; the lease is about
    to run out and no renewal proved it; every connection to lockd
    dropped), CMD's whole process group gets SIGTERM, then SIGKILL after
    --kill-grace seconds, and lockd run exits 70 once CMD is gone.

    The lock is bound to lockd run's session: if lockd run itself dies
    (kill -9), the server frees the key after its --session-grace (5 s by
    default), and a watchdog (lockd-run-watchdog, a small sh process) stops
    CMD's group the same way: SIGTERM, then SIGKILL after --kill-grace
    (not on Windows).

    lockd run writes nothing of its own on standard output, which belongs
    to CMD; its messages go to standard error, prefixed 'lockd run:'.

    The command starts after '--', or at the first argument after KEY that
    is not an option of lockd run.

OPTIONS
    --lease S
            The lease in seconds (decimal), renewed while CMD runs. Default
            30. A shorter lease notices a lost lock sooner.

    --wait S
            Longest time to wait for the lock, in seconds. Default 0: no
            limit.

    --kill-grace S
            Seconds between SIGTERM and SIGKILL after a lost lock. Default 5.

${CONNECTION}

EXIT STATUS
    N   CMD's own exit status (128+N when signal N killed it)
${COMMON_EXIT}
    70  the lock was lost while CMD ran (CMD was stopped)
    75  the wait ran out: someone else held the lock
    126 CMD cannot be executed
    127 CMD was not found

EXAMPLES
    Run a nightly job on one machine of many, waiting at most a minute:
        lockd run nightly-report --wait 60 -- /usr/local/bin/report --all

    Pass the fencing token on to what the job writes:
        lockd run orders:17 -- sh -c 'psql -v token="$LOCKD_TOKEN" -f job.sql'
`;

/** `lockd acquire --help`. */
export const ACQUIRE_HELP: string = `NAME
    lockd acquire - take a lock and keep it after exiting

SYNOPSIS
    lockd acquire KEY [--lease S] [--wait S] [CONNECTION OPTIONS]

DESCRIPTION
    Acquires KEY, prints the fencing token (decimal) on standard output and
    exits 0, leaving the lock held: it stays held until 'lockd release KEY
    TOKEN' or the end of its lease (renew it with 'lockd extend'). It is not
    bound to a session, so it outlives this process. It needs lockd's own
    addresses: a bridge (ws://, wss://) is refused, since it releases a lock
    when the connection that took it closes.

OPTIONS
    --lease S
            The lease in seconds (decimal). Default 30.

    --wait S
            Longest time to wait, in seconds. Default 0: no limit.

${CONNECTION}

EXIT STATUS
    0   acquired; the token is on standard output
${COMMON_EXIT}
    75  the wait ran out: someone else held the lock

EXAMPLES
    token=$(lockd acquire deploy --lease 600 --wait 10) || exit
    ./deploy.sh --fencing-token "$token"
    lockd release deploy "$token"
`;

/** `lockd release --help`. */
export const RELEASE_HELP: string = `NAME
    lockd release - release a lock by its token

SYNOPSIS
    lockd release KEY TOKEN [CONNECTION OPTIONS]

DESCRIPTION
    Releases the grant of KEY that carries TOKEN, whoever took it. The
    release is retried for 5 seconds if no node can be reached. A bridge
    address (ws://, wss://) is refused: it relays only its own grants.

${CONNECTION}

EXIT STATUS
    0   released
    1   that token does not hold KEY (released already, or its lease ran out)
${COMMON_EXIT}

EXAMPLES
    lockd release deploy 1042
`;

/** `lockd extend --help`. */
export const EXTEND_HELP: string = `NAME
    lockd extend - renew a lock's lease by its token

SYNOPSIS
    lockd extend KEY TOKEN S [CONNECTION OPTIONS]

DESCRIPTION
    Resets the lease of the grant of KEY that carries TOKEN to S seconds
    (decimal) from now. A bridge address (ws://, wss://) is refused: it
    relays only its own grants.

${CONNECTION}

EXIT STATUS
    0   extended
    1   that token does not hold KEY (the lock is lost: stop using it)
${COMMON_EXIT}

EXAMPLES
    lockd extend deploy 1042 600 || echo "lost the deploy lock" >&2
`;

/** `lockd status --help`. */
export const STATUS_HELP: string = `NAME
    lockd status - every node's role, sync state and counts

SYNOPSIS
    lockd status [--json] [CONNECTION OPTIONS]

DESCRIPTION
    Asks each address of --servers for its own status (standbys answer for
    themselves) and prints one row per node:
        NODE     the address asked
        ROLE     active, standby, starting, handing-off or leaving
                 (unreachable or refused when it did not answer)
        ACTIVE   the active node it follows (itself when active)
        SYNC     on the active: the replication mode and how many standbys
                 are in sync; on a standby: in sync or catching up
        LAG      a standby's replication lag, as its active reports it
        CONNS    client connections open
        HOLDERS  keys held
        WAITERS  acquires queued
        MARK     the fencing-token mark reserved on disk
    Why a node did not answer is written on standard error.

OPTIONS
    --json  Print the array of { address, status } or { address, error }
            objects instead (the status as docs/protocol.md, "Inspection",
            describes it).

${CONNECTION}

EXIT STATUS
    0   every node answered, and at most one is active
    1   some node did not answer (the others are printed), or more than
        one is active (a split brain, named on standard error)
    64  bad usage (the message says what)
    66  a file named by an option cannot be read
    69  no node answered
    77  every node refused the credential

EXAMPLES
    lockd status --servers 10.0.0.1:7321,10.0.0.2:7321,10.0.0.3:7321
    lockd status --json | jq -r '.[].status.role'
`;

/** `lockd locks --help`. */
export const LOCKS_HELP: string = `NAME
    lockd locks - who holds what

SYNOPSIS
    lockd locks [--prefix P] [--limit N] [--json] [CONNECTION OPTIONS]

DESCRIPTION
    Lists the held keys, in key order, as the active node sees them: KEY,
    TOKEN, HOLDER (the holder's client name, - if it gave none), LEASE LEFT
    and WAITERS (acquires queued behind the holder).

OPTIONS
    --prefix P
            Only keys that start with P. With a credential, only keys
            under its prefix are listed anyway.

    --limit N
            List at most N keys. Default 1000.

    --json  Print an array of { key, token, holder, leaseLeftSeconds,
            waiters } objects instead (token as a decimal string, holder
            null when it gave no name).

${CONNECTION}

EXIT STATUS
    0   listed (possibly nothing)
${COMMON_EXIT}

EXAMPLES
    lockd locks --prefix billing:
    lockd locks --json | jq -r '.[].key'
`;

/** `lockd help`: the commands. */
export const OVERVIEW: string = `NAME
    lockd - lock server with fencing tokens, and its command-line tools

SYNOPSIS
    lockd [serve] [SERVER OPTIONS]
    lockd COMMAND [OPTIONS]
    lockd help [COMMAND]

COMMANDS
    serve       the lock server (the default when the first argument is a
                flag or there is none); 'lockd --help' shows its options
    run         run a command while holding a lock
    acquire     take a lock and print its token, leaving it held
    release     release a lock by its key and token
    extend      renew a lock's lease by its key and token
    status      every node's role, active, sync state, lag and counts
    locks       who holds what

    'lockd COMMAND --help' shows a command's options and exit statuses.

    Exit status 64 means bad usage of a command; an unknown command, like
    any bad server command line, exits 2.
`;

/** Every subcommand's help page by its name. */
export const HELP_PAGES: Record<string, string> = {
  run: RUN_HELP,
  acquire: ACQUIRE_HELP,
  release: RELEASE_HELP,
  extend: EXTEND_HELP,
  status: STATUS_HELP,
  locks: LOCKS_HELP,
};
