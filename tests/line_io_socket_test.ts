/**
 * Unit tests of the server's {@linkcode LineSocket}, without sockets: over a fake byte stream
 * whose reads the test feeds and whose writes it captures (and completes, when it wants) —
 * lines and replies, invalid and too long lines, pausing and dropping on held output,
 * closing, and the reply gate of a client's connection.
 * Line framing and batched output: line_io_test.ts; reply order per id and the end of batch:
 * line_io_order_test.ts.
 *
 * @module
 */

import assert from "node:assert/strict";
import { Batch } from "../server/batch.ts";
import { type ByteStream, type LineHandler, LineSocket } from "../server/line_socket.ts";
import type { Logger } from "../server/log.ts";
import { bytes, decoder, tick } from "./_line_io.ts";

// ---------------------------------------------------------------------------------------
// LineSocket

/** A byte stream whose reads the test feeds and whose writes it captures. */
class FakeStream implements ByteStream {
  /** Each write's bytes, decoded (copied when the write was called). */
  writes: string[] = [];
  /** How many times close() was called. */
  closes = 0;
  /** Whether writes complete by themselves (at once, fully) or wait for {@linkcode complete}. */
  autoWrite = true;
  #read:
    | { buffer: Uint8Array; resolve: (n: number | null) => void; reject: (e: unknown) => void }
    | undefined;
  #readWaiter: PromiseWithResolvers<void> | undefined;
  #writeWaiter: PromiseWithResolvers<void> | undefined;
  #pendingWrites: { size: number; resolve: (n: number) => void }[] = [];

