/**
 * The epoll transport (server/epoll.ts) on its own, over real loopback TCP: partial and
 * blocked writes, reads into part of a buffer, the end of input, closes while a read or an
 * accept waits, and when it refuses to start. The protocol suites (server_test.ts,
 * server_limits_test.ts) run on it and on the runtime's sockets.
 */

import assert from "node:assert/strict";
import { EpollConn, EpollListener } from "../server/epoll.ts";
import { openLibc, parseIPv4, readSockaddrIn, sockaddrIn } from "../server/epoll_libc.ts";
import { effectiveIo, epollRuledOutBy } from "../server/flags.ts";
import { LockServer } from "../server/server.ts";
import { epollUnavailable, listenTcp } from "../server/transport.ts";
const SILENT = { debug() {}, info() {}, warn() {}, error() {} };

const libc = openLibc();
const linux = libc !== null;

Deno.test("parseIPv4() takes dotted quads only; sockaddr_in round-trips", () => {
  assert.deepEqual(parseIPv4("127.0.0.1"), [127, 0, 0, 1]);
  assert.deepEqual(parseIPv4("0.0.0.0"), [0, 0, 0, 0]);
  for (
    const bad of ["localhost", "::1", "1.2.3", "1.2.3.4.5", "256.0.0.1", "01.2.3.4", "1.2.3.x", ""]
  ) {
    assert.equal(parseIPv4(bad), null, bad);
  }
  assert.deepEqual(readSockaddrIn(sockaddrIn([10, 1, 2, 3], 7321)), {
    transport: "tcp",
    hostname: "10.1.2.3",
    port: 7321,
  });
});

Deno.test({
  name: "epoll: echoes over a partial read buffer, and reads null at the end of input",
  ignore: !linux,
  async fn() {
    const listener = new EpollListener(libc!, "127.0.0.1", 0);
    const client = await Deno.connect({ hostname: "127.0.0.1", port: listener.addr.port });
    const conn = await listener.accept();
    assert.equal(conn.remoteAddr.port, (client.localAddr as Deno.NetAddr).port);
    await client.write(new TextEncoder().encode("hello"));
    const buffer = new Uint8Array(16);
    const n = await conn.read(buffer.subarray(3));
    assert.equal(new TextDecoder().decode(buffer.subarray(3, 3 + n!)), "hello");
    assert.equal(await conn.write(new TextEncoder().encode("back")), 4);
    const got = new Uint8Array(4);
    assert.equal(await client.read(got), 4);
    assert.equal(new TextDecoder().decode(got), "back");
    client.close();
    assert.equal(await conn.read(buffer), null);
    conn.close();
    listener.close();
    await listener.done;
  },
});

/** Writes all of `data` through `conn`, as LineWriter does (partial writes continue). */
async function writeAll(conn: EpollConn, data: Uint8Array): Promise<void> {
  for (let at = 0; at < data.length;) at += await conn.write(data.subarray(at));
}

Deno.test({
  name: "epoll: a write the kernel cannot take at once finishes when the reader reads, in order",
  ignore: !linux,
  async fn() {
    const listener = new EpollListener(libc!, "127.0.0.1", 0);
    const client = await Deno.connect({ hostname: "127.0.0.1", port: listener.addr.port });
    const conn = await listener.accept();
    const data = new Uint8Array(16 * 1024 * 1024);
    for (let i = 0; i < data.length; i++) data[i] = (i * 7) & 0xff;
    let finished = false;
    const writing = writeAll(conn, data).then(() => finished = true);
    // Nothing is read yet: far more than the socket buffers hold stays unwritten.
    await new Promise((resolve) => setTimeout(resolve, 100));
    assert.equal(finished, false);
    const got = new Uint8Array(data.length);
    let at = 0;
    while (at < got.length) {
      const n = await client.read(got.subarray(at));
      assert.notEqual(n, null);
      at += n!;
    }
    await writing;
    assert.ok(got.every((b, i) => b === data[i]), "bytes arrive in order");
    client.close();
    conn.close();
    listener.close();
    await listener.done;
  },
});

Deno.test({
  name:
    "epoll: close fails a pending read; listener close fails a pending accept and ends the loop",
  ignore: !linux,
  async fn() {
    const listener = new EpollListener(libc!, "127.0.0.1", 0);
    const client = await Deno.connect({ hostname: "127.0.0.1", port: listener.addr.port });
    const conn = await listener.accept();
    const reading = conn.read(new Uint8Array(8));
    conn.close();
    await assert.rejects(reading, Deno.errors.Interrupted);
    await assert.rejects(conn.write(new Uint8Array(1)), Deno.errors.BadResource);
    const accepting = listener.accept();
    listener.close();
    await assert.rejects(accepting, Deno.errors.BadResource);
    await listener.done;
    client.close();
  },
});

/** Waits until `listener` has dispatched the events of everything sent so far. */
function settle(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 50));
}

/** What `promise` gives within 500 ms, or `"stuck"`. */
async function within<T>(promise: Promise<T>): Promise<T | "stuck"> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const stuck = new Promise<"stuck">((resolve) => timer = setTimeout(resolve, 500, "stuck"));
  try {
    return await Promise.race([promise, stuck]);
  } finally {
    clearTimeout(timer);
  }
}

