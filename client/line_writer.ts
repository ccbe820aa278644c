/**
 * Batched line output for one connection, shared by the server's sockets and the client's
 * TCP transport: lines queued between two flushes go out in one write, encoded into a
 * buffer the connection reuses, with at most one write in flight. It counts what it holds
 * (in UTF-16 units, the cost of the strings) so its owner can bound it. When to flush is
 * the owner's choice: the server at the end of a batch, the client once per turn.
 *
 * @module
 */

import { utf8Length } from "./codec/fields.ts";

/** Where a {@linkcode LineWriter} writes: a socket's `write`, which may write part of it. */
export type WriteBytes = (data: Uint8Array) => Promise<number>;

/** Callbacks of {@linkcode LineWriter}. */
export interface LineWriterEvents {
  /** A write finished; `units` of output are no longer held. */
  written?(units: number): void;
  /** A write failed (the connection is gone); nothing more is written. */
  failed(error: unknown): void;
}

/** Smallest output buffer: above V8's 64-byte limit for arrays kept inside its heap. */
const BUFFER_MIN = 256;
/** Output buffers up to this size are kept for the next write. */
const BUFFER_KEEP = 16 * 1024;
const encoder = new TextEncoder();

/** Queues lines and writes them in batches. */
export class LineWriter {
  #write: WriteBytes;
  #events: LineWriterEvents;
  #out: string[] = [];
  /** UTF-16 units in #out (not yet handed to a write). */
  #outUnits = 0;
  /** UTF-16 units queued or in flight. */
  #held = 0;
  /** Reused output buffer; null until the first write or after a big one. */
  #buf: Uint8Array | null = null;
  #writing = false;
  /** When the write in flight began (`performance.now()`), while one is. */
  #writingSince = 0;
  #failed = false;

  /** @param write Writes bytes. @param events What to tell the owner. */
  constructor(write: WriteBytes, events: LineWriterEvents) {
    this.#write = write;
    this.#events = events;
  }

  /** UTF-16 units of output queued or in flight: the memory it holds. */
  get held(): number {
    return this.#held;
  }

  /** Whether nothing is queued or in flight. */
  get idle(): boolean {
    return !this.#writing && this.#out.length === 0;
  }

  /** Whether lines are queued that no write has taken yet. */
  get pending(): boolean {
    return this.#out.length > 0;
  }

  /**
   * How long the write in flight has been going on, in ms (0 when none is): a long one means
   * the other side does not read.
   */
  busyFor(now: number): number {
    return this.#writing ? now - this.#writingSince : 0;
  }

  /** Queues one line (without `\n`); it goes out at the next {@linkcode flush}. */
  push(line: string): void {
    if (this.#failed) return;
    this.#out.push(line);
    this.#outUnits += line.length + 1;
    this.#held += line.length + 1;
  }

  /** Starts writing what is queued, unless a write is in flight (it continues after it). */
  flush(): void {
    if (this.#writing || this.#failed || this.#out.length === 0) return;
    const data = this.#encode(
      this.#out.length === 1 ? this.#out[0] + "\n" : this.#out.join("\n") + "\n",
    );
    const units = this.#outUnits;
    this.#out = [];
    this.#outUnits = 0;
    this.#writing = true;
    this.#writingSince = performance.now();
    this.#send(data, units);
  }

  /** Drops what is queued and writes nothing more. */
  discard(): void {
    this.#failed = true;
    this.#held -= this.#outUnits;
    this.#out = [];
    this.#outUnits = 0;
    this.#buf = null;
  }

  async #send(data: Uint8Array, units: number): Promise<void> {
    try {
      let offset = 0;
      while (offset < data.length) {
        offset += await this.#write(offset === 0 ? data : data.subarray(offset));
      }
    } catch (error) {
      this.#writing = false;
      this.#held -= units;
      if (!this.#failed) {
        this.discard();
        this.#events.failed(error);
      }
      return;
    }
    this.#writing = false;
    this.#held -= units;
    if (this.#failed) return;
    this.flush();
    this.#events.written?.(units);
  }

  /**
   * Encodes `text` into the reused buffer rather than a fresh array per write. At most one
   * write is in flight, so one buffer is enough; it is kept only while small.
   */
  #encode(text: string): Uint8Array {
    let buf = this.#buf;
    if (buf === null || buf.length < text.length) {
      buf = new Uint8Array(Math.max(BUFFER_MIN, text.length));
    }
    let { read, written } = encoder.encodeInto(text, buf);
    if (read < text.length) {
      buf = new Uint8Array(utf8Length(text));
      written = encoder.encodeInto(text, buf).written;
    }
    this.#buf = buf.length <= BUFFER_KEEP ? buf : null;
    return buf.subarray(0, written);
  }
}
