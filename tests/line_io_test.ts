/**
 * Unit tests of the line I/O pieces of the request path, without sockets: the line framing
 * ({@linkcode LineReader}) and batched output ({@linkcode LineWriter}) over a fake `write`
 * whose calls the test captures (and completes, when it wants).
 * Reply order per id and the server's end of batch: line_io_order_test.ts; the server's
 * `LineSocket` over a fake byte stream: line_io_socket_test.ts.
 *
 * @module
 */

import assert from "node:assert/strict";
import { LineReader, type LineSink } from "../client/line_reader.ts";
import { LineWriter } from "../client/line_writer.ts";
import { bytes, decoder, tick } from "./_line_io.ts";

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

Deno.test("LineWriter writes through writeNow at once when the sink takes it all, else through write", async () => {
  const now: string[] = [];
  const later: string[] = [];
  let room = Infinity;
  let written = 0;
  const sink = {
    writeNow(data: Uint8Array): number | undefined {
      if (room === 0) return undefined;
      const n = Math.min(room, data.length);
      now.push(decoder.decode(data.subarray(0, n)));
      return n;
    },
    write(data: Uint8Array): Promise<number> {
      later.push(decoder.decode(data));
      return Promise.resolve(data.length);
    },
  };
  const writer = new LineWriter(sink, { written: () => written++, failed: () => {} });
  writer.push("A k A 1");
  writer.flush();
  // Synchronous: done before any job runs, nothing held.
  assert.deepEqual(now, ["A k A 1\n"]);
  assert.equal(written, 1);
  assert.equal(writer.held, 0);
  assert.ok(writer.idle);
  // Part of it now, the rest through write.
  room = 3;
  writer.push("R k R");
  writer.flush();
  assert.deepEqual(now, ["A k A 1\n", "R k"]);
  assert.equal(writer.idle, false);
  await tick();
  assert.deepEqual(later, [" R\n"]);
  assert.equal(written, 2);
  // No room at all: all of it through write; a peer link's writer (timed) never uses writeNow.
  room = 0;
  writer.push("x");
  writer.flush();
  await tick();
  assert.deepEqual(later, [" R\n", "x\n"]);
  room = Infinity;
  const peer = new LineWriter(sink, { failed: () => {}, timed: true });
  peer.push("y");
  peer.flush();
  await tick();
  assert.deepEqual(later, [" R\n", "x\n", "y\n"]);
  assert.deepEqual(now, ["A k A 1\n", "R k"]);
});
