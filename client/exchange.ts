/**
 * One request on its way through the {@linkcode Router} (`router.ts`): the object that
 * builds its line for each connection it goes out on, waits on that connection for the
 * reply, and hears the final reply or why there is none.
 *
 * @module
 */

import type { Reply } from "./codec.ts";
import { replyAction } from "./codec.ts";
import type { ManagedConnection } from "./managed_connection.ts";
import type { ConnectionLost, Receiver } from "./pending_replies.ts";
import type { Router } from "./router.ts";

/**
 * One request on its way through the {@linkcode Router}: it builds its line for the
 * connection it goes out on and hears the final reply, or why there is none. It is itself
 * what waits on the connection, so a request answered at once by the first connection it
 * tries costs no promise or closure of the router's; anything else (a drop, `M`, `E no
 * active node`, no connection up) goes through the router's retry loop.
 */
export abstract class Exchange implements Receiver {
  /** @internal */
  nextReceiver: Receiver | undefined;
  /** @internal */
  lastReceiver: Receiver | undefined;
  /** @internal */
  sentSeq = 0;
  /** The op (`A`, `R`, `X`, ...). */
  readonly op: string;
  /** The key (or what stands for it in the echo). */
  readonly key: string;
  /** Set when the caller gave up (abort): stop retrying. */
  abandoned = false;
  /**
   * When to stop retrying (`performance.now()` ms), if sooner than `retryTimeoutMs`: an
   * acquire's wait bounds its whole life, retries and connection attempts included.
   */
  until: number | undefined;
  /** When it was handed to the router (`performance.now()` ms): retries count from here. */
  startedAt = 0;
  #router: Router | undefined;
  #connection: ManagedConnection | undefined;

  /** @param op The op. @param key The key. */
  constructor(op: string, key: string) {
    this.op = op;
    this.key = key;
  }

  /** The line for `connection` (an acquire asks for the wait that is left). */
  abstract line(connection: ManagedConnection): string;
  /** The final reply. */
  abstract done(reply: Reply): void;
  /** No final reply: no connection could carry it, the client closed, or it was abandoned. */
  abstract failed(error: unknown): void;

  /** Sent on `connection` by `router`'s first try. @internal */
  sentOn(router: Router, connection: ManagedConnection): void {
    this.#router = router;
    this.#connection = connection;
  }

  /** @internal */
  replied(reply: Reply): void {
    const connection = this.#connection!;
    this.#connection = undefined;
    if (replyAction(reply) === "done") {
      this.#router!.served(connection);
      this.done(reply);
    } else this.#router!.resume(this, connection, reply, undefined);
  }

  /** @internal */
  lost(error: ConnectionLost): void {
    const connection = this.#connection!;
    this.#connection = undefined;
    this.#router!.resume(this, connection, undefined, error);
  }
}

/** An exchange that settles a promise (inspection, extends, the bridge). */
export class PromiseExchange extends Exchange {
  #line: (connection: ManagedConnection) => string;
  #resolve: (reply: Reply) => void;
  #reject: (error: unknown) => void;

  constructor(
    op: string,
    key: string,
    line: (connection: ManagedConnection) => string,
    settle: { resolve: (reply: Reply) => void; reject: (error: unknown) => void },
  ) {
    super(op, key);
    this.#line = line;
    this.#resolve = settle.resolve;
    this.#reject = settle.reject;
  }

  line(connection: ManagedConnection): string {
    return this.#line(connection);
  }

  done(reply: Reply): void {
    this.#resolve(reply);
  }

  failed(error: unknown): void {
    this.#reject(error);
  }
}