  read(buffer: Uint8Array): Promise<number | null> {
    assert.equal(this.#read, undefined, "only one read at a time");
    const { promise, resolve, reject } = Promise.withResolvers<number | null>();
    this.#read = { buffer, resolve, reject };
    this.#readWaiter?.resolve();
    return promise;
  }

  write(data: Uint8Array): Promise<number> {
    this.writes.push(decoder.decode(data));
    this.#writeWaiter?.resolve();
    if (this.autoWrite) return Promise.resolve(data.length);
    const { promise, resolve } = Promise.withResolvers<number>();
    this.#pendingWrites.push({ size: data.length, resolve });
    return promise;
  }

  close(): void {
    this.closes++;
    const read = this.#read;
    this.#read = undefined;
    read?.reject(new Deno.errors.BadResource("closed"));
  }

  /** Whether the socket is waiting in a read. */
  get reading(): boolean {
    return this.#read !== undefined;
  }

  /** Writes not completed yet (with autoWrite off). */
  get pendingWrites(): number {
    return this.#pendingWrites.length;
  }

  /** Resolves once the socket waits in a read. */
  async readCalled(): Promise<void> {
    if (this.#read !== undefined) return;
    this.#readWaiter = Promise.withResolvers();
    await this.#readWaiter.promise;
    this.#readWaiter = undefined;
  }

  /** Resolves at the next write call. */
  async nextWrite(): Promise<string> {
    const count = this.writes.length;
    this.#writeWaiter = Promise.withResolvers();
    await this.#writeWaiter.promise;
    this.#writeWaiter = undefined;
    return this.writes[count];
  }

  async #take() {
    await this.readCalled();
    const read = this.#read!;
    this.#read = undefined;
    return read;
  }

  /** Waits for the next read and hands it `data`. */
  async feed(data: string | Uint8Array): Promise<void> {
    const chunk = bytes(data);
    const read = await this.#take();
    assert.ok(chunk.length <= read.buffer.length);
    read.buffer.set(chunk);
    read.resolve(chunk.length);
  }

  /** Waits for the next read and ends the stream. */
  async end(): Promise<void> {
    (await this.#take()).resolve(null);
  }

  /** Waits for the next read and fails it. */
  async fail(error: unknown): Promise<void> {
    (await this.#take()).reject(error);
  }

  /** Completes the oldest pending write in full. */
  complete(): void {
    const write = this.#pendingWrites.shift();
    assert.ok(write !== undefined, "no write pending");
    write.resolve(write.size);
  }
}

/** A logger that keeps warnings. */
/**
 * A client socket on `stream` whose replies wait for the standbys: each one is at batch
 * `position`, and `reached()` says how far they acknowledged.
 */
function gatedSocket(stream: FakeStream, position: number, reached: () => number): LineSocket {
  const gate = { position: () => position, reached, wait() {} };
  return new LineSocket(stream, "10.0.0.9:5555", { line() {}, closed() {} }, {
    batch: new Batch(),
    log: recordingLog(),
    replies: gate,
  });
}

function recordingLog(): Logger & { warnings: string[] } {
  const warnings: string[] = [];
  return { warnings, debug() {}, info() {}, warn: (m) => warnings.push(m), error() {} };
}

interface SocketHarness {
  stream: FakeStream;
  socket: LineSocket;
  log: Logger & { warnings: string[] };
  /** Lines the handler got. */
  lines: string[];
  /** Invalid lines the handler got. */
  invalid: string[];
  /** How many times the handler's closed() was called. */
  closes(): number;
}

/**
 * A LineSocket over a fake stream whose handler answers each line with `reply(line)` (when
 * it returns a string).
 */
function socketHarness(
  options: { pauseAt?: number; dropAt?: number; maxLineBytes?: number; autoWrite?: boolean } = {},
  reply: (line: string) => string | undefined = (line) => `re ${line}`,
): SocketHarness {
  const stream = new FakeStream();
  stream.autoWrite = options.autoWrite ?? true;
  const log = recordingLog();
  const lines: string[] = [];
  const invalid: string[] = [];
  let closes = 0;
  let socket: LineSocket | undefined = undefined;
  const handler: LineHandler = {
    line(text) {
      lines.push(text);
      const answer = reply(text);
      if (answer !== undefined) socket!.send(answer);
    },
    invalid(text) {
      invalid.push(text);
      socket!.send(`bad ${text.replace(/\r$/, "")}`);
    },
    closed() {
      closes++;
    },
  };
  socket = new LineSocket(stream, "10.0.0.9:5555", handler, {
    batch: new Batch(),
    log,
    pauseAt: options.pauseAt,
    dropAt: options.dropAt,
    maxLineBytes: options.maxLineBytes,
  });
  return { stream, socket, log, lines, invalid, closes: () => closes };
}

Deno.test("LineSocket delivers lines and writes the replies of one read in one write", async () => {
  const h = socketHarness();
  const write = h.stream.nextWrite();
  await h.stream.feed("A k 30 0\r\nR k 1\n\nX k");
  assert.equal(await write, "re A k 30 0\nre R k 1\n");
  assert.deepEqual(h.lines, ["A k 30 0", "R k 1"]);
  const second = h.stream.nextWrite();
  await h.stream.feed(" 1 30\n");
  assert.equal(await second, "re X k 1 30\n");
  assert.equal(h.stream.writes.length, 2);
  assert.equal(h.socket.closed, false);
  h.socket.close();
  await h.socket.done;
  assert.equal(h.closes(), 1);
  assert.equal(h.stream.closes, 1);
});

Deno.test("LineSocket passes invalid UTF-8 lines to the handler and stays open", async () => {
  const h = socketHarness();
  const write = h.stream.nextWrite();
  await h.stream.feed(Uint8Array.of(...bytes("A k"), 0xff, ...bytes(" 30 0\nR k 1\n")));
  assert.equal(await write, "bad A k\uFFFD 30 0\nre R k 1\n");
  assert.deepEqual(h.invalid, ["A k\uFFFD 30 0"]);
  assert.equal(h.socket.closed, false);
  await h.stream.readCalled();
  h.socket.close();
  await h.socket.done;
});

Deno.test("LineSocket answers a line over the limit with E line too long, then closes", async () => {
  const h = socketHarness({ maxLineBytes: 16, autoWrite: false });
  const write = h.stream.nextWrite();
  await h.stream.feed("R k 1\n" + "x".repeat(17) + "\nR k 2\n");
  assert.equal(await write, "re R k 1\n- - E line too long\n", "replies before it go first");
  assert.deepEqual(h.lines, ["R k 1"], "nothing after the long line is handled");
  assert.equal(h.socket.closed, true, "closing");
  assert.equal(h.stream.closes, 0, "not before the write finished");
  assert.equal(h.stream.reading, false, "no more reads");
  h.stream.complete();
  await h.socket.done;
  assert.equal(h.stream.closes, 1);
  assert.equal(h.closes(), 1);
  assert.equal(h.stream.writes.length, 1);
});

Deno.test("LineSocket pauses reading while output is held and resumes once it drains", async () => {
  // Each reply is 10 units ("re " + 6 + "\n"): one in flight reaches pauseAt.
  const h = socketHarness({ pauseAt: 10, autoWrite: false });
  const first = h.stream.nextWrite();
  await h.stream.feed("line-1\n");
  assert.equal(await first, "re line-1\n");
  await tick();
  assert.equal(h.stream.reading, false, "paused: 10 units held, pauseAt 10");
  const resumed = h.stream.readCalled();
  h.stream.complete();
  await resumed;
  assert.equal(h.stream.reading, true, "reading again once the write drained");
  // Below the mark reading goes on while a write is in flight.
  const second = h.stream.nextWrite();
  await h.stream.feed("ab\n");
  assert.equal(await second, "re ab\n");
  await h.stream.readCalled();
  h.stream.complete();
  h.socket.close();
  await h.socket.done;
  assert.equal(h.closes(), 1);
});

Deno.test("LineSocket counts replies held elsewhere (hold()) for pausing", async () => {
  const h = socketHarness({ pauseAt: 100, autoWrite: false });
  h.socket.hold(95);
  const write = h.stream.nextWrite();
  await h.stream.feed("line-1\n");
  assert.equal(await write, "re line-1\n");
  await tick();
  assert.equal(h.stream.reading, false, "95 held + 10 in flight >= 100");
  let resumed = h.stream.readCalled();
  h.stream.complete();
  await resumed;
  assert.equal(h.stream.reading, true, "95 < 100 once the write drained");

  h.socket.hold(10); // 105 held elsewhere: the next read is the last one for now
  const second = h.stream.nextWrite();
  await h.stream.feed("line-2\n");
  await second;
  h.stream.complete();
  await tick();
  assert.equal(h.stream.reading, false, "105 held elsewhere: stays paused after the write");
  // The session hands its held replies over: they are queued here and written.
  h.socket.hold(-105);
  h.socket.send("held reply");
  resumed = h.stream.readCalled();
  assert.equal(await h.stream.nextWrite(), "held reply\n");
  h.stream.complete();
  await resumed;
  assert.equal(h.stream.reading, true);
  h.socket.close();
  await h.socket.done;
});

Deno.test("LineSocket drops a connection whose output passes dropAt", async (t) => {
  await t.step("queued output", async () => {
    const h = socketHarness({ dropAt: 10 });
    await h.stream.readCalled();
    h.socket.send("123456789"); // 10 units: at the cap, not past it
    assert.equal(h.socket.closed, false);
    h.socket.send("x");
    assert.equal(h.socket.closed, true);
    assert.equal(h.stream.closes, 1);
    assert.equal(h.log.warnings.length, 1);
    assert.match(h.log.warnings[0], /dropping 10\.0\.0\.9:5555/);
    await h.socket.done;
    assert.equal(h.closes(), 1);
    await tick();
    assert.deepEqual(h.stream.writes, [], "queued output is dropped");
  });
  await t.step("held elsewhere", async () => {
    const h = socketHarness({ dropAt: 10 });
    await h.stream.readCalled();
    h.socket.send("1234"); // 5
    h.socket.hold(5);
    assert.equal(h.socket.closed, false);
    h.socket.hold(-3);
    h.socket.hold(4); // 5 + 6
    assert.equal(h.socket.closed, true);
    assert.match(h.log.warnings[0], /too many replies held/);
    await h.socket.done;
    assert.equal(h.closes(), 1);
    h.socket.send("after");
    await tick();
    assert.deepEqual(h.stream.writes, []);
  });
});

Deno.test("LineSocket closeAfterFlush() closes once the queued output is written", async () => {
  const h = socketHarness({ autoWrite: false });
  await h.stream.readCalled();
  h.socket.send("last words");
  h.socket.closeAfterFlush();
  assert.equal(h.socket.closed, true);
  assert.equal(await h.stream.nextWrite(), "last words\n");
  await tick();
  assert.equal(h.stream.closes, 0, "waits for the write");
  h.stream.complete();
  await h.socket.done;
  assert.equal(h.stream.closes, 1);
  assert.equal(h.closes(), 1);
});

Deno.test("LineSocket closeAfterFlush() with nothing queued closes at once", async () => {
  const h = socketHarness();
  await h.stream.readCalled();
  h.socket.closeAfterFlush();
  assert.equal(h.stream.closes, 1);
  await h.socket.done;
  assert.equal(h.closes(), 1);
  h.socket.closeAfterFlush();
  h.socket.close();
  assert.equal(h.stream.closes, 1, "close is idempotent");
});

Deno.test("LineSocket tells the handler closed() once at the end of the stream", async (t) => {
  await t.step("nothing to write", async () => {
    const h = socketHarness();
    await h.stream.end();
    await h.socket.done;
    assert.equal(h.closes(), 1);
    assert.equal(h.stream.closes, 1);
  });
  await t.step("the last replies still go out", async () => {
    const h = socketHarness({ autoWrite: false });
    const write = h.stream.nextWrite();
    await h.stream.feed("R k 1\n");
    assert.equal(await write, "re R k 1\n");
    await h.stream.end();
    await tick();
    assert.equal(h.closes(), 1, "the handler is told at once (its waiters are dropped)");
    assert.equal(h.stream.closes, 0, "the connection waits for the write");
    h.stream.complete();
    await h.socket.done;
    assert.equal(h.stream.closes, 1);
    assert.equal(h.closes(), 1);
  });
});

Deno.test("LineSocket tells the handler closed() once on a read error", async () => {
  const h = socketHarness({ autoWrite: false });
  const write = h.stream.nextWrite();
  await h.stream.feed("R k 1\n");
  await write;
  await h.stream.fail(new Deno.errors.ConnectionReset("reset"));
  await h.socket.done;
  assert.equal(h.closes(), 1);
  assert.equal(h.stream.closes, 1);
  assert.equal(h.socket.closed, true);
  h.stream.complete(); // the write in flight ends; nothing more is written
  await tick();
  assert.equal(h.stream.writes.length, 1);
  h.socket.send("after");
  await tick();
  assert.equal(h.stream.writes.length, 1);
});

Deno.test("LineSocket closes when a write fails", async () => {
  const stream = new FakeStream();
  let closes = 0;
  stream.write = () => Promise.reject(new Deno.errors.BrokenPipe("gone"));
  const socket = new LineSocket(stream, "peer", { line() {}, closed: () => closes++ }, {
    batch: new Batch(),
    log: recordingLog(),
  });
  await stream.readCalled();
  socket.send("x");
  await socket.done;
  assert.equal(stream.closes, 1);
  assert.equal(closes, 1);
});

Deno.test("LineSocket holds a client's replies for the standbys, but not once it is ungated (a peer link)", async () => {
  const stream = new FakeStream();
  let reached = 0;
  const socket = gatedSocket(stream, 5, () => reached);
  socket.send("held until position 5");
  socket.flush();
  assert.deepEqual(stream.writes, [], "a client's reply waits for the standbys");
  socket.ungate();
  const write = stream.nextWrite();
  socket.send("PEERAUTH nonce proof");
  socket.flush();
  // The held reply keeps its place: the later line waits behind it...
  assert.deepEqual(stream.writes, []);
  reached = 5;
  socket.flush();
  assert.equal(await write, "held until position 5\nPEERAUTH nonce proof\n");
  // ...and from then on nothing waits.
  const next = stream.nextWrite();
  socket.send("PEERAUTH again");
  socket.flush();
  assert.equal(await next, "PEERAUTH again\n");
  socket.close();
});

Deno.test("LineSocket tells whether replies wait for an acknowledgement (unconfirmed)", () => {
  const stream = new FakeStream();
  let reached = 0;
  const socket = gatedSocket(stream, 3, () => reached);
  assert.equal(socket.unconfirmed, false);
  socket.send("A k A 7");
  socket.flush();
  assert.equal(socket.unconfirmed, true, "held until a standby acknowledged batch 3");
  reached = 3;
  socket.flush();
  assert.equal(socket.unconfirmed, false);
  socket.close();
});
