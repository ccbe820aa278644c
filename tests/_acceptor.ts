/**
 * Test helper: the accept loop of an in-process TCP server on `127.0.0.1` that can stop
 * listening (connections refused) and listen again on the same port, as a node that goes
 * down and comes back.
 *
 * @module
 */

/**
 * Handles one accepted connection. `current()` tells whether the listener that accepted it is
 * still the one in use (it is not once {@linkcode Acceptor.stop} was called): a connection
 * accepted by a stopped listener should be closed. The next connection is accepted once the
 * returned promise settles.
 */
export type OnAccept = (conn: Deno.TcpConn, current: () => boolean) => Promise<void> | void;

/** Accepts connections on one port of `127.0.0.1` and hands each to an {@linkcode OnAccept}. */
export class Acceptor {
  /** The port (the same after {@linkcode stop} and {@linkcode listen}). */
  readonly port: number;
  #onAccept: OnAccept;
  #listener: Deno.TcpListener | undefined;
  #accepting: Promise<void> = Promise.resolve();

  /** Starts listening on `127.0.0.1:port` (port 0: a free one). */
  constructor(port: number, onAccept: OnAccept) {
    this.#onAccept = onAccept;
    const listener = Deno.listen({ hostname: "127.0.0.1", port });
    this.port = listener.addr.port;
    this.#start(listener);
  }

  /** Whether new connections are accepted. */
  get listening(): boolean {
    return this.#listener !== undefined;
  }

  /** Stops accepting: new connections are refused (the port is free until {@linkcode listen}). */
  async stop(): Promise<void> {
    const listener = this.#listener;
    this.#listener = undefined;
    try {
      listener?.close();
    } catch {
      // Already closed.
    }
    await this.#accepting;
  }

  /** Listens again on the same port (nothing happens if it is listening already). */
  listen(): void {
    if (this.#listener !== undefined) return;
    this.#start(Deno.listen({ hostname: "127.0.0.1", port: this.port }));
  }

  #start(listener: Deno.TcpListener): void {
    this.#listener = listener;
    const current = () => this.#listener === listener;
    this.#accepting = (async () => {
      for (;;) {
        let conn: Deno.TcpConn;
        try {
          conn = await listener.accept();
        } catch {
          return; // The listener was closed.
        }
        await this.#onAccept(conn, current);
      }
    })();
  }
}
