/**
 * Socket I/O for one TCP connection: reads in chunks into a reused buffer, splits lines with
 * one native search and one UTF-8 decode per chunk, hands each line to its handler, and
 * writes all replies produced in one turn of the event loop with a single write.
 *
 * Limits (SPEC §2 and issue #2): a line over 4096 bytes is answered `- - E line too long`
 * and the connection is closed; queued output is capped: past a high-water mark the
 * connection stops reading (back-pressure), past a hard cap it is dropped, so a client that
 * never reads cannot grow the server's memory.
 *
 * @module
 */

import { MAX_LINE_BYTES, utf8Length } from "../client/codec.ts";

/** What a connection does with its input. Can be swapped (e.g. after a peer handshake). */
export interface LineHandler {
  /** One line, without its line ending (`\n` or `\r\n`), never empty. */
  line(text: string): void;
  /** The connection is closed (by either side); called exactly once. */
  closed(): void;
  /**
   * A line that is not valid UTF-8, decoded with replacement characters (U+FFFD) so its
   * fields can be echoed. Without this hook such lines are ignored.
   */
  invalid?(text: string): void;
}

/** Tunables of {@linkcode Connection}. */
export interface ConnectionOptions {
  /** Stop reading while this many bytes wait to be written. Default 256 KiB. */
  pauseAtBytes?: number;
  /** Drop the connection when this many bytes wait to be written. Default 4 MiB. */
  dropAtBytes?: number;
}

/** Ends the batch: called once per event-loop turn in which replies were queued. */
export type BatchEnd = () => void;

const READ_SIZE = 16 * 1024;
/** Smallest output buffer: above V8's 64-byte limit for arrays kept inside its heap. */
const WRITE_BUFFER_MIN = 256;
/** Output buffers up to this size are kept for the next write. */
const WRITE_BUFFER_KEEP = 16 * 1024;
const CLOSE_GRACE_MS = 2000;
const encoder = new TextEncoder();
// ignoreBOM: a U+FEFF at the start of a chunk is part of the line, as anywhere else.
const decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const lenient = new TextDecoder("utf-8", { ignoreBOM: true });

let dirty: Connection[] = [];
let batchEnds: BatchEnd[] = [];
let flushQueued = false;

function flushAll(): void {
  flushQueued = false;
  const list = dirty;
  dirty = [];
  for (const conn of list) conn.flush();
  for (const end of batchEnds) end();
}

/** Runs `end` after every batch of lines or timer work (e.g. re-arming the lease timer). */
export function onBatchEnd(end: BatchEnd): () => void {
  batchEnds.push(end);
  return () => {
    batchEnds = batchEnds.filter((e) => e !== end);
  };
}

/** Schedules the end-of-batch work (flush queued replies) for the current turn. */
export function endBatchSoon(): void {
  if (!flushQueued) {
    flushQueued = true;
    queueMicrotask(flushAll);
  }
}

/** A line-oriented TCP connection with batched, bounded output. */
export class Connection {
  /** Where input lines go. */
  handler: LineHandler;
  /** The peer's address, as `host:port`. */
  readonly remote: string;
  #conn: Deno.Conn;
  #out: string[] = [];
  /** Reused output buffer (see #encode); null until the first write or after a big one. */
  #wbuf: Uint8Array | null = null;
  /** UTF-16 units of output not yet written (queued plus in flight): the memory it holds. */
  #queuedUnits = 0;
  /** UTF-16 units in #out (not yet handed to a write). */
  #outUnits = 0;
  #writing = false;
  #dirty = false;
  #closed = false;
  #closing = false;
  #resume: (() => void) | null = null;
  #pauseAt: number;
  #dropAt: number;
  #done: Promise<void>;
  #graceTimer: ReturnType<typeof setTimeout> | undefined;
  #markClosed!: () => void;
  #whenClosed = new Promise<void>((resolve) => this.#markClosed = resolve);

  /**
   * Starts reading `conn` at once.
   *
   * @param conn An accepted or connected TCP connection.
   * @param handler Receives lines and the close.
   * @param options Output limits.
   */
  constructor(conn: Deno.Conn, handler: LineHandler, options?: ConnectionOptions) {
    this.#conn = conn;
    this.handler = handler;
    this.#pauseAt = options?.pauseAtBytes ?? 256 * 1024;
    this.#dropAt = options?.dropAtBytes ?? 4 * 1024 * 1024;
    const addr = conn.remoteAddr as Deno.NetAddr;
    this.remote = `${addr.hostname}:${addr.port}`;
    try {
      (conn as Deno.TcpConn).setNoDelay?.(true);
    } catch {
      // Not a TCP socket (tests may pass other kinds): nothing to tune.
    }
    this.#done = this.#readLoop();
  }

  /** Resolves when the connection is closed and its handler was told. */
  get done(): Promise<void> {
    return this.#done;
  }

  /** Whether the connection is closed or closing. */
  get closed(): boolean {
    return this.#closed || this.#closing;
  }

