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

/** A socket a {@linkcode LineWriter} writes to itself (no closure per connection). */
export interface ByteSink {
  /** Writes some of `data`; resolves with how much. */
  write(data: Uint8Array): Promise<number>;
  /**
   * Writes some of `data` at once if the socket can (the server's epoll transport): how much,
   * or `undefined` to go through {@linkcode write} (no room now, or an error it will report).
   */
  writeNow?(data: Uint8Array): number | undefined;
}

/** Callbacks of {@linkcode LineWriter}. */
export interface LineWriterEvents {
  /** A write finished; `units` of output are no longer held. */
  written?(units: number): void;
  /** A write failed (the connection is gone); nothing more is written. */
  failed(error: unknown): void;
  /**
   * Whether {@linkcode LineWriter.busyFor} is asked (a peer link's stall check): only then
   * does each write read the clock when it starts.
   */
  timed?: boolean;
}

/** Texts up to this many UTF-16 units are encoded in JavaScript when they are ASCII. */
const SHORT_TEXT = 512;

/**
 * Writes `text` into `buf` if it is all ASCII and fits, returning the byte count, else -1:
 * for the short batches of unpipelined replies this is cheaper than a call into the
 * runtime's encoder.
 */
function asciiInto(text: string, buf: Uint8Array): number {
  const n = text.length;
  if (n > buf.length) return -1;
  for (let i = 0; i < n; i++) {
    const c = text.charCodeAt(i);
    if (c > 0x7f) return -1;
    buf[i] = c;
  }
  return n;
}

/**
 * Output buffers are borrowed from one pool shared by every writer for the time of a write,
 * so an idle connection holds none, and a busy one allocates none.
 */
const POOLED_BYTES = 4096;
/** Buffers the pool keeps at most. */
const POOL_MAX = 256;
const pool: Uint8Array[] = [];
const encoder = new TextEncoder();

/** What {@linkcode LineWriter.end}'s callback becomes once called. */
const ENDED = () => {};

/** Queues lines and writes them in batches. */
export class LineWriter {
  #sink: ByteSink;
  #events: LineWriterEvents;
  #out: string[] = [];
  /** UTF-16 units in #out (not yet handed to a write). */
  #outUnits = 0;
  /** UTF-16 units queued or in flight. */
  #held = 0;
  #writing = false;
  /** The pooled buffer of the write in flight, if it uses one. */
  #lent: Uint8Array | null = null;
  /** When the write in flight began (`performance.now()`), while one is. */
  #writingSince = 0;
  #failed = false;
  /** Set by {@linkcode end}: called once the last write is done (then a no-op). */
  #shut: (() => void) | undefined;

  /** @param sink Writes bytes: a socket, or a function. @param events What to tell the owner. */
  constructor(sink: ByteSink | WriteBytes, events: LineWriterEvents) {
    this.#sink = typeof sink === "function" ? { write: sink } : sink;
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
   * the other side does not read. Needs the `timed` option.
   */
  busyFor(now: number): number {
    return this.#writing ? now - this.#writingSince : 0;
  }

  /** Queues one line (without `\n`); it goes out at the next {@linkcode flush}. */
  push(line: string): void {
    if (this.#failed || this.#shut !== undefined) return;
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
    this.#out.length = 0;
    this.#outUnits = 0;
    this.#writing = true;
    if (this.#events.timed) this.#writingSince = performance.now();
    // A peer link (timed) keeps the asynchronous path: its `written` moves the server's batch.
    const now = this.#events.timed ? undefined : this.#sink.writeNow?.(data);
    if (now === data.length) {
      // All of it went out: no promise, no job (the epoll transport's common case).
      this.#giveBack();
      this.#writing = false;
      this.#held -= units;
      this.#events.written?.(units);
      if (this.#shut !== undefined) this.#shutIfIdle();
      return;
    }
    this.#send(now === undefined || now === 0 ? data : data.subarray(now), units);
  }

  /**
   * Writes what is queued, takes no more lines, and calls `shut` once no write is in flight
   * (a half-close: the sending side may close then). Not called if a write fails.
   */
  end(shut: () => void): void {
    if (this.#failed || this.#shut !== undefined) return;
    this.#shut = shut;
    this.flush();
    this.#shutIfIdle();
  }

  #shutIfIdle(): void {
    const shut = this.#shut;
    if (shut === undefined || shut === ENDED || this.#writing) return;
    this.#shut = ENDED;
    shut();
  }

  /** Drops what is queued and writes nothing more. */
  discard(): void {
    this.#failed = true;
    this.#held -= this.#outUnits;
    this.#out = [];
    this.#outUnits = 0;
  }

  async #send(data: Uint8Array, units: number): Promise<void> {
    try {
      let offset = 0;
      while (offset < data.length) {
        offset += await this.#sink.write(offset === 0 ? data : data.subarray(offset));
      }
    } catch (error) {
      this.#writing = false;
      this.#held -= units;
      this.#giveBack();
      if (!this.#failed) {
        this.discard();
        this.#events.failed(error);
      }
      return;
    }
    this.#giveBack();
    this.#writing = false;
    this.#held -= units;
    if (this.#failed) return;
    this.flush();
    this.#events.written?.(units);
    if (this.#shut !== undefined) this.#shutIfIdle();
  }

  /** Encodes `text` into a buffer borrowed from the pool (or a fresh one for a big text). */
  #encode(text: string): Uint8Array {
    if (text.length <= POOLED_BYTES) {
      const buf = pool.pop() ?? new Uint8Array(POOLED_BYTES);
      const ascii = text.length <= SHORT_TEXT ? asciiInto(text, buf) : -1;
      if (ascii >= 0) {
        this.#lent = buf;
        return buf.subarray(0, ascii);
      }
      const { read, written } = encoder.encodeInto(text, buf);
      if (read === text.length) {
        this.#lent = buf;
        return buf.subarray(0, written);
      }
      // More bytes than units (non-ASCII): this text needs a buffer of its own.
      pool.push(buf);
    }
    const own = new Uint8Array(utf8Length(text));
    encoder.encodeInto(text, own);
    return own;
  }

  /** The write in flight is over: its pooled buffer goes back. */
  #giveBack(): void {
    if (this.#lent !== null && pool.length < POOL_MAX) pool.push(this.#lent);
    this.#lent = null;
  }
}
