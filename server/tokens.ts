/**
 * The fencing-token high-water mark (docs/protocol.md, "Semantics"): tokens are u64 `bigint`s that never go back,
 * across restarts and `kill -9`. The mark lives in `<data-dir>/tokens`; the store reserves
 * a block of tokens ahead on disk (temp file, fsync, rename) and issues from memory, so the
 * hot path never waits for the disk. After a crash the next start begins above the
 * reserved mark; after a graceful stop, right after the last token issued.
 *
 * @module
 */

import { MAX_TOKEN } from "../client/codec.ts";
import { type Logger, stderrLogger } from "./log.ts";
import { LANE_SLAB, laneAhead, OwnMarks, tokenAfter } from "./token_lanes.ts";

/** Tokens would pass 2^64-1: no more grants can be made safely. */
export class TokensExhaustedError extends Error {
  /** @param options Standard error options. */
  constructor(options?: ErrorOptions) {
    super(`Fencing tokens are exhausted: the next token would pass ${MAX_TOKEN}`, options);
    this.name = "TokensExhaustedError";
  }
}

/** The data directory cannot be used (not writable, corrupt mark, in use). Exit code 1. */
export class DataDirError extends Error {
  /** @param message What is wrong and what to do. @param options Standard error options. */
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = "DataDirError";
  }
}

/** Options of {@linkcode TokenStore.open}. */
export interface TokenStoreOptions {
  /** Tokens reserved on disk per write. Default 1,000,000. */
  block?: bigint;
  /**
   * Called with the new mark whenever a block is reserved, before any token of that block
   * is issued (a cluster's active announces it to its standbys).
   */
  onReserve?: (mark: bigint) => void;
  /** Where reservations (debug) and failed background ones (error) go. Default: stderr. */
  log?: Logger;
  /**
   * A cluster node's lane (its position in `--peers`): it issues tokens from its own slabs
   * only (token_lanes.ts). Default: none, every token is the last plus one.
   */
  lane?: number;
}

const FILE = "tokens";