  /** Queues one line (without `\n`) to be written at the end of this batch. */
  send(line: string): void {
    if (this.#closed) return;
    this.#out.push(line);
    this.#outUnits += line.length + 1;
    this.#queuedUnits += line.length + 1;
    if (this.#queuedUnits > this.#dropAt) {
      console.error(`lockd: dropping ${this.remote}: it does not read its replies`);
      this.close();
      return;
    }
    if (!this.#dirty) {
      this.#dirty = true;
      dirty.push(this);
      endBatchSoon();
    }
  }

  /**
   * Counts `units` (UTF-16 units; negative to give back) of replies the session holds in
   * memory for this connection, so pausing and dropping cover them as well.
   */
  hold(units: number): void {
    this.#queuedUnits += units;
    if (units > 0 && this.#queuedUnits > this.#dropAt) {
      console.error(`lockd: dropping ${this.remote}: too many replies held for it`);
      this.close();
    }
  }

  /** Writes whatever is queued (called at the end of a batch). */
  flush(): void {
    this.#dirty = false;
    if (this.#writing || this.#closed || this.#out.length === 0) return;
    const data = this.#encode(this.#out.join("\n") + "\n");
    const units = this.#outUnits;
    this.#out = [];
    this.#outUnits = 0;
    this.#writing = true;
    this.#write(data, units);
  }

  /**
   * Encodes `text` into the connection's reused output buffer rather than a fresh array per
   * write (`TextEncoder.encode`). At most one write is in flight per connection, so one
   * buffer per connection is enough; it is kept only while small.
   */
  #encode(text: string): Uint8Array {
    let buf = this.#wbuf;
    if (buf === null || buf.length < text.length) {
      buf = new Uint8Array(Math.max(WRITE_BUFFER_MIN, text.length));
    }
    let { read, written } = encoder.encodeInto(text, buf);
    if (read < text.length) {
      buf = new Uint8Array(utf8Length(text));
      written = encoder.encodeInto(text, buf).written;
    }
    this.#wbuf = buf.length <= WRITE_BUFFER_KEEP ? buf : null;
    return buf.subarray(0, written);
  }

  /** Stops reading, writes what is queued, then closes (e.g. after `line too long`). */
  closeAfterFlush(): void {
    if (this.#closed || this.#closing) return;
    this.#closing = true;
    this.#resume?.();
    if (!this.#writing && this.#out.length === 0) this.close();
    else this.#graceTimer = setTimeout(() => this.close(), CLOSE_GRACE_MS);
  }

  /** Closes at once; queued output is dropped. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#out = [];
    this.#wbuf = null;
    this.#outUnits = 0;
    clearTimeout(this.#graceTimer);
    this.#resume?.();
    this.#markClosed();
    try {
      this.#conn.close();
    } catch {
      // Already closed by the runtime.
    }
  }

  async #write(data: Uint8Array, units: number): Promise<void> {
    try {
      let offset = 0;
      while (offset < data.length) {
        offset += await this.#conn.write(offset === 0 ? data : data.subarray(offset));
      }
    } catch {
      this.close();
      return;
    } finally {
      this.#queuedUnits -= units;
      this.#writing = false;
    }
    if (this.#closed) return;
    if (this.#out.length > 0) this.flush();
    else if (this.#closing) this.close();
    if (this.#queuedUnits < this.#pauseAt) this.#resume?.();
  }

  async #readLoop(): Promise<void> {
    const buf = new Uint8Array(READ_SIZE);
    let kept = 0; // bytes of an unfinished line at the start of buf
    let reset = false;
    try {
      while (!this.#closed && !this.#closing) {
        if (this.#queuedUnits >= this.#pauseAt) {
          await new Promise<void>((resolve) => this.#resume = resolve);
          this.#resume = null;
          continue;
        }
        const n = await this.#conn.read(kept === 0 ? buf : buf.subarray(kept));
        if (n === null) break;
        const end = kept + n;
        const lastNewline = buf.lastIndexOf(10, end - 1);
        if (lastNewline < kept) {
          kept = end;
          if (kept > MAX_LINE_BYTES + 1) this.#lineTooLong();
          continue;
        }
        this.#lines(buf.subarray(0, lastNewline));
        // This read's replies go out now, in one write: waiting for the end of the turn
        // would hold them behind every other connection's requests read in the same turn.
        this.flush();
        kept = end - lastNewline - 1;
        if (kept > 0) buf.copyWithin(0, lastNewline + 1, end);
        if (kept > MAX_LINE_BYTES + 1) this.#lineTooLong();
      }
    } catch {
      // Reset by the peer, or closed by us while a read was pending.
      reset = true;
    }
    // Input is over: replies already queued still go out (unless the socket is gone), but
    // the handler drops this connection's waiters now, so nothing is granted to it later.
    if (reset) this.close();
    else this.closeAfterFlush();
    this.handler.closed();
    await this.#whenClosed;
  }

  /** Handles complete lines (`bytes` ends just before a `\n`). */
  #lines(bytes: Uint8Array): void {
    endBatchSoon();
    let text: string;
    try {
      text = decoder.decode(bytes);
    } catch {
      this.#linesOneByOne(bytes);
      return;
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
      if (length > MAX_LINE_BYTES) {
        this.#lineTooLong();
        return;
      }
      const raw = bytes.subarray(start, nl);
      let line: string;
      try {
        line = decoder.decode(raw);
      } catch {
        line = "";
        this.handler.invalid?.(lenient.decode(raw));
      }
      if (line !== "" && !this.#line(line)) return;
      start = nl + 1;
    }
  }

  /** One line; returns false when the connection must stop handling input. */
  #line(line: string): boolean {
    if (this.#closing || this.#closed) return false;
    if (line.length > 0 && line.charCodeAt(line.length - 1) === 13) line = line.slice(0, -1);
    if (line.length === 0) return true;
    if (
      line.length > MAX_LINE_BYTES ||
      (line.length * 3 > MAX_LINE_BYTES && utf8Length(line) > MAX_LINE_BYTES)
    ) {
      this.#lineTooLong();
      return false;
    }
    this.handler.line(line);
    return true;
  }

  #lineTooLong(): void {
    this.send("- - E line too long");
    this.closeAfterFlush();
  }
}
