/**
 * `LineReader` with `initialBytes` (client/line_reader.ts): an idle connection keeps a small
 * read buffer, a read that fills it grows it to the full size, a run of small reads shrinks
 * it back, and no byte is lost or reordered across a resize. Socket-free.
 */

import assert from "node:assert/strict";
import { LineReader } from "../client/line_reader.ts";

const encoder = new TextEncoder();

function reader(initialBytes = 256) {
  const lines: string[] = [];
  let tooLong = 0;
  const r = new LineReader({
    line: (text) => lines.push(text),
    tooLong: () => tooLong++,
    accepting: () => true,
  }, { maxLineBytes: 4096, initialBytes });
  /** Feeds `text` as reads of at most the free space each; returns the buffer sizes seen. */
  const feed = (text: string): number[] => {
    const bytes = encoder.encode(text);
    const sizes: number[] = [];
    let at = 0;
    while (at < bytes.length) {
      const space = r.space();
      const n = Math.min(space.length, bytes.length - at);
      space.set(bytes.subarray(at, at + n));
      at += n;
      r.commit(n);
      sizes.push(r.bufferBytes);
    }
    return sizes;
  };
  return { r, lines, feed, tooLong: () => tooLong };
}

Deno.test("LineReader starts at initialBytes and grows to the full buffer when a read fills it", () => {
  const { r, lines, feed } = reader(256);
  assert.equal(r.bufferBytes, 256);
  feed("A k 30 0\n");
  assert.equal(r.bufferBytes, 256, "a small read keeps the small buffer");
  // 100 lines of 20 bytes: the first read fills 256 bytes, then the buffer is full size.
  const batch = Array.from({ length: 100 }, (_, i) => `A key-${String(i).padStart(4, "0")} 30 0`);
  const sizes = feed(batch.map((l) => l + "\n").join(""));
  assert.equal(sizes[0], 16 * 1024, "grown after the first full read");
  assert.deepEqual(lines, ["A k 30 0", ...batch], "every line, in order, across the resize");
});

Deno.test("LineReader keeps an unfinished line across a resize and still enforces the limit", () => {
  const { lines, feed, tooLong } = reader(128);
  const long = "A " + "k".repeat(3000) + " 30 0";
  feed(long + "\nR x 1\n");
  assert.deepEqual(lines, [long, "R x 1"]);
  assert.equal(tooLong(), 0);
  const over = reader(128);
  over.feed("A " + "k".repeat(5000) + " 30 0\n");
  assert.equal(over.tooLong(), 1, "a line over maxLineBytes is still refused");
});

Deno.test("LineReader shrinks back to initialBytes after a run of small reads", () => {
  const { r, lines, feed } = reader(256);
  feed("x".repeat(300) + "\n"); // fills the small buffer: grows
  assert.equal(r.bufferBytes, 16 * 1024);
  for (let i = 0; i < 63; i++) feed(`R k ${i}\n`);
  assert.equal(r.bufferBytes, 16 * 1024, "not before 64 quiet reads");
  feed("R k 63\n");
  assert.equal(r.bufferBytes, 256, "quiet: back to the small buffer");
  feed("R k 64\n");
  assert.equal(lines.length, 66);
  assert.equal(lines.at(-1), "R k 64");
});

Deno.test("LineReader without initialBytes keeps one full-size buffer", () => {
  const r = new LineReader({ line: () => {}, tooLong: () => {}, accepting: () => true }, {
    maxLineBytes: 4096,
  });
  assert.equal(r.bufferBytes, 16 * 1024);
});
