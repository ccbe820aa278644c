/**
 * Which transport serves a node's plain-TCP port (docs/server.md, "The epoll transport"):
 * the runtime's sockets, or the epoll transport (`server/epoll.ts`) where it can run.
 *
 * @module
 */

import type { Listener } from "./accept.ts";
import { EpollListener } from "./epoll.ts";
import { openLibc, parseIPv4 } from "./epoll_libc.ts";
import type { IoMode } from "./flags.ts";

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
