/**
 * Test helper: conditions that wait for events instead of polling. The owner (a fake server,
 * a proxy) calls {@linkcode Waiters.notify} on each of its events (a connection accepted or
 * closed, a line received), and every pending condition is checked again.
 *
 * @module
 */

/** Pending conditions, each checked again on every {@linkcode Waiters.notify}. */
export class Waiters {
  #checks = new Set<() => void>();

  /** Checks every pending condition again (call it after each event). */
  notify(): void {
    for (const check of [...this.#checks]) check();
  }

  /**
   * Resolves once `condition` holds, checking it now and on every {@linkcode notify}.
   * Rejects if it throws on a later check, or after `timeoutMs`.
   */
  until(condition: () => boolean, what: string, timeoutMs: number): Promise<void> {
    if (condition()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const check = () => {
        try {
          if (!condition()) return;
        } catch (error) {
          done();
          return reject(error);
        }
        done();
        resolve();
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`Timed out after ${timeoutMs} ms waiting for ${what}`));
      }, timeoutMs);
      const done = () => {
        clearTimeout(timer);
        this.#checks.delete(check);
      };
      this.#checks.add(check);
    });
  }
}
