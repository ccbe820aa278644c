/**
 * Which transport serves a node's plain-TCP port (docs/server.md, "The epoll transport"):
 * the runtime's sockets, or the epoll transport (`server/epoll.ts`) where it can run.
 *
 * @module
 */

import type { Listener } from "./accept.ts";
import { EpollListener } from "./epoll.ts";
import { openLibc, parseIPv4 } from "./epoll_libc.ts";
import { effectiveIo, epollRuledOutBy, type IoMode } from "./flags.ts";
import type { Logger } from "./log.ts";
import type { LockServerOptions } from "./server_options.ts";

/** What serves a node's port: see `LockServer.transport`. */
export type Transport = "epoll" | "portable" | "tls";

const TRANSPORT_NAMES: Readonly<Record<Transport, string>> = {
  epoll: "epoll by FFI",
  portable: "the runtime's sockets",
  tls: "TLS on the runtime's sockets",
};

// The C library is opened when this module loads, once per process, and stays open: the
// process keeps using it as long as it serves. (Opened by the first server instead, it would
// also count as a leak in whichever test started that server.)
openLibc();

/** Why the epoll transport cannot serve `hostname` here; `undefined` when it can. */
export function epollUnavailable(hostname: string): string | undefined {
  if (parseIPv4(hostname) === null) return `it listens on IPv4 addresses only, not ${hostname}`;
  if (openLibc() === null) {
    return "it needs Linux on x86-64 or arm64, libc.so.6 and the FFI permission (--allow-ffi)";
  }
  return undefined;
}

/**
 * Listens on `hostname:port` (plain TCP) with the transport `io` picks (`auto`: epoll where
 * it can run; the caller has already turned `auto` to `portable` where a flag rules epoll
 * out, see `epollRuledOutBy` in flags.ts).
 *
 * @throws {Deno.errors.AddrInUse} The address is taken.
 * @throws {Error} `io` is `epoll` and that transport cannot run here (the message says why).
 */
export function listenTcp(
  hostname: string,
  port: number,
  io: IoMode,
): { listener: Listener; transport: "epoll" | "portable" } {
  if (io !== "portable") {
    const why = epollUnavailable(hostname);
    if (why === undefined) {
      return { listener: new EpollListener(openLibc()!, hostname, port), transport: "epoll" };
    }
    if (io === "epoll") throw new Error(`--io epoll cannot run here: ${why}`);
  }
  return { listener: Deno.listen({ hostname, port }), transport: "portable" };
}

/**
 * Opens a node's client and peer port as `options` say (TLS, or plain TCP on the transport
 * `options.io` and the cluster allow), and logs which transport serves it.
 *
 * @throws {Deno.errors.AddrInUse} The address is taken.
 * @throws {Error} `io` is `epoll` and TLS, a cluster or the host rules it out.
 */
export function openPort(
  options: LockServerOptions,
  log: Logger,
): { listener: Listener; transport: Transport } {
  const hostname = options.hostname ?? "127.0.0.1";
  const port = options.port ?? 7321;
  const tls = options.tls;
  const ruledOutBy = epollRuledOutBy({
    tls: tls !== undefined,
    peers: options.cluster !== undefined,
    bridge: false,
  });
  const io = effectiveIo(options.io ?? "auto", ruledOutBy);
  if (io === "epoll" && ruledOutBy !== undefined) {
    throw new Error("--io epoll cannot run here: it serves a single node's plain TCP only");
  }
  const opened = tls === undefined ? listenTcp(hostname, port, io) : {
    listener: Deno.listenTls({ hostname, port, cert: tls.cert, key: tls.key }),
    transport: "tls" as const,
  };
  log.info(`the port is served through ${TRANSPORT_NAMES[opened.transport]}`, {
    event: "transport",
    transport: opened.transport,
  });
  return opened;
}
