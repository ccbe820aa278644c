/**
 * Unit tests of the line I/O pieces of the request path, without sockets: the line framing
 * ({@linkcode LineReader}), batched output ({@linkcode LineWriter}), reply order per id
 * ({@linkcode ReplyOrder}), the server's end of batch ({@linkcode Batch}) and the server's
 * {@linkcode LineSocket} over a fake byte stream whose reads the test feeds and whose
 * writes it captures (and completes, when it wants).
 *
 * @module
 */

import assert from "node:assert/strict";
import { LineReader, type LineSink } from "../client/line_reader.ts";
import { LineWriter } from "../client/line_writer.ts";
import { type OrderedReply, ReplyOrder } from "../client/reply_order.ts";
import { Batch } from "../server/batch.ts";
import { type ByteStream, type LineHandler, LineSocket } from "../server/line_socket.ts";
import type { Logger } from "../server/log.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function bytes(data: string | Uint8Array): Uint8Array {
  return typeof data === "string" ? encoder.encode(data) : data;
}

/** Lets pending microtasks and I/O callbacks run: one macrotask turn. */
function tick(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 0));
}

// ---------------------------------------------------------------------------------------
// LineReader

/** A reader whose sink logs `line <text>`, `invalid <text>` and `tooLong`. */
function readerHarness(
  options: { max?: number; invalid?: boolean; accepting?: () => boolean } = {},
) {
  const events: string[] = [];
  const sink: LineSink = {
    line: (text) => events.push(`line ${text}`),
    tooLong: () => events.push("tooLong"),
    accepting: options.accepting ?? (() => true),
  };
  if (options.invalid !== false) sink.invalid = (text) => events.push(`invalid ${text}`);
  const reader = new LineReader(sink, { maxLineBytes: options.max ?? 4096 });
  return {
    events,
    reader,
    /** Copies `data` into the reader's free space and commits it. */
    feed(data: string | Uint8Array): boolean {
      const chunk = bytes(data);
      const space = reader.space();
      assert.ok(chunk.length <= space.length, "the test feeds more than the reader has room for");
      space.set(chunk);
      return reader.commit(chunk.length);
    },
    /** The events so far, forgotten. */
    take(): string[] {
      return events.splice(0, events.length);
    },
  };
}

Deno.test("LineReader splits a chunk into lines, strips \\r\\n and skips empty lines", () => {
  const h = readerHarness();
  assert.equal(h.feed("A k 30 0\nR k 1\r\n\n\r\nX k 1 30\r\n\r\n"), true);
  assert.deepEqual(h.take(), ["line A k 30 0", "line R k 1", "line X k 1 30"]);
  // Only the last \r of a line is its ending; a \r inside a line is part of it.
  h.feed("a\rb\r\n");
  assert.deepEqual(h.take(), ["line a\rb"]);
});

Deno.test("LineReader keeps a partial line across reads", async (t) => {
  await t.step("in three pieces", () => {
    const h = readerHarness();
    h.feed("A k");
    assert.deepEqual(h.take(), []);
    h.feed(" 30 0\nR");
    assert.deepEqual(h.take(), ["line A k 30 0"]);
    h.feed(" k 1\n");
    assert.deepEqual(h.take(), ["line R k 1"]);
  });
  await t.step("\\r and \\n in separate reads", () => {
    const h = readerHarness();
    h.feed("a\r");
    h.feed("\nb\r");
    h.feed("\n");
    assert.deepEqual(h.take(), ["line a", "line b"]);
  });
  await t.step("one byte at a time gives the same lines as one chunk", () => {
    const input = "A k 30 0\r\n\nR k 1\nX é 1 30\r\n\r\nA 😀 1 0\n";
    const whole = readerHarness();
    whole.feed(input);
    const single = readerHarness();
    for (const byte of bytes(input)) single.feed(Uint8Array.of(byte));
    assert.deepEqual(single.take(), whole.take());
    assert.equal(single.events.length, 0);
  });
});

