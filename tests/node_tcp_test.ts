/**
 * The `node:net` transport (`client/node_tcp.ts`, issue 15): batching, back-pressure,
 * `ref`/`unref`, framing and its end, on a fake socket; then the real thing in Deno (whose
 * `node:net` it also runs on) against a real server, over TCP and TLS, through `LockClient`.
 * Node.js and Bun are tested in `tests/runtimes_test.ts`.
 */

import assert from "node:assert/strict";
import { LockClient } from "../mod.ts";
import { connectNodeTcp, type NodeSocket, wrapNodeSocket } from "../client/node_tcp.ts";
import { startServer } from "./_helpers.ts";
import { testPki, tlsArgs } from "./_tls.ts";

type Listener = (...args: never[]) => void;

/** A socket whose writes complete when the test says, with a small buffer for `write()`. */
class FakeSocket implements NodeSocket {
  writes: string[] = [];
  callbacks: ((error?: Error | null) => void)[] = [];
  /** What `write()` returns. */
  full = false;
  refs: string[] = [];
  destroyed = 0;
  #listeners = new Map<string, Set<Listener>>();

  write(data: Uint8Array, callback: (error?: Error | null) => void): boolean {
    this.writes.push(new TextDecoder().decode(data));
    this.callbacks.push(callback);
    return !this.full;
  }
  on(event: string, listener: Listener): this {
    if (!this.#listeners.has(event)) this.#listeners.set(event, new Set());
    this.#listeners.get(event)!.add(listener);
    return this;
  }
  once(event: string, listener: Listener): this {
    const once = ((...args: never[]) => {
      this.removeListener(event, once);
      listener(...args);
    }) as Listener;
    return this.on(event, once);
  }
  removeListener(event: string, listener: Listener): this {
    this.#listeners.get(event)?.delete(listener);
    return this;
  }
  emit(event: string, ...args: unknown[]): void {
    for (const listener of [...(this.#listeners.get(event) ?? [])]) {
      (listener as (...a: unknown[]) => void)(...args);
    }
  }
  listeners(event: string): number {
    return this.#listeners.get(event)?.size ?? 0;
  }
  setNoDelay(): this {
    return this;
  }
  ref(): this {
    this.refs.push("ref");
    return this;
  }
  unref(): this {
    this.refs.push("unref");
    return this;
  }
  destroy(): this {
    this.destroyed++;
    return this;
  }
  ended = 0;
  end(): this {
    this.ended++;
    return this;
  }
  /** Completes the oldest write in flight. */
  complete(error?: Error): void {
    this.callbacks.shift()!(error ?? null);
  }
}

/** Lets queued microtasks and promise continuations run. */
function turn(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 0));
}

function transportOn(socket: FakeSocket) {
  const lines: string[] = [];
  let closed = 0;
  const transport = wrapNodeSocket(socket, {
    line: (text) => lines.push(text),
    closed: () => closed++,
  });
  return { transport, lines, closed: () => closed };
}

Deno.test("node_tcp: lines sent in one turn go out in one write, one write at a time", async () => {
  const socket = new FakeSocket();
  const { transport } = transportOn(socket);
  for (let i = 0; i < 100; i++) transport.send(`A k${i} 30 0`);
  await turn();
  assert.equal(socket.writes.length, 1);
  assert.equal(socket.writes[0].split("\n").length, 101);
  // While the write is in flight, more lines wait in the transport, not in the socket.
  for (let i = 0; i < 50; i++) transport.send(`R k${i} 1`);
  await turn();
  assert.equal(socket.writes.length, 1);
  socket.complete();
  await turn();
  assert.equal(socket.writes.length, 2);
  assert.equal(socket.writes[1], Array.from({ length: 50 }, (_, i) => `R k${i} 1\n`).join(""));
  socket.complete();
  transport.close();
});

Deno.test("node_tcp: when write() returns false the next write waits for 'drain'", async () => {
  const socket = new FakeSocket();
  const { transport } = transportOn(socket);
  socket.full = true;
  transport.send("A a 30 0");
  await turn();
  transport.send("A b 30 0");
  socket.complete(); // Taken, but the socket's buffer is over its mark.
  await turn();
  assert.equal(socket.writes.length, 1, "no write before 'drain'");
  socket.full = false;
  socket.emit("drain");
  await turn();
  assert.deepEqual(socket.writes, ["A a 30 0\n", "A b 30 0\n"]);
  socket.complete();
  await turn();
  assert.equal(socket.listeners("drain"), 0, "no listener left behind");
  transport.close();
});

Deno.test("node_tcp: starts unref'd, and ref(keep) maps to ref() and unref()", () => {
  const socket = new FakeSocket();
  const { transport } = transportOn(socket);
  assert.deepEqual(socket.refs, ["unref"]);
  transport.ref!(true);
  transport.ref!(false);
  assert.deepEqual(socket.refs, ["unref", "ref", "unref"]);
  transport.close();
  transport.ref!(true);
  assert.deepEqual(socket.refs, ["unref", "ref", "unref"], "nothing after close");
});

Deno.test("node_tcp: splits chunks into lines, across chunks and in chunks above its buffer", () => {
  const socket = new FakeSocket();
  const { transport, lines } = transportOn(socket);
  const encoder = new TextEncoder();
  socket.emit("data", encoder.encode("A k A 1\r\nR k"));
  socket.emit("data", encoder.encode(" R\n"));
  assert.deepEqual(lines, ["A k A 1", "R k R"]);
  const many = Array.from({ length: 5000 }, (_, i) => `A key-${i} A ${i + 1}`);
  socket.emit("data", encoder.encode(many.join("\n") + "\n")); // About 80 KB at once.
  assert.equal(lines.length, 5002);
  assert.deepEqual(lines.slice(2), many);
  transport.close();
});

Deno.test("node_tcp: a line over the limit closes; the end is reported once", () => {
  const socket = new FakeSocket();
  const { lines, closed } = transportOn(socket);
  socket.emit("data", new TextEncoder().encode("x".repeat(100_000)));
  assert.equal(lines.length, 0);
  assert.equal(socket.destroyed > 0, true);
  assert.equal(closed(), 1);
  socket.emit("close");
  assert.equal(closed(), 1);
});

Deno.test("node_tcp: an error or the peer's close ends it once; nothing is written afterwards", async () => {
  const socket = new FakeSocket();
  const { transport, closed } = transportOn(socket);
  transport.send("A a 30 0");
  await turn();
  socket.emit("error", new Error("ECONNRESET"));
  socket.emit("close");
  assert.equal(closed(), 1);
  transport.send("A b 30 0");
  await turn();
  assert.equal(socket.writes.length, 1, "nothing is written after the end");
});

Deno.test("node_tcp: end() half-closes: nothing more is sent, lines still arrive", async () => {
  const socket = new FakeSocket();
  const { transport, lines, closed } = transportOn(socket);
  transport.send("A k 30 5");
  await turn();
  socket.complete();
  transport.send("R other 1"); // Queued in the same turn as the end: still sent, first.
  transport.end!();
  await turn();
  assert.deepEqual(socket.writes, ["A k 30 5\n", "R other 1\n"]);
  assert.equal(socket.ended, 0, "the sending side closes once the write is taken");
  socket.complete();
  await turn();
  assert.equal(socket.ended, 1);
  assert.equal(socket.destroyed, 0, "the socket stays open for reading");
  transport.send("A late 30 0");
  await turn();
  assert.equal(socket.writes.length, 2, "nothing is written after end()");
  socket.emit("data", new TextEncoder().encode("A k A 9\n"));
  assert.deepEqual(lines, ["A k A 9"]);
  assert.equal(closed(), 0);
  socket.emit("close");
  assert.equal(closed(), 1, "the server's close ends it");
});

Deno.test("node_tcp: connectNodeTcp honours an aborted signal and a refused port", async () => {
  const aborted = new AbortController();
  aborted.abort(new Error("gave up"));
  const handlers = { line() {}, closed() {} };
  await assert.rejects(
    connectNodeTcp(
      { scheme: "tcp", hostname: "127.0.0.1", port: 1, key: "x" },
      handlers,
      aborted.signal,
    ),
    /gave up/,
  );
  await assert.rejects(
    connectNodeTcp(
      { scheme: "tcp", hostname: "127.0.0.1", port: 1, key: "127.0.0.1:1" },
      handlers,
      new AbortController().signal,
    ),
    /ECONNREFUSED|refused/i,
  );
});

Deno.test("node_tcp: LockClient over node:net in Deno, TCP and TLS", async () => {
  const pki = await testPki();
  const plain = await startServer();
  const secure = await startServer({ args: tlsArgs(pki) });
  try {
    const client = new LockClient(plain.address, { connect: connectNodeTcp });
    const tls = new LockClient(`tls://127.0.0.1:${secure.port}`, {
      connect: connectNodeTcp,
      caCerts: [pki.caPem],
    });
    try {
      const a = await client.acquire("node-tcp:a", { lease: 10 });
      await a.extend(10);
      await a.release();
      const b = await tls.acquire("node-tcp:b", { lease: 10 });
      assert.equal(typeof b.token, "bigint");
      await b.release();
    } finally {
      await Promise.all([client.close(), tls.close()]);
    }
  } finally {
    await Promise.all([plain.stop(), secure.stop()]);
    await Deno.remove(plain.dataDir, { recursive: true }).catch(() => {});
    await Deno.remove(secure.dataDir, { recursive: true }).catch(() => {});
  }
});
