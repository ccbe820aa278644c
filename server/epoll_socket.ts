/**
 * Socket setup for the epoll transport (`server/epoll.ts`): a non-blocking listening socket,
 * accepting one connection from it, and errors named as the runtime names them.
 *
 * @module
 */

import {
  AF_INET,
  EADDRINUSE,
  EAGAIN,
  EINTR,
  IPPROTO_TCP,
  type LibcHandle,
  parseIPv4,
  readSockaddrIn,
  SO_REUSEADDR,
  SOCK_CLOEXEC,
  SOCK_NONBLOCK,
  SOCK_STREAM,
  sockaddrIn,
  SOL_SOCKET,
  TCP_NODELAY,
} from "./epoll_libc.ts";

/** The `errno` names the server's accept loop and logs look at (Linux numbers). */
const ERRNO_NAMES: Readonly<Record<number, string>> = {
  1: "EPERM",
  4: "EINTR",
  11: "EAGAIN",
  12: "ENOMEM",
  13: "EACCES",
  22: "EINVAL",
  23: "ENFILE",
  24: "EMFILE",
  28: "ENOSPC",
  32: "EPIPE",
  64: "ENONET",
  71: "EPROTO",
  92: "ENOPROTOOPT",
  95: "EOPNOTSUPP",
  98: "EADDRINUSE",
  99: "EADDRNOTAVAIL",
  100: "ENETDOWN",
  101: "ENETUNREACH",
  103: "ECONNABORTED",
  104: "ECONNRESET",
  105: "ENOBUFS",
  107: "ENOTCONN",
  110: "ETIMEDOUT",
  112: "EHOSTDOWN",
  113: "EHOSTUNREACH",
};

/**
 * An error for a failed call, with the `code` (`ECONNRESET`...) and, where the runtime has
 * one, the class of its own errors (`Deno.errors.ConnectionReset`...).
 */
export function errnoError(call: string, errno: number): Error {
  const code = ERRNO_NAMES[errno] ?? `errno ${errno}`;
  const message = `${call} failed: ${code}`;
  const error = errno === 104
    ? new Deno.errors.ConnectionReset(message)
    : errno === 32
    ? new Deno.errors.BrokenPipe(message)
    : errno === EADDRINUSE
    ? new Deno.errors.AddrInUse(message)
    : errno === 99
    ? new Deno.errors.AddrNotAvailable(message)
    : errno === 13 || errno === 1
    ? new Deno.errors.PermissionDenied(message)
    : new Error(message);
  (error as Error & { code: string }).code = code;
  return error;
}

const ONE = new Int32Array([1]);

/**
 * A non-blocking socket listening on `hostname` (an IPv4 literal) and `port`, with
 * `SO_REUSEADDR` as the runtime's listeners have it.
 *
 * @throws {Deno.errors.AddrInUse} The address is taken.
 * @throws {TypeError} `hostname` is not an IPv4 literal.
 */
export function listenSocket(
  libc: LibcHandle,
  hostname: string,
  port: number,
): { fd: number; addr: Deno.NetAddr } {
  const bytes = parseIPv4(hostname);
  if (bytes === null) throw new TypeError(`not an IPv4 address: ${hostname}`);
  const { fn, errno } = libc;
  const fd = fn.socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) throw errnoError("socket", errno());
  const fail = (call: string) => {
    const error = errnoError(call, errno());
    fn.close(fd);
    return error;
  };
  if (fn.setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, ONE, 4) < 0) throw fail("setsockopt");
  if (fn.bind(fd, sockaddrIn(bytes, port), 16) < 0) throw fail("bind");
  if (fn.listen(fd, 1024) < 0) throw fail("listen");
  const sa = new Uint8Array(16);
  if (fn.getsockname(fd, sa, new Uint32Array([16])) < 0) throw fail("getsockname");
  return { fd, addr: readSockaddrIn(sa) };
}

const acceptAddr = new Uint8Array(16);
const acceptLength = new Uint32Array(1);

/**
 * Accepts one connection from the listening socket `fd`, non-blocking with Nagle's
 * algorithm off; `undefined` when none is waiting, an error when the accept failed (its
 * `code` tells whether only that connection failed).
 */
export function acceptSocket(
  libc: LibcHandle,
  fd: number,
): { fd: number; remote: Deno.NetAddr } | Error | undefined {
  const { fn, errno } = libc;
  for (;;) {
    acceptLength[0] = 16;
    const conn = fn.accept4(fd, acceptAddr, acceptLength, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (conn >= 0) {
      fn.setsockopt(conn, IPPROTO_TCP, TCP_NODELAY, ONE, 4);
      return { fd: conn, remote: readSockaddrIn(acceptAddr) };
    }
    const code = errno();
    if (code === EINTR) continue;
    if (code === EAGAIN) return undefined;
    return errnoError("accept", code);
  }
}
