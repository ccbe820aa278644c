/**
 * Line framing of a byte stream (docs/protocol.md, "Framing"), shared by the server's
 * sockets and the client's TCP transport. Pure: the caller reads into {@linkcode
 * LineReader.space} and reports the count to {@linkcode LineReader.commit}; complete lines
 * come out with one native search and one UTF-8 decode per chunk, without their `\n` or
 * `\r\n`. A partial line stays in the buffer for the next read, so nothing is copied twice.
 *
 * @module
 */

import { utf8Length } from "./codec/fields.ts";

/** Why a plain connection closed when the node answered with a TLS record. */
export const SPOKE_TLS = "the node answered in TLS: use a tls:// address";

/**
 * Whether `bytes` (the first bytes a connection received) begin a TLS record, an alert or a
 * handshake (content type 21 or 22, version 3.x): what a TLS port answers a plain-text line.
 */
export function startsTlsRecord(bytes: Uint8Array): boolean {
  return bytes.length >= 2 && (bytes[0] === 0x15 || bytes[0] === 0x16) && bytes[1] === 0x03;
}

/**
 * `message` (a TLS handshake's error), with a hint when it says the node answered in plain
 * text (a `tls://` address of a node without TLS).
 */
export function plainAnswerHint(message: string): string {
  return /InvalidContentType|wrong version number/i.test(message)
    ? `${message}: the node may not speak TLS (use host:port)`
    : message;
}

/** Where a {@linkcode LineReader} delivers what it finds. */
export interface LineSink {
  /** One line, without its line ending, never empty. */
  line(text: string): void;
  /**
   * A line that is not valid UTF-8, decoded with replacement characters (U+FFFD) so its
   * fields can be echoed. Without this hook such lines are ignored.
   */
  invalid?(decoded: string): void;
  /** A line is longer than the limit: the reader has stopped; the caller closes. */
  tooLong(): void;
  /** Whether more lines are wanted now (false stops the rest of the chunk). */
  accepting(): boolean;
}

/** Options of {@linkcode LineReader}. */
export interface LineReaderOptions {
  /** Longest line in bytes, without its line ending. */
  maxLineBytes: number;
  /** Bytes read at once. Default 16 KiB; at least twice `maxLineBytes`. */
  bufferBytes?: number;
  /**
   * Start with a buffer of this many bytes and grow to `bufferBytes` only when reads fill it
   * or a line needs the room, shrinking back when the connection goes quiet: an idle
   * connection then costs this much instead of the full buffer. Default: `bufferBytes` (no
   * growth).
   */
  initialBytes?: number;
}

/** Chunks up to this many bytes are decoded in JavaScript when they are ASCII. */
const SHORT_ASCII = 512;

/**
 * The text of `bytes` if they are all ASCII, else `undefined`: for the short chunks of
 * unpipelined requests this is cheaper than a call into the runtime's decoder.
 */
function asciiText(bytes: Uint8Array): string | undefined {
  const n = bytes.length;
  if (n <= TINY_ASCII) {
    // One request's line: a plain loop, which stays cheap when the caches are cold (one read
    // per wake), where `apply` over a typed array takes the runtime's generic path.
    let text = "";
    for (let i = 0; i < n; i++) {
      const b = bytes[i];
      if (b > 0x7f) return undefined;
      text += String.fromCharCode(b);
    }
    return text;
  }
  for (let i = 0; i < n; i++) if (bytes[i] > 0x7f) return undefined;
  return String.fromCharCode.apply(null, bytes as unknown as number[]);
}

/** Chunks up to this many bytes are decoded by the plain loop of {@linkcode asciiText}. */
const TINY_ASCII = 64;

/**
 * The index of the last `\n` in `buf[from, end)`, or -1: a read usually ends with one, so
 * the loop mostly stops at once, where the built-in `lastIndexOf` costs a call.
 */
function lastNewlineIn(buf: Uint8Array, from: number, end: number): number {
  for (let i = end - 1; i >= from; i--) if (buf[i] === 10) return i;
  return -1;
}

/** Reads in a row that leave most of a grown buffer unused before it shrinks back. */
const SHRINK_AFTER = 64;

// ignoreBOM: a U+FEFF at the start of a chunk is part of the line, as anywhere else.
const strict = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const lenient = new TextDecoder("utf-8", { ignoreBOM: true });

/** Splits the bytes of one connection into lines. */
export class LineReader {
  #sink: LineSink;
  #max: number;
  #buf: Uint8Array;
  /** The size the buffer grows to. */
  #full: number;
  /** The size it starts at and shrinks back to. */
  #small: number;
  /** Reads in a row that used less than a small buffer's worth of a grown one. */
  #quiet = 0;
  /** Bytes of an unfinished line at the start of the buffer. */
  #kept = 0;
  #stopped = false;

