/**
 * Socket I/O for one TCP connection of the server, a client's or a peer's: reads in chunks
 * and hands each line to its handler ({@linkcode LineReader}), and writes the lines queued
 * in one batch with a single write ({@linkcode LineWriter}).
 *
 * Limits (docs/protocol.md, "Limits and overload"): a line over 4096 bytes is answered
 * `- - E line too long` and the connection is closed; queued output is bounded: past a
 * high-water mark the socket stops reading (back-pressure), past a hard cap it is dropped,
 * so a client that never reads cannot grow the server's memory.
 *
 * @module
 */

import { errorReply, LINE_TOO_LONG, MAX_LINE_BYTES } from "../client/codec.ts";
import { LineReader, type LineSink } from "../client/line_reader.ts";
import { LineWriter, type LineWriterEvents } from "../client/line_writer.ts";
import type { Batch, Flushable, UrgentOutput } from "./batch.ts";
import type { Logger } from "./log.ts";

/** The read buffer of a connection that is quiet, in bytes (grown under load). */
export const IDLE_READ_BYTES = 256;
/** What a connection does with its input. */
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

/**
 * What a client socket's replies wait for in sync replication (docs/cluster.md,
 * "Replication modes"): a reply queued at `position()` goes out once `reached()` is at
 * least that far (an in-sync standby acknowledged the changes before it).
 */
export interface ReplyGate {
  /** The stream position a reply queued now must wait for; 0 when nothing is pending. */
  position(): number;
  /** How far the standbys have acknowledged (Infinity when no standby is in sync). */
  reached(): number;
  /** Flushes `socket` again when `reached()` may have advanced. */
  wait(socket: Flushable): void;
}

/** Options of {@linkcode LineSocket}. */
export interface LineSocketOptions {
  /** The server's batch: queued lines are written when it ends. */
  batch: Batch;
  /** A peer link: written before client sockets, whose replies wait for its backlog. */
  urgent?: boolean;
  /** Sync replication: replies wait for the standbys' acknowledgement. */
  replies?: ReplyGate;
  /** Where drops are reported. */
  log: Logger;
  /** Stop reading while this many UTF-16 units wait to be written. Default 256 Ki. */
  pauseAt?: number;
  /** Drop the connection when this many UTF-16 units wait to be written. Default 4 Mi. */
  dropAt?: number;
  /** Longest input line in bytes. Default 4096. */
  maxLineBytes?: number;
  /** A line over `maxLineBytes` arrived (answered, then the connection closes): metrics. */
  tooLong?(): void;
  /**
   * Sync replication: grant `token` of `key` goes out `heldMs` after it was decided (it waited
   * for the standbys). Moves its lease that much later (docs/cluster.md, "Replication
   * modes"); returns the line to send instead when the grant has ended meanwhile.
   */
  lateGrant?(key: string, token: bigint, heldMs: number): string | undefined;
}

/** The part of a Deno connection a {@linkcode LineSocket} uses (tests pass fakes). */
export interface ByteStream {
  /** Reads into `buffer`; `null` at the end. */
  read(buffer: Uint8Array): Promise<number | null>;
  /** Writes some of `data`; resolves with how much. */
  write(data: Uint8Array): Promise<number>;
  /** Closes both directions. */
  close(): void;
}

const CLOSE_GRACE_MS = 2000;

/** A reply held until the standbys acknowledged what came before it. */
interface Held {
  line: string;
  position: number;
  /** A grant's key and token, and when it was held (ms), for `lateGrant`. */
  key: string | undefined;
  token: bigint | undefined;
  at: number;
}

/** No reply held: shared by every socket, never added to (an idle socket stays small). */
const NONE_HELD: readonly Held[] = Object.freeze([]);

/**
 * A line-oriented connection with batched, bounded output. It is itself its reader's sink
 * and its writer's listener (those methods are marked internal): an idle connection then
 * costs a few objects, not a closure per callback (docs/server.md, "Connections and
 * memory").
 */
export class LineSocket implements UrgentOutput, LineSink, LineWriterEvents {
  /** The peer's address, as `host:port` (for logs). */
  readonly remote: string;
  #conn: ByteStream;
  #handler: LineHandler;
  #options: LineSocketOptions;
  #writer: LineWriter;
  /** UTF-16 units of replies held by the session before they can be queued here. */
  #heldElsewhere = 0;
  /** Replies waiting for the standbys (sync replication), in order. */
  #held: readonly Held[] = NONE_HELD;
  #dirty = false;
  /** Whether its replies wait for the standbys (a client's; not an inbound peer link's). */
  #gated = true;
  #closed = false;
  #closing = false;
  #resume: (() => void) | null = null;
  #pauseAt: number;
  #dropAt: number;
  #done: Promise<void>;
  #graceTimer: ReturnType<typeof setTimeout> | undefined;
  /** Made only once input is over and the socket is still closing (see the read loop). */
  #markClosed: (() => void) | undefined;
  #maxLineBytes: number;