Deno.test("LineReader joins multi-byte characters split across reads", () => {
  const h = readerHarness();
  const text = "A é€😀 30 0"; // 2-, 3- and 4-byte characters
  const all = bytes(text + "\n");
  const start = bytes("A ").length;
  // Cut inside each multi-byte character in turn.
  for (const cut of [start + 1, start + 3, start + 4, start + 6, start + 7, start + 8]) {
    h.feed(all.subarray(0, cut));
    h.feed(all.subarray(cut));
    assert.deepEqual(h.take(), [`line ${text}`], `cut at byte ${cut}`);
  }
});

Deno.test("LineReader keeps a U+FEFF at the start of a chunk as part of the line", () => {
  const h = readerHarness();
  h.feed("\uFEFFA k 30 0\n");
  assert.deepEqual(h.take(), ["line \uFEFFA k 30 0"]);
});

Deno.test("LineReader commit(0) delivers nothing", () => {
  // Deno's read() may resolve with 0 bytes, which is not the end of the stream.
  const h = readerHarness();
  h.feed("A k 30 0\nR k 1\n");
  assert.deepEqual(h.take(), ["line A k 30 0", "line R k 1"]);
  assert.equal(h.reader.commit(0), true);
  assert.deepEqual(h.take(), [], "a read of 0 bytes must not replay earlier lines");
  h.feed("X k");
  assert.equal(h.reader.commit(0), true);
  h.feed(" 1 30\n");
  assert.deepEqual(h.take(), ["line X k 1 30"]);
});

Deno.test("LineReader stops at a line over the limit", async (t) => {
  await t.step("exactly the limit passes, with or without \\r", () => {
    const h = readerHarness({ max: 8 });
    assert.equal(h.feed("12345678\n12345678\r\n"), true);
    assert.deepEqual(h.take(), ["line 12345678", "line 12345678"]);
  });
  await t.step("one byte over: tooLong once, then nothing more", () => {
    const h = readerHarness({ max: 8 });
    assert.equal(h.feed("ok\n123456789\nlater\n"), false);
    assert.deepEqual(h.take(), ["line ok", "tooLong"]);
    assert.equal(h.feed("more\n"), false);
    assert.equal(h.reader.commit(0), false);
    assert.deepEqual(h.take(), []);
  });
  await t.step("the limit is in bytes, not UTF-16 units", () => {
    const h = readerHarness({ max: 8 });
    h.feed("éééé\n"); // 8 bytes
    assert.deepEqual(h.take(), ["line éééé"]);
    assert.equal(h.feed("ééééé\n"), false); // 10 bytes, 5 units
    assert.deepEqual(h.take(), ["tooLong"]);
  });
  await t.step("an unfinished line over the limit stops at once", () => {
    const h = readerHarness({ max: 8 });
    assert.equal(h.feed("12345678\r"), true, "8 bytes and a \\r may still end well");
    assert.equal(h.feed("9"), false);
    assert.deepEqual(h.take(), ["tooLong"]);
  });
  await t.step("built up over several reads", () => {
    const h = readerHarness({ max: 8 });
    for (const piece of ["123", "456", "78"]) assert.equal(h.feed(piece), true);
    assert.equal(h.feed("9\n"), false);
    assert.deepEqual(h.take(), ["tooLong"]);
  });
  await t.step("a long line that is not valid UTF-8", () => {
    const h = readerHarness({ max: 8 });
    assert.equal(h.feed(Uint8Array.of(...bytes("ok\n12345678"), 0xff, 10)), false);
    assert.deepEqual(h.take(), ["line ok", "tooLong"]);
  });
});