  /** @param sink Receives lines. @param options The line limit and buffer sizes. */
  constructor(sink: LineSink, options: LineReaderOptions) {
    this.#sink = sink;
    this.#max = options.maxLineBytes;
    this.#full = Math.max(options.bufferBytes ?? 16 * 1024, 2 * this.#max + 2);
    this.#small = Math.min(this.#full, Math.max(64, options.initialBytes ?? this.#full));
    this.#buf = new Uint8Array(this.#small);
  }

  /** The buffer's current size in bytes (it grows under load and shrinks when quiet). */
  get bufferBytes(): number {
    return this.#buf.length;
  }

  /** The free part of the buffer: read the next bytes into it. */
  space(): Uint8Array {
    return this.#kept === 0 ? this.#buf : this.#buf.subarray(this.#kept);
  }

  /**
   * Takes `n` bytes just read into {@linkcode space} and delivers the complete lines.
   * Returns `false` once a line was too long (the reader is then done).
   */
  commit(n: number): boolean {
    if (this.#stopped) return false;
    // A read of 0 bytes (not the end of the stream): nothing new. Searching from `end - 1`
    // with an empty buffer would search the whole buffer and replay the previous lines.
    if (n === 0) return true;
    const buf = this.#buf;
    const end = this.#kept + n;
    const filled = end === buf.length;
    const lastNewline = lastNewlineIn(buf, this.#kept, end);
    if (lastNewline < this.#kept) {
      this.#kept = end;
      if (filled) this.#resize(this.#full);
      return this.#checkKept();
    }
    this.#lines(buf.subarray(0, lastNewline));
    const kept = end - lastNewline - 1;
    if (kept > 0) buf.copyWithin(0, lastNewline + 1, end);
    this.#kept = kept;
    if (filled) this.#resize(this.#full);
    else if (buf.length > this.#small) this.#maybeShrink(end);
    return !this.#stopped && this.#checkKept();
  }

  /** A read that filled the buffer grows it; a run of small reads shrinks it back. */
  #maybeShrink(end: number): void {
    if (end > this.#small || this.#kept > 0) {
      this.#quiet = 0;
      return;
    }
    if (++this.#quiet >= SHRINK_AFTER) this.#resize(this.#small);
  }

  #resize(size: number): void {
    this.#quiet = 0;
    if (size === this.#buf.length) return;
    const next = new Uint8Array(size);
    if (this.#kept > 0) next.set(this.#buf.subarray(0, this.#kept));
    this.#buf = next;
  }

  /** An unfinished line longer than the limit (plus room for its `\r`) cannot end well. */
  #checkKept(): boolean {
    if (this.#kept > this.#max + 1) this.#tooLong();
    return !this.#stopped;
  }

  #tooLong(): void {
    this.#stopped = true;
    this.#sink.tooLong();
  }

  /** Delivers complete lines (`bytes` ends just before a `\n`). */
  #lines(bytes: Uint8Array): void {
    let text: string | undefined = bytes.length <= SHORT_ASCII ? asciiText(bytes) : undefined;
    if (text === undefined) {
      try {
        text = strict.decode(bytes);
      } catch {
        this.#linesOneByOne(bytes);
        return;
      }
    }
    let start = 0;
    for (;;) {
      const nl = text.indexOf("\n", start);
      const line = nl < 0 ? text.slice(start) : text.slice(start, nl);
      if (!this.#line(line)) return;
      if (nl < 0) return;
      start = nl + 1;
    }
  }

  /** Slow path for a chunk that is not valid UTF-8: find the bad line(s). */
  #linesOneByOne(bytes: Uint8Array): void {
    let start = 0;
    while (start <= bytes.length) {
      let nl = bytes.indexOf(10, start);
      if (nl < 0) nl = bytes.length;
      const length = nl - start - (nl > start && bytes[nl - 1] === 13 ? 1 : 0);
      if (length > this.#max) {
        this.#tooLong();
        return;
      }
      const raw = bytes.subarray(start, nl);
      let line: string;
      try {
        line = strict.decode(raw);
      } catch {
        line = "";
        if (this.#sink.accepting()) this.#sink.invalid?.(lenient.decode(raw));
      }
      if (line !== "" && !this.#line(line)) return;
      start = nl + 1;
    }
  }

  /** One line; returns false when no more input is to be handled. */
  #line(line: string): boolean {
    if (this.#stopped || !this.#sink.accepting()) return false;
    if (line.length > 0 && line.charCodeAt(line.length - 1) === 13) line = line.slice(0, -1);
    if (line.length === 0) return true;
    // Fewer UTF-16 units than bytes: measure bytes only when the units could be over.
    if (line.length > this.#max || (line.length * 3 > this.#max && utf8Length(line) > this.#max)) {
      this.#tooLong();
      return false;
    }
    this.#sink.line(line);
    return true;
  }
}
