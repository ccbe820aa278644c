/**
 * The end of a batch, per server: replies produced while handling one read (or one timer
 * run) are queued on their sockets, and each dirty socket writes them in one go when the
 * batch ends, in a microtask of the same turn. Then the end-of-batch hooks run (the lease
 * timer re-arms). One `Batch` per server: two servers in one process (tests, embedders)
 * never share state.
 *
 * @module
 */

/** Something with output to write at the end of a batch. */
export interface Flushable {
  /** Writes what is queued. */
  flush(): void;
}

/** Collects what must be written or re-armed when the current batch ends. */
export class Batch {
  #dirty: Flushable[] = [];
  #hooks: (() => void)[] = [];
  #queued = false;
  #run = () => this.end();

  /** `item` has output queued: it is flushed when this batch ends (once per batch). */
  add(item: Flushable): void {
    this.#dirty.push(item);
    this.soon();
  }

  /** Makes sure the batch ends in a microtask of this turn. */
  soon(): void {
    if (this.#queued) return;
    this.#queued = true;
    queueMicrotask(this.#run);
  }

  /** Runs `hook` at the end of every batch; returns a function that removes it. */
  onEnd(hook: () => void): () => void {
    this.#hooks.push(hook);
    return () => {
      this.#hooks = this.#hooks.filter((h) => h !== hook);
    };
  }

  /** Ends the batch now: flushes every dirty item, then runs the hooks. */
  end(): void {
    this.#queued = false;
    const dirty = this.#dirty;
    this.#dirty = [];
    for (const item of dirty) item.flush();
    for (const hook of this.#hooks) hook();
  }
}