Deno.test("LineReader reports invalid UTF-8 lines decoded and goes on", async (t) => {
  const bad = Uint8Array.of(...bytes("A k"), 0xff, ...bytes(" 30 0\n"));
  await t.step("with an invalid hook", () => {
    const h = readerHarness();
    assert.equal(h.feed(Uint8Array.of(...bytes("R k 1\n"), ...bad, ...bytes("X k 1 30\n"))), true);
    assert.deepEqual(h.take(), ["line R k 1", "invalid A k\uFFFD 30 0", "line X k 1 30"]);
  });
  await t.step("a truncated multi-byte character, with \\r\\n", () => {
    const h = readerHarness();
    h.feed(Uint8Array.of(...bytes("A "), 0xe2, 0x82, ...bytes(" 1 0\r\nok\n")));
    const [invalid, ok] = h.take();
    // The decoded text may keep its \r (the codec's invalidLineError strips it).
    assert.equal(invalid.replace(/\r$/, ""), "invalid A \uFFFD 1 0");
    assert.equal(ok, "line ok");
  });
  await t.step("without an invalid hook such lines are ignored", () => {
    const h = readerHarness({ invalid: false });
    h.feed(Uint8Array.of(...bad, ...bytes("R k 1\n")));
    assert.deepEqual(h.take(), ["line R k 1"]);
  });
});

Deno.test("LineReader stops the rest of a chunk when accepting() turns false", async (t) => {
  await t.step("valid lines", () => {
    let accepting = true;
    const lines: string[] = [];
    const reader = new LineReader({
      line(text) {
        lines.push(text);
        accepting = false; // the first line closes the connection
      },
      tooLong: () => lines.push("tooLong"),
      accepting: () => accepting,
    }, { maxLineBytes: 100 });
    const chunk = bytes("a\nb\nc\n");
    reader.space().set(chunk);
    reader.commit(chunk.length);
    assert.deepEqual(lines, ["a"]);
  });
  await t.step("invalid lines are not reported either", () => {
    let accepting = true;
    const h = readerHarness({ accepting: () => accepting });
    h.feed(Uint8Array.of(...bytes("a\n"), 0xff, 10));
    assert.deepEqual(h.take(), ["line a", "invalid \uFFFD"]);
    accepting = false;
    h.feed(Uint8Array.of(...bytes("b\n"), 0xff, 10));
    assert.deepEqual(h.take(), []);
  });
});

// ---------------------------------------------------------------------------------------
// LineWriter

/** A fake `write` that records what it is given and resolves when the test says so. */
class FakeWrites {
  /** Every write's bytes, copied when the write was called. */
  raw: Uint8Array[] = [];
  #pending: { size: number; resolve: (n: number) => void; reject: (e: unknown) => void }[] = [];
  /** If set, every write writes at most this many bytes. */
  partial: number | undefined;

  write = (data: Uint8Array): Promise<number> => {
    this.raw.push(data.slice());
    const { promise, resolve, reject } = Promise.withResolvers<number>();
    this.#pending.push({ size: data.length, resolve, reject });
    return promise;
  };

  /** Every write's bytes, decoded. */
  get calls(): string[] {
    return this.raw.map((data) => decoder.decode(data));
  }

  get pending(): number {
    return this.#pending.length;
  }

  /** Completes the oldest write (all of it, or `partial` bytes) and lets the writer go on. */
  async complete(): Promise<void> {
    const write = this.#pending.shift();
    assert.ok(write !== undefined, "no write in flight");
    write.resolve(Math.min(write.size, this.partial ?? Infinity));
    await tick();
  }

  /** Fails the oldest write. */
  async fail(error: unknown): Promise<void> {
    const write = this.#pending.shift();
    assert.ok(write !== undefined, "no write in flight");
    write.reject(error);
    await tick();
  }
}

function writerHarness() {
  const writes = new FakeWrites();
  const written: number[] = [];
  const failures: unknown[] = [];
  const writer = new LineWriter(writes.write, {
    written: (units) => written.push(units),
    failed: (error) => failures.push(error),
  });
  return { writes, written, failures, writer };
}