  /**
   * Starts reading `conn` at once.
   *
   * @param conn An accepted or dialled connection.
   * @param remote Its peer's address, for logs.
   * @param handler Receives lines and the close.
   * @param options The batch, the log and the limits.
   */
  constructor(
    conn: ByteStream,
    remote: string,
    handler: LineHandler,
    options: LineSocketOptions,
  ) {
    this.#conn = conn;
    this.remote = remote;
    this.#handler = handler;
    this.#options = options;
    this.#pauseAt = options.pauseAt ?? 256 * 1024;
    this.#dropAt = options.dropAt ?? 4 * 1024 * 1024;
    this.#maxLineBytes = options.maxLineBytes ?? MAX_LINE_BYTES;
    this.#writer = new LineWriter(conn, this);
    if (options.urgent) options.batch.link(this);
    this.#done = this.#readLoop();
  }

  /** Resolves when the connection is closed and its handler was told. */
  get done(): Promise<void> {
    return this.#done;
  }

  /**
   * Whether replies wait for a standby's acknowledgement (sync replication): until they go
   * out, the client has been told nothing of them.
   */
  get unconfirmed(): boolean {
    return this.#held.length > 0;
  }

  /** Whether the connection is closed or closing. */
  get closed(): boolean {
    return this.#closed || this.#closing;
  }

