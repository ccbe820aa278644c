/**
 * The C library calls of the epoll transport (`server/epoll.ts`), by FFI, Linux on x86-64
 * and arm64 only, and the byte layouts they take (`sockaddr_in`, `epoll_event`). Nothing here
 * keeps state but the opened library.
 *
 * @module
 */

const SYMBOLS = {
  socket: { parameters: ["i32", "i32", "i32"], result: "i32" },
  setsockopt: { parameters: ["i32", "i32", "i32", "buffer", "u32"], result: "i32" },
  bind: { parameters: ["i32", "buffer", "u32"], result: "i32" },
  listen: { parameters: ["i32", "i32"], result: "i32" },
  getsockname: { parameters: ["i32", "buffer", "buffer"], result: "i32" },
  accept4: { parameters: ["i32", "buffer", "buffer", "i32"], result: "i32" },
  epoll_create1: { parameters: ["i32"], result: "i32" },
  epoll_ctl: { parameters: ["i32", "i32", "i32", "buffer"], result: "i32" },
  /** A poll of the ready sockets on the runtime's thread (timeout 0, or a short block). */
  epoll_wait: { parameters: ["i32", "buffer", "i32", "i32"], result: "i32" },
  /** The same wait on a thread of the runtime's pool, while the runtime's loop runs. */
  epoll_wait_idle: {
    name: "epoll_wait",
    parameters: ["i32", "buffer", "i32", "i32"],
    result: "i32",
    nonblocking: true,
  },
  eventfd: { parameters: ["u32", "i32"], result: "i32" },
  /** A short sleep on a thread of the runtime's pool: the runtime's loop waits meanwhile. */
  usleep_idle: { name: "usleep", parameters: ["u32"], result: "i32", nonblocking: true },
  recv: { parameters: ["i32", "buffer", "u32", "i32"], result: "i32" },
  send: { parameters: ["i32", "buffer", "u32", "i32"], result: "i32" },
  write: { parameters: ["i32", "buffer", "u32"], result: "i32" },
  close: { parameters: ["i32"], result: "i32" },
  __errno_location: { parameters: [], result: "pointer" },
} as const;

/** The opened C library's functions. */
export type Libc = Deno.DynamicLibrary<typeof SYMBOLS>["symbols"];

export const AF_INET = 2;
export const SOCK_STREAM = 1;
export const SOCK_NONBLOCK = 0o4000;
export const SOCK_CLOEXEC = 0o2000000;
export const SOL_SOCKET = 1;
export const SO_REUSEADDR = 2;
export const IPPROTO_TCP = 6;
export const TCP_NODELAY = 1;
export const EPOLLIN = 0x1;
export const EPOLLOUT = 0x4;
export const EPOLLERR = 0x8;
export const EPOLLHUP = 0x10;
export const EPOLLRDHUP = 0x2000;
export const EPOLLET = 0x80000000;
export const EPOLL_CTL_ADD = 1;
export const EPOLL_CLOEXEC = 0o2000000;
export const EFD_NONBLOCK = 0o4000;
export const EFD_CLOEXEC = 0o2000000;
export const MSG_NOSIGNAL = 0x4000;
export const EINTR = 4;
export const EAGAIN = 11;
export const EADDRINUSE = 98;
export const EADDRNOTAVAIL = 99;
export const EACCES = 13;
/** The size of one `struct epoll_event` (packed on x86-64, padded to 16 bytes on arm64). */
export const EVENT_BYTES = Deno.build.arch === "x86_64" ? 12 : 16;
const DATA_OFFSET = Deno.build.arch === "x86_64" ? 4 : 8;

/** The C library and the calling thread's `errno`. */
export interface LibcHandle {
  /** The functions. */
  fn: Libc;
  /** `errno` of the runtime's thread, right after a synchronous call that failed. */
  errno(): number;
}

let opened: LibcHandle | null | undefined;

/**
 * Opens the C library once; `null` where the epoll transport cannot run (not Linux on x86-64
 * or arm64, no FFI permission, no `libc.so.6`).
 */
export function openLibc(): LibcHandle | null {
  if (opened !== undefined) return opened;
  opened = null;
  if (Deno.build.os !== "linux") return null;
  if (Deno.build.arch !== "x86_64" && Deno.build.arch !== "aarch64") return null;
  try {
    if (Deno.permissions.querySync({ name: "ffi" }).state !== "granted") return null;
    const fn = Deno.dlopen("libc.so.6", SYMBOLS).symbols;
    // errno is per thread; the synchronous calls all run on the runtime's one thread.
    const view = new Deno.UnsafePointerView(fn.__errno_location()!);
    opened = { fn, errno: () => view.getInt32() };
  } catch {
    opened = null;
  }
  return opened;
}

/** The four bytes of an IPv4 literal (`a.b.c.d`), or `null` for anything else. */
export function parseIPv4(host: string): number[] | null {
  const parts = host.split(".");
  if (parts.length !== 4) return null;
  const bytes: number[] = [];
  for (const part of parts) {
    if (!/^(0|[1-9][0-9]{0,2})$/.test(part)) return null;
    const n = Number(part);
    if (n > 255) return null;
    bytes.push(n);
  }
  return bytes;
}

/** A `struct sockaddr_in` for `bytes` and `port`. */
export function sockaddrIn(bytes: readonly number[], port: number): Uint8Array {
  const sa = new Uint8Array(16);
  const view = new DataView(sa.buffer);
  view.setUint16(0, AF_INET, true);
  view.setUint16(2, port, false);
  sa.set(bytes, 4);
  return sa;
}

/** The address in a `struct sockaddr_in`. */
export function readSockaddrIn(sa: Uint8Array): Deno.NetAddr {
  const view = new DataView(sa.buffer, sa.byteOffset, sa.byteLength);
  return {
    transport: "tcp",
    hostname: `${sa[4]}.${sa[5]}.${sa[6]}.${sa[7]}`,
    port: view.getUint16(2, false),
  };
}

/** Writes one `struct epoll_event` (`events`, `data` as a 32-bit id) at `index` of `buf`. */
export function writeEvent(view: DataView, index: number, events: number, data: number): void {
  const at = index * EVENT_BYTES;
  view.setUint32(at, events >>> 0, true);
  view.setUint32(at + DATA_OFFSET, data, true);
  view.setUint32(at + DATA_OFFSET + 4, 0, true);
}

/** The `events` mask of the event at `index`. */
export function eventMask(view: DataView, index: number): number {
  return view.getUint32(index * EVENT_BYTES, true);
}

/** The 32-bit id in the `data` of the event at `index`. */
export function eventData(view: DataView, index: number): number {
  return view.getUint32(index * EVENT_BYTES + DATA_OFFSET, true);
}