Deno.test("LineWriter writes the lines queued before a flush in one write", async () => {
  const { writes, written, writer } = writerHarness();
  assert.equal(writer.idle, true);
  writer.push("A k A 1");
  writer.push("R k R");
  writer.push("X é X");
  assert.equal(writer.held, 8 + 6 + 6);
  assert.equal(writer.pending, true);
  assert.equal(writer.idle, false);
  assert.equal(writes.calls.length, 0, "nothing is written before flush()");
  writer.flush();
  assert.deepEqual(writes.calls, ["A k A 1\nR k R\nX é X\n"]);
  assert.equal(writer.pending, false);
  assert.equal(writer.held, 20, "in flight is still held");
  await writes.complete();
  assert.equal(writer.held, 0);
  assert.equal(writer.idle, true);
  assert.deepEqual(written, [20]);
  writer.flush();
  assert.equal(writes.calls.length, 1, "flush() with nothing queued writes nothing");
});

Deno.test("LineWriter keeps one write in flight and continues with what was queued meanwhile", async () => {
  const { writes, written, writer } = writerHarness();
  writer.push("one");
  writer.flush();
  writer.push("two");
  writer.flush();
  writer.push("three");
  writer.flush();
  assert.deepEqual(writes.calls, ["one\n"]);
  assert.equal(writes.pending, 1);
  assert.equal(writer.held, 4 + 4 + 6);
  await writes.complete();
  assert.deepEqual(writes.calls, ["one\n", "two\nthree\n"], "the rest goes out in one write");
  assert.deepEqual(written, [4]);
  assert.equal(writer.held, 10);
  await writes.complete();
  assert.deepEqual(written, [4, 10]);
  assert.equal(writer.held, 0);
  assert.equal(writer.idle, true);
});

Deno.test("LineWriter continues a partial write with the rest of the bytes", async () => {
  const { writes, written, writer } = writerHarness();
  writes.partial = 3;
  const lines = ["A é A 12", "A 😀 T", "R k R"];
  for (const line of lines) writer.push(line);
  writer.flush();
  const expected = lines.join("\n") + "\n";
  const size = bytes(expected).length;
  for (let i = 0; i < Math.ceil(size / 3); i++) await writes.complete();
  assert.equal(writes.pending, 0);
  // Each call is handed the rest, starting where the previous one stopped.
  const all = bytes(expected);
  assert.deepEqual(
    writes.raw,
    Array.from({ length: writes.raw.length }, (_, i) => all.subarray(3 * i)),
  );
  assert.equal(writes.raw.length, Math.ceil(size / 3));
  assert.equal(writer.held, 0);
  assert.deepEqual(written, [expected.length]);
});

Deno.test("LineWriter encodes lines longer than its buffer and multi-byte text exactly", async () => {
  const { writes, writer } = writerHarness();
  const batches = [
    ["é".repeat(300)],
    ["x".repeat(20_000), "😀".repeat(10)],
    ["k"],
    [
      "€".repeat(9000),
    ],
    ["A k A 1"],
    ["R k R", "ascii until the end é"],
    ["y".repeat(511)],
    ["z".repeat(600)],
    [
      "\u007f\u0080",
    ],
  ];
  for (const batch of batches) {
    for (const line of batch) writer.push(line);
    writer.flush();
    await writes.complete();
  }
  assert.deepEqual(writes.calls, batches.map((batch) => batch.join("\n") + "\n"));
  assert.equal(writer.held, 0);
});

Deno.test("LineWriter times the write in flight only when asked to (timed)", async () => {
  const writes = new FakeWrites();
  const timed = new LineWriter(writes.write, { failed: () => {}, timed: true });
  timed.push("H k 1 30");
  const before = performance.now();
  timed.flush();
  assert.ok(timed.busyFor(before + 1_000) >= 999, "busy from the start of the write");
  assert.ok(timed.busyFor(before + 1_000) <= 1_000 + (performance.now() - before));
  await writes.complete();
  assert.equal(timed.busyFor(performance.now() + 1_000), 0, "no write in flight");
});