  /**
   * Queues one line (without `\n`) to be written at the end of this batch; a grant's with
   * its key and token (see `lateGrant`).
   */
  send(line: string, key?: string, token?: bigint): void {
    if (this.#closed) return;
    const position = this.#gated ? this.#options.replies?.position() ?? 0 : 0;
    if (position > 0 || this.#held.length > 0) {
      const held = this.#held === NONE_HELD ? [] : this.#held as Held[];
      const at = token === undefined ? 0 : performance.now();
      held.push({ line, position, key, token, at });
      this.#held = held;
      this.#heldElsewhere += line.length + 1;
    } else this.#writer.push(line);
    if (this.#writer.held + this.#heldElsewhere > this.#dropAt) {
      this.#drop("it does not read its replies", "slow-reader");
      this.close();
      return;
    }
    if (!this.#dirty) {
      this.#dirty = true;
      if (this.#options.urgent) this.#options.batch.addUrgent(this);
      else this.#options.batch.add(this);
    }
  }

  /** Whether lines wait behind a write in flight for less than `stallMs` (a peer link). */
  backlogged(now: number, stallMs: number): boolean {
    if (!this.#writer.pending) return false;
    const busy = this.#writer.busyFor(now);
    return busy > 0 && busy < stallMs;
  }

  /**
   * Counts `units` (UTF-16 units; negative to give back) of replies the session holds in
   * memory for this connection, so pausing and dropping cover them as well.
   */
  hold(units: number): void {
    this.#heldElsewhere += units;
    if (units > 0 && this.#writer.held + this.#heldElsewhere > this.#dropAt) {
      this.#drop("too many replies held for it", "slow-reader");
      this.close();
    }
  }

  /**
   * Writes whatever is queued (called at the end of a batch). A client socket writes after
   * the peer links, and its replies wait for what they depend on to be replicated.
   */
  flush(): void {
    this.#dirty = false;
    if (this.#closed) return;
    const options = this.#options;
    if (!options.urgent && this.#gated && !options.batch.replicate(this)) return;
    // A late grant's moved lease goes to the standbys before its reply (docs/cluster.md).
    if (this.#held.length > 0 && this.#release() && !options.batch.replicate(this)) return;
    this.#writer.flush();
  }

  /**
   * Before a handover (sync replication): each held grant's lease is moved for the time held
   * so far (`lateGrant`), and counts its hold from now; one that ran out is answered `T`.
   */
  prolongHeld(): void {
    const now = performance.now();
    for (const held of this.#held as Held[]) this.#late(held, now);
  }

  /**
   * Asks `lateGrant` about `held` if it is a grant, and updates it in place: its hold counts
   * from `now`, and a grant that ended becomes the line sent instead. Whether it asked.
   */
  #late(held: Held, now: number): boolean {
    const late = this.#options.lateGrant;
    if (late === undefined || held.token === undefined) return false;
    const instead = late(held.key!, held.token, now - held.at);
    held.at = now;
    if (instead !== undefined) {
      this.#heldElsewhere += instead.length - held.line.length;
      held.line = instead;
      held.token = undefined;
    }
    return true;
  }

  /**
   * Moves the replies whose position the standbys reached to the writer, in order. Returns
   * whether a late grant's lease may have moved (that change is then written first).
   */
  #release(): boolean {
    const gate = this.#options.replies;
    const reached = gate?.reached() ?? Infinity;
    const held = this.#held as Held[];
    const now = this.#options.lateGrant === undefined ? 0 : performance.now();
    let moved = false;
    let i = 0;
    for (; i < held.length && held[i].position <= reached; i++) {
      if (this.#late(held[i], now)) moved = true;
      this.#heldElsewhere -= held[i].line.length + 1;
      this.#writer.push(held[i].line);
    }
    this.#held = i === held.length ? NONE_HELD : held.slice(i);
    if (this.#held.length > 0) gate?.wait(this);
    return moved;
  }

  /**
   * This accepted socket turned out to be a peer's link: what it writes (the handshake's
   * challenge) never waits for replication, which a client's replies do.
   */
  ungate(): void {
    this.#gated = false;
  }

  /** Stops reading, writes what is queued, then closes (e.g. after `line too long`). */
  closeAfterFlush(): void {
    if (this.#closed || this.#closing) return;
    this.#closing = true;
    this.#resume?.();
    if (this.#writer.idle && this.#held.length === 0) this.close();
    else this.#graceTimer = setTimeout(() => this.close(), CLOSE_GRACE_MS);
  }

  /** Closes at once; queued output is dropped. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#writer.discard();
    this.#held = NONE_HELD;
    if (this.#options.urgent) this.#options.batch.unlink(this);
    clearTimeout(this.#graceTimer);
    this.#resume?.();
    this.#markClosed?.();
    try {
      this.#conn.close();
    } catch {
      // Already closed by the runtime.
    }
  }

  /** Logs why this connection is dropped (`reason`: a stable code for log searches). */
  #drop(why: string, reason: string): void {
    this.#options.log.warn(`dropping ${this.remote}: ${why}`, {
      event: "drop",
      remote: this.remote,
      reason,
    });
  }

  /** A peer link's writes are timed (its stall check asks their age). @internal */
  get timed(): boolean {
    return this.#options.urgent === true;
  }

  /** A write failed: the connection is gone. @internal */
  failed(): void {
    this.close();
  }

  /** One input line, for the handler. @internal */
  line(text: string): void {
    this.#handler.line(text);
  }

  /** An input line that is not valid UTF-8, for the handler. @internal */
  invalid(text: string): void {
    this.#handler.invalid?.(text);
  }

  /** An input line over the limit: answered, then the connection closes. @internal */
  tooLong(): void {
    this.#drop(`a line over ${this.#maxLineBytes} bytes`, "line-too-long");
    this.#options.tooLong?.();
    this.send(errorReply("-", "-", LINE_TOO_LONG));
    this.closeAfterFlush();
  }

  /** Whether input lines are still handled. @internal */
  accepting(): boolean {
    return !this.#closing && !this.#closed;
  }

  /** A write finished. @internal */
  written(): void {
    if (this.#options.urgent) this.#options.batch.drained();
    if (this.#closed) return;
    if (this.#closing && this.#writer.idle && this.#held.length === 0) this.close();
    else if (this.#writer.held + this.#heldElsewhere < this.#pauseAt) this.#resume?.();
  }

  async #readLoop(): Promise<void> {
    // An idle connection keeps a 256-byte read buffer; a busy one grows it (docs/server.md).
    const reader = new LineReader(this, {
      maxLineBytes: this.#maxLineBytes,
      initialBytes: IDLE_READ_BYTES,
    });
    let reset = false;
    const log = this.#options.log;
    try {
      while (!this.#closed && !this.#closing) {
        if (this.#writer.held + this.#heldElsewhere >= this.#pauseAt) {
          await new Promise<void>((resolve) => this.#resume = resolve);
          this.#resume = null;
          continue;
        }
        const n = await this.#conn.read(reader.space());
        if (n === null) {
          log.debug(`${this.remote} closed the connection`, {
            event: "closed",
            remote: this.remote,
          });
          break;
        }
        this.#options.batch.soon();
        reader.commit(n);
        // This read's replies go out now, in one write: waiting for the end of the turn
        // would hold them behind every other connection's requests read in the same turn.
        this.flush();
      }
    } catch (error) {
      // Reset by the peer, or closed by us while a read was pending (not worth a line).
      if (!this.#closed) {
        const why = error instanceof Error ? error.message : String(error);
        log.debug(`${this.remote} reset the connection: ${why}`, {
          event: "drop",
          remote: this.remote,
          reason: "reset",
        });
      }
      reset = true;
    }
    // Input is over: the handler drops this connection's waiters now, so nothing is granted
    // to it later, and queues the replies it decided but held back. Those and the replies
    // already queued still go out (unless the socket is gone).
    if (reset) this.close();
    this.#handler.closed();
    this.closeAfterFlush();
    // The close may have started a session's grace: end a batch so its hooks re-arm the
    // timers (nothing else may arrive to do it).
    this.#options.batch.soon();
    if (!this.#closed) await new Promise<void>((resolve) => this.#markClosed = resolve);
  }
}