function join(dir: string, name: string): string {
  return dir.endsWith("/") ? dir + name : `${dir}/${name}`;
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * Issues fencing tokens from a block reserved on disk.
 *
 * @example Issuing tokens
 * ```ts
 * import { TokenStore } from "./tokens.ts";
 * const store = TokenStore.open("./lockd-data");
 * store.next(); // e.g. 1n
 * await store.close(); // persists the exact mark
 * ```
 */
export class TokenStore {
  #dir: string;
  #path: string;
  #lockFile: Deno.FsFile;
  #block: bigint;
  #last: bigint;
  #durable: bigint;
  /** The highest mark passed to `onReserve`, its write maybe still in flight. */
  #announced: bigint;
  /** The marks passed to `onReserve` lately (see {@linkcode owns}). */
  #ownMarks: OwnMarks;
  /** The last token issued by {@linkcode next}, or the stored mark (see {@linkcode own}). */
  #own: bigint;
  #writing: Promise<void> | null = null;
  #closed = false;
  #onReserve: ((mark: bigint) => void) | undefined;
  #log: Logger;
  #lane: number | undefined;
  /** The lane's current slab, `[start, end)`: tokens inside it need no lane arithmetic. */
  #slab = { start: 0n, end: 0n };

  private constructor(
    dir: string,
    lockFile: Deno.FsFile,
    stored: bigint,
    options: TokenStoreOptions | undefined,
  ) {
    this.#dir = dir;
    this.#path = join(dir, FILE);
    this.#lockFile = lockFile;
    this.#block = options?.block ?? 1_000_000n;
    this.#onReserve = options?.onReserve;
    this.#log = options?.log ?? stderrLogger();
    this.#lane = options?.lane;
    this.#ownMarks = new OwnMarks(this.#lane);
    this.#last = stored;
    this.#own = stored;
    this.#durable = stored;
    this.#announced = stored;
  }

  /**
   * Opens (creating if needed) the data directory, takes its lock, reads the stored mark and
   * reserves the first block (a single node; a cluster node on its first token),
   * synchronously, before the server accepts anything.
   *
   * @param dir The data directory.
   * @throws {DataDirError} If the directory is not writable, is used by another lockd, or
   * the stored mark is corrupt.
   * @throws {TokensExhaustedError} If the stored mark is already 2^64-1.
   */
  static open(dir: string, options?: TokenStoreOptions): TokenStore {
    try {
      Deno.mkdirSync(dir, { recursive: true });
    } catch (error) {
      throw new DataDirError(
        `Cannot create data directory "${dir}": ${describe(error)}. Choose a writable --data-dir`,
        { cause: error },
      );
    }
    let lockFile: Deno.FsFile;
    try {
      lockFile = Deno.openSync(join(dir, "lock"), { read: true, write: true, create: true });
    } catch (error) {
      throw new DataDirError(
        `Data directory "${dir}" is not writable: ${describe(error)}. Choose a writable --data-dir`,
        { cause: error },
      );
    }
    if (!lockFile.tryLockSync(true)) {
      lockFile.close();
      throw new DataDirError(
        `Data directory "${dir}" is in use by another lockd process. Give each node its own --data-dir`,
      );
    }
    try {
      const store = new TokenStore(dir, lockFile, readMark(join(dir, FILE)), options);
      if (store.#last >= MAX_TOKEN) throw new TokensExhaustedError();
      // A cluster node reserves on its first token: a reservation made at start and left on
      // disk by a kill -9 would come back as a mark of its own that no node ever issued. It
      // writes the stored mark back instead, so an unwritable directory still stops it here.
      if (store.#lane === undefined) store.#reserveSync(store.#last + store.#block);
      else store.#write(store.#last, "tmp-sync");
      return store;
    } catch (error) {
      lockFile.close();
      throw error;
    }
  }

  /** Whether `mark` is this store's own ({@linkcode OwnMarks}). */
  owns(mark: bigint): boolean {
    return this.#ownMarks.owns(mark, this.announced);
  }

  /**
   * The last token this store issued, or the mark it was opened with: what this node may
   * have issued that no other node knows of ({@linkcode last} also moves with the marks it
   * learns from other nodes, {@linkcode raiseTo}).
   */
  get own(): bigint {
    return this.#own;
  }

  /** Tokens reserved per disk write. */
  get block(): bigint {
    return this.#block;
  }

  /** The last token issued (or the stored mark, before the first grant). */
  get last(): bigint {
    return this.#last;
  }

  /** The mark reserved on disk: no token above it has been issued. */
  get reserved(): bigint {
    return this.#durable;
  }

  /**
   * The highest mark announced through `onReserve`: {@linkcode reserved}, or above it while
   * a background reservation is being written. No token above it has been issued.
   */
  get announced(): bigint {
    return this.#announced > this.#durable ? this.#announced : this.#durable;
  }

  /**
   * Issues the next token. Never waits for the disk unless a whole block was used before
   * the background reservation finished (then it writes synchronously).
   *
   * @throws {TokensExhaustedError} Past 2^64-1.
   */
  next(): bigint {
    let token = this.#last + 1n;
    if (this.#lane !== undefined && (token < this.#slab.start || token >= this.#slab.end)) {
      token = tokenAfter(this.#last, this.#lane);
      const start = token - token % LANE_SLAB;
      this.#slab = { start, end: start + LANE_SLAB };
    }
    if (token > MAX_TOKEN) throw new TokensExhaustedError();
    const block = this.#block;
    if (token > this.#durable) this.#reserveSync(this.#ahead(token, block));
    else if (this.#writing === null && this.#durable < this.#ahead(token, block / 2n)) {
      // Half a block ahead, in the lane: a jump to its next slab is announced as early.
      this.#reserveAsync(laneAhead(this.#durable, block, this.#lane));
    }
    this.#last = token;
    this.#own = token;
    return token;
  }

  /** The `count`-th token of this node's lane after `token` (token_lanes.ts). */
  #ahead(token: bigint, count: bigint): bigint {
    const fast = this.#lane === undefined || token + count < this.#slab.end;
    return fast ? token + count : laneAhead(token, count, this.#lane);
  }

  /**
   * Makes every later token greater than `floor` (token succession in a cluster). Persists
   * the new mark before returning.
   */
  raiseTo(floor: bigint): void {
    if (floor <= this.#last) return;
    if (floor >= MAX_TOKEN) throw new TokensExhaustedError();
    this.#last = floor;
    // Exactly the floor: a node that only learns a mark must not announce a reservation of
    // its own (after a restart it would look like a token nobody issued); next() reserves.
    if (floor > this.#durable) this.#reserveSync(floor);
  }

  /**
   * Waits for a background reservation in flight, persists the exact last token issued and
   * releases the data directory.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    try {
      await this.#writing;
      this.#write(this.#last, "tmp-final");
      this.#durable = this.#last;
    } finally {
      this.#lockFile.close();
    }
  }

  #reserveSync(target: bigint): void {
    const mark = target > MAX_TOKEN ? MAX_TOKEN : target;
    this.#announce(mark);
    this.#write(mark, "tmp-sync");
    this.#durable = mark;
    this.#logReserved(mark);
  }

  #announce(mark: bigint): void {
    if (mark > this.#announced) this.#announced = mark;
    this.#ownMarks.announced(mark);
    this.#onReserve?.(mark);
  }

  #logReserved(mark: bigint): void {
    this.#log.debug(`reserved fencing tokens up to ${mark} in "${this.#dir}"`, {
      event: "tokens-reserved",
      mark,
    });
  }

  #reserveAsync(target: bigint): void {
    const mark = target > MAX_TOKEN ? MAX_TOKEN : target;
    if (mark <= this.#durable) return;
    this.#announce(mark);
    const tmp = join(this.#dir, `${FILE}.tmp-async`);
    this.#writing = writeDurably(tmp, mark).then(() => {
      // Renames happen on this thread, in order: a later synchronous write is never undone.
      if (!this.#closed && mark > this.#durable) {
        Deno.renameSync(tmp, this.#path);
        this.#durable = mark;
        this.#logReserved(mark);
      } else Deno.removeSync(tmp);
    }).catch((error) => {
      this.#log.error(`could not reserve fencing tokens in "${this.#dir}": ${describe(error)}`, {
        event: "tokens-failed",
      });
    }).finally(() => {
      this.#writing = null;
    });
  }

  #write(mark: bigint, suffix: string): void {
    const tmp = join(this.#dir, `${FILE}.${suffix}`);
    try {
      const file = Deno.openSync(tmp, { write: true, create: true, truncate: true });
      try {
        file.writeSync(new TextEncoder().encode(`${mark}\n`));
        file.syncSync();
      } finally {
        file.close();
      }
      Deno.renameSync(tmp, this.#path);
      syncDir(this.#dir);
    } catch (error) {
      throw new DataDirError(
        `Cannot write the token mark in "${this.#dir}": ${
          describe(error)
        }. Check that --data-dir is writable`,
        { cause: error },
      );
    }
  }
}

async function writeDurably(path: string, mark: bigint): Promise<void> {
  const file = await Deno.open(path, { write: true, create: true, truncate: true });
  try {
    await file.write(new TextEncoder().encode(`${mark}\n`));
    await file.sync();
  } finally {
    file.close();
  }
}

/** Makes a rename in `dir` durable across power loss (best effort: some filesystems refuse). */
function syncDir(dir: string): void {
  try {
    const handle = Deno.openSync(dir);
    try {
      handle.syncSync();
    } finally {
      handle.close();
    }
  } catch {
    // Not all platforms can fsync a directory; the rename itself is still atomic.
  }
}

function readMark(path: string): bigint {
  let text: string;
  try {
    text = Deno.readTextFileSync(path);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return 0n;
    throw new DataDirError(`Cannot read the token mark "${path}": ${describe(error)}`, {
      cause: error,
    });
  }
  const match = /^([0-9]{1,20})\n?$/.exec(text);
  const mark = match ? BigInt(match[1]) : -1n;
  if (mark < 0n || mark > MAX_TOKEN) {
    const shown = text.length > 40 ? `${text.slice(0, 40)}...` : text;
    throw new DataDirError(
      `The token mark "${path}" is corrupt: expected one decimal number, found ${
        JSON.stringify(shown)
      }. lockd will not guess, because fencing tokens must never go back. Write into that ` +
        `file a number above every token ever issued (if unsure, a much larger one), then start again`,
    );
  }
  return mark;
}