Deno.test("LineWriter reports a failed write once and ignores later pushes", async () => {
  const { writes, written, failures, writer } = writerHarness();
  writer.push("first");
  writer.flush();
  writer.push("queued meanwhile");
  const error = new Error("connection reset");
  await writes.fail(error);
  assert.deepEqual(failures, [error]);
  assert.deepEqual(written, []);
  assert.equal(writer.pending, false, "what was queued is dropped");
  assert.equal(writer.held, 0, "nothing is held once the writer gave up");
  writer.push("later");
  writer.flush();
  assert.equal(writer.held, 0);
  assert.equal(writer.pending, false);
  assert.deepEqual(writes.calls, ["first\n"]);
  assert.equal(failures.length, 1);
});

Deno.test("LineWriter discard() drops what is queued and writes nothing more", async () => {
  const { writes, written, failures, writer } = writerHarness();
  writer.push("in flight");
  writer.flush();
  writer.push("queued");
  writer.discard();
  assert.equal(writer.pending, false);
  assert.equal(writer.held, 10, "only the write in flight is held");
  await writes.complete();
  assert.equal(writer.held, 0);
  assert.equal(writer.idle, true);
  assert.deepEqual(writes.calls, ["in flight\n"]);
  assert.deepEqual(written, [], "a discarded writer reports nothing");
  assert.deepEqual(failures, []);
  writer.push("after");
  writer.flush();
  assert.deepEqual(writes.calls, ["in flight\n"]);
  assert.equal(writer.held, 0);
});

Deno.test("LineWriter ignores a write failing after discard()", async () => {
  const { writes, failures, writer } = writerHarness();
  writer.push("x");
  writer.flush();
  writer.discard();
  await writes.fail(new Error("closed"));
  assert.deepEqual(failures, [], "the owner closed it: not a failure to report");
  assert.equal(writer.held, 0);
});

// ---------------------------------------------------------------------------------------
// ReplyOrder

interface Entry extends OrderedReply {
  name: string;
}

function entry(name: string, reply?: string): Entry {
  return { name, reply };
}

Deno.test("ReplyOrder sends the replies of one id in request order", () => {
  const order = new ReplyOrder<Entry>();
  const sent: string[] = [];
  const send = (e: Entry) => sent.push(`${e.name}: ${e.reply}`);
  assert.equal(order.has("k"), false);
  const first = entry("a1");
  order.push("k", first);
  order.push("k", entry("a2", "A k E bad lease"));
  order.push("j", entry("b1", "A j A 3"));
  assert.equal(order.has("k"), true);
  order.drain("k", send);
  assert.deepEqual(sent, [], "an undecided head blocks every later entry");
  order.drain("j", send);
  assert.deepEqual(sent, ["b1: A j A 3"], "other ids are not blocked");
  assert.equal(order.has("j"), false, "an id with nothing left is forgotten");
  first.reply = "A k A 7";
  order.drain("k", send);
  assert.deepEqual(sent, ["b1: A j A 3", "a1: A k A 7", "a2: A k E bad lease"]);
  assert.equal(order.has("k"), false);
  order.drain("unknown", send);
  assert.equal(sent.length, 3);
});

Deno.test("ReplyOrder stops at the next undecided entry", () => {
  const order = new ReplyOrder<Entry>();
  const sent: string[] = [];
  const e = [entry("1", "r1"), entry("2"), entry("3", "r3"), entry("4")];
  for (const x of e) order.push("k", x);
  order.drain("k", (x) => sent.push(x.name));
  assert.deepEqual(sent, ["1"]);
  e[3].reply = "r4";
  order.drain("k", (x) => sent.push(x.name));
  assert.deepEqual(sent, ["1"], "4 is decided but 2 is not");
  e[1].reply = "r2";
  order.drain("k", (x) => sent.push(x.name));
  assert.deepEqual(sent, ["1", "2", "3", "4"]);
  assert.equal(order.has("k"), false);
});

