/**
 * `close()`'s bookkeeping (docs/client.md, "Held locks"): the requests on their way, which it
 * waits for, and the rejections it holds back. From the moment `close()` begins until it
 * resolves, every request that fails is rejected only at the end, all in the turn `close()`
 * resolves: a script may `await client.close()` and only then handle what was pending,
 * though the close waits for the network (releases, drains) in between.
 *
 * @module
 */

import { timers } from "./timer.ts";

/** Requests on their way, and rejections held while the client closes. */
export class CloseGate {
  #inflight = 0;
  #idle: (() => void) | undefined;
  /** Rejections held since `close()` began; `undefined` while open or once closed. */
  #held: (() => void)[] | undefined;

  /**
   * A request is on its way. While any is, the client's timers keep their runtime timer
   * armed (client/timer.ts): the lock it may bring back schedules its lease warning there.
   */
  begin(): void {
    if (this.#inflight++ === 0) timers.hold();
  }

  /** A request that began has ended. */
  end(): void {
    if (--this.#inflight > 0) return;
    timers.unhold();
    this.#idle?.();
  }

  /** Rejects with `error` now, or, while the client closes, when `close()` ends. */
  fail(reject: (error: unknown) => void, error: unknown): void {
    if (this.#held === undefined) reject(error);
    else this.#held.push(() => reject(error));
  }

  /** `promise`, but a rejection goes through {@linkcode fail} (a public method's result). */
  settle<T>(promise: Promise<T>): Promise<T> {
    return promise.catch((error) => new Promise<T>((_, reject) => this.fail(reject, error)));
  }

  /** `close()` began: rejections wait from now on. */
  hold(): void {
    this.#held ??= [];
  }

  /** Resolves once no request is on its way. */
  async idle(): Promise<void> {
    if (this.#inflight > 0) await new Promise<void>((resolve) => this.#idle = resolve);
    this.#idle = undefined;
  }

  /** `close()` ends: the held rejections happen now, and later ones at once. */
  open(): void {
    const held = this.#held ?? [];
    this.#held = undefined;
    for (const reject of held) reject();
  }
}