Deno.test({
  name: "epoll: bytes and the end of input signalled in one edge: the bytes, then null",
  ignore: !linux,
  async fn() {
    const listener = new EpollListener(libc!, "127.0.0.1", 0);
    const client = await Deno.connect({ hostname: "127.0.0.1", port: listener.addr.port });
    const conn = await listener.accept();
    // Both arrive before the server reads: one edge carries the data and the FIN, and the
    // short read that takes the data must not wait for another edge.
    await client.write(new TextEncoder().encode("A k 5 0\n"));
    await client.closeWrite();
    await settle();
    const buffer = new Uint8Array(64);
    assert.equal(await conn.read(buffer), 8);
    const end = await within(conn.read(buffer));
    assert.equal(end, null);
    conn.close();
    client.close();
    listener.close();
    await listener.done;
  },
});

Deno.test({
  name: "epoll: bytes followed by a reset: the bytes, then the reset as an error",
  ignore: !linux,
  async fn() {
    const net = await import("node:net");
    const listener = new EpollListener(libc!, "127.0.0.1", 0);
    await new Promise<void>((resolve, reject) => {
      const socket = net.connect(listener.addr.port, "127.0.0.1", () => {
        socket.write("A x", () => {
          socket.resetAndDestroy();
          resolve();
        });
      });
      socket.once("error", reject);
    });
    const conn = await listener.accept();
    await settle();
    const buffer = new Uint8Array(64);
    const first = await conn.read(buffer).catch((error: Error) => error);
    // The bytes may be dropped with the reset; either way the reset is not lost.
    const reset = first === 3
      ? await within(conn.read(buffer).catch((error: Error) => error))
      : first;
    assert.ok(reset instanceof Deno.errors.ConnectionReset, String(reset));
    conn.close();
    listener.close();
    await listener.done;
  },
});

Deno.test({
  name: "epoll: a taken address throws AddrInUse and leaks no socket",
  ignore: !linux,
  fn() {
    const taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    assert.throws(
      () => new EpollListener(libc!, "127.0.0.1", (taken.addr as Deno.NetAddr).port),
      Deno.errors.AddrInUse,
    );
    taken.close();
  },
});

Deno.test("the epoll transport refuses what it cannot serve, with the reason", async () => {
  assert.match(epollUnavailable("localhost")!, /IPv4 addresses only, not localhost/);
  assert.match(epollUnavailable("::1")!, /IPv4 addresses only/);
  assert.throws(() => listenTcp("::1", 0, "epoll"), /--io epoll cannot run here/);
  // auto falls back to the runtime's sockets, which serve any address.
  const { listener, transport } = listenTcp("localhost", 0, "auto");
  assert.equal(transport, "portable");
  listener.close();
  const dataDir = await Deno.makeTempDir({ prefix: "lockd-epoll-" });
  try {
    await assert.rejects(
      LockServer.start({
        port: 0,
        dataDir,
        log: SILENT,
        io: "epoll",
        tls: { cert: "-", key: "-" },
      }),
      /--io epoll cannot run here: it serves a single node's plain TCP only/,
    );
    const portable = await LockServer.start({ port: 0, dataDir, log: SILENT, io: "portable" });
    assert.equal(portable.transport, "portable");
    await portable.shutdown();
    if (linux) {
      const auto = await LockServer.start({ port: 0, dataDir, log: SILENT });
      assert.equal(auto.transport, "epoll");
      await auto.shutdown();
    }
  } finally {
    await Deno.remove(dataDir, { recursive: true });
  }
});

Deno.test({
  name: "epoll: a node with FFI but no read access to /proc still serves on epoll",
  ignore: !linux,
  async fn() {
    const dataDir = await Deno.makeTempDir({ prefix: "lockd-epoll-perm-" });
    const main = new URL("../server/main.ts", import.meta.url).pathname;
    const root = new URL("..", import.meta.url).pathname;
    const child = new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "--allow-net",
        "--allow-ffi",
        `--allow-read=${dataDir},${root}`,
        `--allow-write=${dataDir}`,
        "--allow-env",
        main,
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        dataDir,
      ],
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    try {
      const lines = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
      let ready = "";
      while (!ready.includes("\n")) {
        const { value, done } = await lines.read();
        if (done) break;
        ready += value;
      }
      const port = Number(/listening on 127\.0\.0\.1:(\d+)/.exec(ready)?.[1]);
      assert.ok(port > 0, ready);
      const conn = await Deno.connect({ hostname: "127.0.0.1", port });
      await conn.write(new TextEncoder().encode("R perm 1\n"));
      const reply = new Uint8Array(64);
      const n = await conn.read(reply);
      assert.equal(new TextDecoder().decode(reply.subarray(0, n!)), "R perm N\n");
      conn.close();
      await lines.cancel();
    } finally {
      child.kill("SIGTERM");
      const { code } = await child.status;
      const stderr = await new Response(child.stderr).text();
      assert.equal(code, 0, stderr);
      assert.match(stderr, /event=transport transport=epoll/);
      await Deno.remove(dataDir, { recursive: true });
    }
  },
});

Deno.test("TLS, peers and the bridge rule epoll out: auto keeps the runtime's sockets", () => {
  const none = { tls: false, peers: false, bridge: false };
  assert.equal(epollRuledOutBy(none), undefined);
  assert.equal(epollRuledOutBy({ ...none, tls: true }), "--tls-cert");
  assert.equal(epollRuledOutBy({ ...none, peers: true }), "--peers");
  assert.equal(epollRuledOutBy({ ...none, bridge: true }), "--bridge");
  assert.equal(effectiveIo("auto", "--peers"), "portable");
  assert.equal(effectiveIo("auto", undefined), "auto");
  assert.equal(effectiveIo("epoll", "--bridge"), "epoll"); // refused by its caller
  assert.equal(effectiveIo("portable", undefined), "portable");
});