Deno.test("ReplyOrder keeps order over many entries decided one by one", () => {
  // Enough entries for the queue to compact its storage on the way.
  const order = new ReplyOrder<Entry>();
  const all = Array.from({ length: 5000 }, (_, i) => entry(String(i)));
  const sent: string[] = [];
  for (const x of all.slice(0, 3000)) order.push("k", x);
  for (let i = 0; i < all.length; i++) {
    if (i + 3000 < all.length) order.push("k", all[i + 3000]);
    all[i].reply = `r${i}`;
    order.drain("k", (x) => sent.push(x.name));
    assert.equal(sent.length, i + 1);
  }
  assert.deepEqual(sent, all.map((x) => x.name));
  assert.equal(order.has("k"), false);
});

Deno.test("ReplyOrder entries() lists every waiting entry per id in order, clear() forgets them", () => {
  const order = new ReplyOrder<Entry>();
  order.push("k", entry("k1", "done"));
  order.push("k", entry("k2"));
  order.push("j", entry("j1"));
  order.push("k", entry("k3", "held"));
  const names = [...order.entries()].map((x) => x.name);
  assert.deepEqual(names.filter((n) => n.startsWith("k")), ["k1", "k2", "k3"]);
  assert.deepEqual(names.filter((n) => n.startsWith("j")), ["j1"]);
  order.drain("k", () => {});
  assert.deepEqual([...order.entries()].map((x) => x.name).sort(), ["j1", "k2", "k3"]);
  order.clear();
  assert.deepEqual([...order.entries()], []);
  assert.equal(order.has("k"), false);
  assert.equal(order.has("j"), false);
});

// ---------------------------------------------------------------------------------------
// Batch

Deno.test("Batch flushes each added item once at the end of the batch, in a microtask", async () => {
  const batch = new Batch();
  const log: string[] = [];
  const item = (name: string) => ({ flush: () => log.push(`flush ${name}`) });
  const a = item("a");
  const b = item("b");
  setTimeout(() => log.push("next turn"), 0);
  batch.add(a);
  batch.add(b);
  assert.deepEqual(log, [], "nothing is flushed synchronously");
  await Promise.resolve();
  assert.deepEqual(log, ["flush a", "flush b"], "flushed in a microtask of this turn");
  await tick();
  assert.deepEqual(log, ["flush a", "flush b", "next turn"]);
  batch.add(a);
  await tick();
  assert.deepEqual(log.slice(3), ["flush a"], "a later batch flushes again, only what was added");
});

Deno.test("Batch runs its hooks after the flushes, until removed", async () => {
  const batch = new Batch();
  const log: string[] = [];
  const removeFirst = batch.onEnd(() => log.push("hook 1"));
  batch.onEnd(() => log.push("hook 2"));
  batch.add({ flush: () => log.push("flush") });
  await tick();
  assert.deepEqual(log, ["flush", "hook 1", "hook 2"]);
  batch.soon();
  batch.soon();
  await tick();
  assert.deepEqual(log.slice(3), ["hook 1", "hook 2"], "soon() ends one batch, items or not");
  removeFirst();
  batch.soon();
  await tick();
  assert.deepEqual(log.slice(5), ["hook 2"]);
});

Deno.test("Batch flushes an item added during a flush in a following batch of the same turn", async () => {
  const batch = new Batch();
  const log: string[] = [];
  const late = { flush: () => log.push("flush late") };
  batch.onEnd(() => log.push("end"));
  batch.add({
    flush: () => {
      log.push("flush early");
      batch.add(late);
    },
  });
  setTimeout(() => log.push("next turn"), 0);
  await tick();
  assert.deepEqual(log, ["flush early", "end", "flush late", "end", "next turn"]);
});

Deno.test("Batch end() ends the batch at once", () => {
  const batch = new Batch();
  const log: string[] = [];
  batch.onEnd(() => log.push("end"));
  batch.end();
  batch.add({ flush: () => log.push("flush") });
  batch.end();
  assert.deepEqual(log, ["end", "flush", "end"]);
});

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
  const gate = { position: () => 5, reached: () => reached, wait() {} };
  const socket = new LineSocket(stream, "10.0.0.9:5555", { line() {}, closed() {} }, {
    batch: new Batch(),
    log: recordingLog(),
    replies: gate,
  });
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
