/**
 * lockd's command line (docs/server.md): `deno run -A server/main.ts [options]`, or the binary
 * built by `deno task compile`. Prints one ready line on stdout, everything else on stderr;
 * exits 0 after SIGINT/SIGTERM/SIGHUP, 1 when it cannot run, 2 on a bad command line.
 * A subcommand first (`lockd run`, `status`, ...: docs/cli.md) runs that instead.
 *
 * @module
 */

import denoJson from "../deno.json" with { type: "json" };
import { formatHostPort, HELP, parseConfig, UsageError } from "./cli.ts";
import { effectiveIo, epollRuledOutBy } from "./flags.ts";
import { stderrLogger } from "./log.ts";
import { loadSecurity, type Security } from "./security.ts";
import { LockServer } from "./server.ts";
import { SIGUSR1_WARNING } from "./sigusr1.ts";
import { lockd } from "./cmd/lockd.ts";
import type { BridgeServer } from "../client/bridge.ts";
import { type HttpServer, listenFailure, serveBridgeOn, startHttp } from "./http.ts";
import { TOKEN_LANES } from "./token_lanes.ts";
import clientScript from "./assets/lockd-client.js" with { type: "text" };
import demoPage from "./assets/demo.html" with { type: "text" };

/** Runs lockd with `args`; resolves with the exit code. */
export async function main(args: string[]): Promise<number> {
  let config;
  try {
    config = parseConfig(args, (name) => Deno.env.get(name));
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    console.error(
      `lockd: ${error.message}\nTry 'deno run -A server/main.ts --help' for the options.`,
    );
    return 2;
  }
  if (config.help) {
    console.log(HELP);
    return 0;
  }
  if (config.version) {
    console.log(`lockd ${denoJson.version}`);
    return 0;
  }
  const peers = config.peers.map((target) => ({ address: formatHostPort(target), target }));
  const self = formatHostPort(config.advertise ?? config.listen);
  if (peers.length > 0) {
    const twice = peers.find((p, i) => peers.findIndex((q) => q.address === p.address) !== i);
    // 0.0.0.0 (also spelled 0) and :: are where to listen, not addresses to dial or to
    // redirect clients to.
    const unspecified = peers.find((p) => /^[0.]+$|^[0:]*::?[0:]*$/.test(p.target.hostname));
    const problem = peers.length > TOKEN_LANES
      ? `--peers lists ${peers.length} nodes, at most ${TOKEN_LANES} are supported`
      : twice !== undefined
      ? `--peers lists ${twice.address} twice`
      : unspecified !== undefined
      ? `--peers lists ${unspecified.address}, which no node can dial: list each node's ` +
        "reachable address (with --listen 0.0.0.0, give --advertise)"
      : !peers.some((p) => p.address === self)
      ? `--peers must contain this node's address ${self} (set --advertise to how peers reach it)`
      : undefined;
    if (problem !== undefined) {
      console.error(`lockd: ${problem}\nTry 'deno run -A server/main.ts --help' for the options.`);
      return 2;
    }
  }
  // Debug tracing of the peer protocol, for tests and diagnosis: its lines are debug lines.
  const trace = Deno.env.get("LOCKD_TRACE") === "1";
  const log = stderrLogger({ format: config.logFormat, level: trace ? "debug" : config.logLevel });
  let security: Security;
  try {
    security = loadSecurity(config, log);
  } catch (error) {
    log.error(error instanceof Error ? error.message : String(error), { event: "fatal" });
    return 1;
  }
  if (peers.length > 1 && security.credentials !== undefined && security.peerSecret === undefined) {
    log.warn(
      "--auth-file without --peer-secret-file: clients need a credential, but anything that " +
        "reaches this port can open a peer link and send this node cluster state; give every " +
        'node --peer-secret-file (docs/security.md, "Peers")',
      { event: "peers-open" },
    );
  }
  let server: LockServer;
  try {
    server = await LockServer.start({
      hostname: config.listen.hostname,
      port: config.listen.port,
      dataDir: config.dataDir,
      maxLeaseMs: config.maxLeaseMs,
      maxConnections: config.maxConnections,
      maxWaiters: config.maxWaiters,
      cluster: peers.length === 0 ? undefined : {
        self,
        peers,
        heartbeatMs: config.heartbeatMs,
        failoverTimeoutMs: config.failoverTimeoutMs,
        replication: config.replication,
        peerSecret: security.peerSecret,
        trace,
        traceHeartbeats: trace && Deno.env.get("LOCKD_TRACE_HB") === "1",
      },
      log,
      credentials: security.credentials,
      sessionGraceMs: config.sessionGraceMs,
      tls: security.tls,
      // The bridge relays over a connection of the runtime's (the server sees to TLS, peers).
      io: effectiveIo(
        config.io,
        epollRuledOutBy({ tls: false, peers: false, bridge: config.bridge !== undefined }),
      ),
      onRole: (role, why) => log.info(`${self} is ${role} (${why})`, { event: "role", role }),
    });
  } catch (error) {
    log.error(
      error instanceof Deno.errors.AddrInUse
        ? `${formatHostPort(config.listen)} is already in use; choose another --listen`
        : error instanceof Error
        ? error.message
        : String(error),
      { event: "fatal" },
    );
    security.close();
    return 1;
  }
  // Ctrl+C reaches every process of the group (npx, deno task, this one), and wrappers
  // forward it too: repeated signals while stopping are the same request, not an escalation.
  let stopping = false;
  let bridge: BridgeServer | undefined;
  const onSignal = async (signal: Deno.Signal) => {
    if (stopping) return;
    stopping = true;
    log.info(`shutting down (${signal})`, { event: "shutdown", signal });
    // The bridge first, while this node can still take its sessions' releases.
    await bridge?.shutdown();
    await server.shutdown();
  };
  // SIGHUP (the terminal went away, or a supervisor's reload) stops gracefully too: left to
  // its default it would kill the node without saving the token mark or handing over.
  const names: Deno.Signal[] = Deno.build.os === "windows"
    ? ["SIGINT"]
    : ["SIGINT", "SIGTERM", "SIGHUP"];
  const handlers: (readonly [Deno.Signal, () => void])[] = names.map((name) =>
    [name, () => onSignal(name)] as const
  );
  if (Deno.build.os !== "windows") {
    handlers.push([
      "SIGUSR1",
      () => log.error(`${SIGUSR1_WARNING}: restart this node`, { event: "sigusr1" }),
    ]);
  }
  for (const [name, handler] of handlers) Deno.addSignalListener(name, handler);
  const { hostname, port } = server.addr;
  // --http (server/http.ts): health, readiness, metrics, status and the status page; a
  // bridge at the same address shares its listener.
  let http: HttpServer | undefined;
  try {
    http = startHttp(config, server, { security, log });
  } catch (error) {
    log.error(error instanceof Error ? error.message : String(error), { event: "fatal" });
    await server.shutdown();
    return 1;
  }
  if (config.bridge !== undefined) {
    if (security.tls !== undefined && config.tlsCaFile === undefined) {
      log.warn(
        "the bridge reaches this node over TLS and checks its certificate against the " +
          "system's roots: if a private CA signed it, give --tls-ca, or the bridge answers " +
          '"no active node"',
        { event: "bridge" },
      );
    }
    // The bridge relays through a client of this node (of the whole cluster, so that it
    // follows the active node).
    const local = formatHostPort({
      hostname: hostname === "0.0.0.0" ? "127.0.0.1" : hostname === "::" ? "::1" : hostname,
      port,
    });
    try {
      const tcp = security.tls === undefined ? "" : "tls://";
      bridge = serveBridgeOn(http, {
        servers: peers.length > 0 ? peers.map((p) => tcp + p.address) : [tcp + local],
        hostname: config.bridge.hostname,
        port: config.bridge.port,
        allowedOrigins: config.bridgeOrigins,
        authorize: security.bridgeAuthorize,
        clientOptions: {
          auth: security.bridgeCredential,
          caCerts: security.tls?.caCerts,
        },
        tls: security.tls === undefined
          ? undefined
          : { cert: security.tls.cert, key: security.tls.key },
        clientScript: config.bridgeDemo ? clientScript : undefined,
        page: config.bridgeDemo ? demoPage : undefined,
        // Into the node's log, with its timestamps and fields.
        onError: (message) => log.warn(message, { event: "bridge" }),
      });
    } catch (error) {
      const why = listenFailure(error, "--bridge");
      log.error(`cannot serve the bridge on ${formatHostPort(config.bridge)}: ${why}`, {
        event: "fatal",
      });
      await http?.shutdown();
      await server.shutdown();
      return 1;
    }
  }
  const role = await Promise.race([server.ready, server.finished.then(() => undefined)]);
  if (role !== undefined) {
    const ws = security.tls === undefined ? "ws" : "wss";
    const web = bridge === undefined ? "" : `, bridge on ${ws}://${formatHostPort(bridge.addr)}/`;
    const api = http === undefined ? "" : `, http on ${http.url}`;
    console.log(`listening on ${formatHostPort({ hostname, port })} as ${role}${web}${api}`);
  }
  const code = await server.finished;
  await bridge?.shutdown(); // After a fatal stop: the bridge has nothing left to relay to.
  await http?.shutdown(); // Last: /healthz and /readyz answer while the node stops.
  security.close();
  for (const [name, handler] of handlers) Deno.removeSignalListener(name, handler);
  return code;
}

if (import.meta.main) {
  let code: number;
  try {
    code = await lockd(Deno.args, main); // a subcommand, or the server (docs/cli.md)
  } catch (error) {
    // e.g. stdout closed or full while printing --help: say so, without a stack trace.
    stderrLogger().error(error instanceof Error ? error.message : String(error));
    code = 1;
  }
  Deno.exit(code);
}
