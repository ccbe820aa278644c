/**
 * The Deno floor (`bench/floor_server.ts`: the same answers, no lock logic) served through
 * non-blocking `epoll` by FFI instead of the runtime's sockets: one `epoll_wait` per wake (on
 * a runtime thread, as a nonblocking FFI call, after a synchronous poll finds nothing ready),
 * then a synchronous `recv` and `send` for every ready socket. Linux only; a measurement for
 * docs/benchmarks.md ("The raw protocol": whether a design that serves many ready sockets per
 * runtime operation beats the floor), not a server: it ignores partial lines, short writes and
 * back-pressure.
 *
 * Usage: `deno run -A bench/ffi_floor_server.ts [PORT]` (default 7990), then drive it with
 * `bench/loadgen.c` (`loadgen pairs --proto lockd --port PORT --conns 16 --depth 1`).
 *
 * @module
 */

import { answer } from "./floor_server.ts";

const libc = Deno.dlopen("libc.so.6", {
  socket: { parameters: ["i32", "i32", "i32"], result: "i32" },
  setsockopt: { parameters: ["i32", "i32", "i32", "buffer", "u32"], result: "i32" },
  bind: { parameters: ["i32", "buffer", "u32"], result: "i32" },
  listen: { parameters: ["i32", "i32"], result: "i32" },
  accept4: { parameters: ["i32", "pointer", "pointer", "i32"], result: "i32" },
  epoll_create1: { parameters: ["i32"], result: "i32" },
  epoll_ctl: { parameters: ["i32", "i32", "i32", "buffer"], result: "i32" },
  epoll_wait: { parameters: ["i32", "buffer", "i32", "i32"], result: "i32", nonblocking: true },
  epoll_wait_now: {
    name: "epoll_wait",
    parameters: ["i32", "buffer", "i32", "i32"],
    result: "i32",
  },
  recv: { parameters: ["i32", "buffer", "usize", "i32"], result: "isize" },
  send: { parameters: ["i32", "buffer", "usize", "i32"], result: "isize" },
  close: { parameters: ["i32"], result: "i32" },
});
const L = libc.symbols;
const AF_INET = 2, SOCK_STREAM = 1, SOCK_NONBLOCK = 0o4000, SOL_SOCKET = 1, SO_REUSEADDR = 2;
const IPPROTO_TCP = 6, TCP_NODELAY = 1, EPOLLIN = 1, EPOLL_CTL_ADD = 1, EPOLL_CTL_DEL = 2;
const port = Number(Deno.args[0] ?? 7990);
const lfd = L.socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
const one = new Int32Array([1]);
L.setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, one, 4);
const sa = new Uint8Array(16);
const dv = new DataView(sa.buffer);
dv.setUint16(0, AF_INET, true);
dv.setUint16(2, port, false);
sa.set([127, 0, 0, 1], 4);
if (L.bind(lfd, sa, 16) !== 0) throw new Error("bind");
L.listen(lfd, 1024);
const ep = L.epoll_create1(0);
const ev = new Uint8Array(12);
const evd = new DataView(ev.buffer);
function add(fd: number) {
  evd.setUint32(0, EPOLLIN, true);
  evd.setUint32(4, fd, true);
  L.epoll_ctl(ep, EPOLL_CTL_ADD, fd, ev);
}
add(lfd);
const MAX = 256;
const events = new Uint8Array(12 * MAX);
const ed = new DataView(events.buffer);
const READ_SIZE = 16 * 1024;
const buf = new Uint8Array(READ_SIZE), out = new Uint8Array(12 * READ_SIZE);
function handle(n: number) {
  for (let i = 0; i < n; i++) {
    const fd = ed.getUint32(12 * i + 4, true);
    if (fd === lfd) {
      for (;;) {
        const c = L.accept4(lfd, null, null, SOCK_NONBLOCK);
        if (c < 0) break;
        L.setsockopt(c, IPPROTO_TCP, TCP_NODELAY, one, 4);
        add(c);
      }
      continue;
    }
    const r = Number(L.recv(fd, buf, BigInt(READ_SIZE), 0));
    if (r === 0 || (r < 0)) {
      if (r === 0) {
        L.epoll_ctl(ep, EPOLL_CTL_DEL, fd, ev);
        L.close(fd);
      }
      continue;
    }
    const len = answer(buf.subarray(0, r), out);
    if (len > 0) L.send(fd, out, BigInt(len), 0x4000 /* MSG_NOSIGNAL */);
  }
}
console.log(`listening on 127.0.0.1:${port} as ffi-floor`);
for (;;) {
  let n = L.epoll_wait_now(ep, events, MAX, 0);
  if (n <= 0) n = await L.epoll_wait(ep, events, MAX, -1);
  if (n > 0) handle(n);
}
