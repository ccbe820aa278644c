/**
 * The end of a batch, per server: replies produced while handling one read (or one timer
 * run) are queued on their sockets, and each dirty socket writes them in one go when the
 * batch ends, in a microtask of the same turn. Then the end-of-batch hooks run (the lease
 * timer re-arms). One `Batch` per server: two servers in one process (tests, embedders)
 * never share state.
 *
 * Replication comes first (docs/cluster.md, "Replication and what a failover can lose"):
 * peer links are urgent, written before any client socket, and a client socket holds its
 * replies while a peer link still has lines that no write has taken (its previous write is
 * in flight), so a change reaches the kernel on its way to the standbys no later than its
 * reply on its way to the client. A peer whose write has been stuck for `stallMs` (it does
 * not read) no longer holds replies back.
 *
 * @module
 */

/** Something with output to write at the end of a batch. */
export interface Flushable {
  /** Writes what is queued. */
  flush(): void;
}

/** A peer link's output, as the batch sees it. */
export interface UrgentOutput extends Flushable {
  /**
   * Whether lines are queued behind a write in flight for less than `stallMs` (they must
   * reach the kernel before the replies that depend on them).
   */
  backlogged(now: number, stallMs: number): boolean;
}

/** Options of {@linkcode Batch}. */
export interface BatchOptions {
  /** After this long with a write in flight, a peer link no longer holds replies (ms). */
  stallMs?: number;
}

/** Collects what must be written or re-armed when the current batch ends. */
export class Batch {
  #dirty: Flushable[] = [];
  #urgent: Flushable[] = [];
  #links = new Set<UrgentOutput>();
  #held = new Set<Flushable>();
  #heldTimer: ReturnType<typeof setTimeout> | undefined;
  #seals: (() => void)[] = [];
  #hooks: (() => void)[] = [];
  #queued = false;
  #stallMs: number;
  #run = () => this.end();

  /** @param options The stall limit of peer links. */
  constructor(options: BatchOptions = {}) {
    this.#stallMs = options.stallMs ?? 50;
  }

  /** `item` has output queued: it is flushed when this batch ends (once per batch). */
  add(item: Flushable): void {
    this.#dirty.push(item);
    this.soon();
  }

  /** A peer link has output queued: flushed before any client socket. */
  addUrgent(item: UrgentOutput): void {
    this.#urgent.push(item);
    this.soon();
  }

  /** `link` is a peer link whose backlog holds replies back (until `unlink`). */
  link(link: UrgentOutput): void {
    this.#links.add(link);
  }

  /** `link` is gone. */
  unlink(link: UrgentOutput): void {
    this.#links.delete(link);
    this.drained();
  }

  /** Makes sure the batch ends in a microtask of this turn. */
  soon(): void {
    if (this.#queued) return;
    this.#queued = true;
    queueMicrotask(this.#run);
  }

  /** Runs `seal` before peer links are flushed (the replication stream closes its batch). */
  onSeal(seal: () => void): () => void {
    this.#seals.push(seal);
    return () => {
      this.#seals = this.#seals.filter((s) => s !== seal);
    };
  }

  /** Runs `hook` at the end of every batch; returns a function that removes it. */
  onEnd(hook: () => void): () => void {
    this.#hooks.push(hook);
    return () => {
      this.#hooks = this.#hooks.filter((h) => h !== hook);
    };
  }

  /**
   * Seals the replication stream and writes the peer links. Returns whether a client socket
   * may write now (no peer link is backlogged); if not, `item` is flushed again once they
   * drain.
   */
  replicate(item: Flushable): boolean {
    this.#flushUrgent();
    if (this.#links.size === 0 || !this.#backlogged()) return true;
    this.#held.add(item);
    this.#heldTimer ??= setTimeout(() => {
      this.#heldTimer = undefined;
      this.#release();
    }, this.#stallMs);
    return false;
  }

  /** A peer link wrote: replies held behind its backlog may go once no link has one. */
  drained(): void {
    if (this.#held.size > 0 && !this.#backlogged()) this.#release();
  }

  /** Ends the batch now: flushes every dirty item (peer links first), then runs the hooks. */
  end(): void {
    this.#queued = false;
    const dirty = this.#dirty;
    this.#dirty = [];
    this.#flushUrgent();
    for (const item of dirty) item.flush();
    for (const hook of this.#hooks) hook();
  }

  /** Cancels the stall timer (the server stops). */
  stop(): void {
    clearTimeout(this.#heldTimer);
    this.#heldTimer = undefined;
  }

  #flushUrgent(): void {
    for (const seal of this.#seals) seal();
    if (this.#urgent.length === 0) return;
    const urgent = this.#urgent;
    this.#urgent = [];
    for (const link of urgent) link.flush();
  }

  #backlogged(): boolean {
    const now = performance.now();
    for (const link of this.#links) if (link.backlogged(now, this.#stallMs)) return true;
    return false;
  }

  #release(): void {
    clearTimeout(this.#heldTimer);
    this.#heldTimer = undefined;
    const held = [...this.#held];
    this.#held.clear();
    for (const item of held) item.flush();
  }
}
