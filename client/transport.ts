/**
 * The client's view of a connection, as types only: something that carries protocol lines
 * (docs/protocol.md) both ways, and the function that opens one. The implementations are
 * in `tcp.ts` (Deno), `node_tcp.ts` (Node.js, Bun) and `ws.ts`, chosen by `dial.ts`.
 *
 * @module
 */

import type { Address } from "./address.ts";

/**
 * An open connection to a lockd node (or a bridge), as a custom {@linkcode Connect} returns
 * it.
 *
 * @example A transport that logs what it sends
 * ```ts
 * import type { Transport } from "@lockd/client";
 * function logging(inner: Transport): Transport {
 *   return {
 *     send(line) {
 *       console.log(">", line);
 *       inner.send(line);
 *     },
 *     close: () => inner.close(),
 *     // Passed on, so that requests outstanding keep the process alive and an idle
 *     // client does not (and a close with acquires queued still half-closes).
 *     end: inner.end && (() => inner.end!()),
 *     ref: inner.ref && ((keep) => inner.ref!(keep)),
 *   };
 * }
 * ```
 */
export interface Transport {
  /** Sends one line (without `\n`). Lines sent in one turn may be batched into one write. */
  send(line: string): void;
  /** Closes the connection; `closed` is then called on its handlers. */
  close(): void;
  /**
   * Stops sending but keeps receiving (a TCP half-close): the server then drops the
   * connection's queued acquires, writes the replies it owes and closes, and `closed`
   * follows. The client ends a connection this way when it closes with acquires queued, so
   * that a grant made just before is still seen and released. Optional: without it such a
   * connection is closed at once.
   */
  end?(): void;
  /**
   * Whether the connection may keep the process alive (the socket's `ref()` and `unref()`
   * in Deno, Node.js and Bun). The client calls it with `true` while requests are
   * outstanding on the connection and `false` once none is, so an idle client never keeps
   * a script from exiting. Optional: without it the client times its watch of outstanding
   * requests with a timer that keeps the process alive. A transport that wraps another
   * must pass it on when the inner one has it: the client's own TCP transport is unreferenced
   * until this is called.
   */
  ref?(keep: boolean): void;
}

/**
 * What a transport reports to the client: each received line, and the end.
 *
 * @example Handlers that print
 * ```ts
 * import type { TransportHandlers } from "@lockd/client";
 * const handlers: TransportHandlers = {
 *   line: (text) => console.log("<", text),
 *   closed: () => console.log("closed"),
 * };
 * ```
 */
export interface TransportHandlers {
  /** One received line, without its line ending. */
  line(text: string): void;
  /**
   * The connection is gone (called once, whoever closed it), with why when the transport
   * knows better than "lost" (e.g. the node answered in TLS).
   */
  closed(reason?: string): void;
}

/**
 * Opens a transport to `address`; rejects if it cannot connect. Give one to
 * `LockClient` (`connect` option) to carry the protocol over something else. It must end
 * (connected or rejected) soon after `signal` aborts: `close()` waits for attempts on their way.
 *
 * @example Wrap the default TCP/WebSocket connector
 * ```ts
 * import { type Connect, connectTransport, LockClient } from "@lockd/client";
 * const connect: Connect = (address, handlers, signal) => {
 *   console.log("connecting to", address.key);
 *   return connectTransport(address, handlers, signal);
 * };
 * const client = new LockClient("127.0.0.1:7321", { connect });
 * await client.close();
 * ```
 */
export type Connect = (
  address: Address,
  handlers: TransportHandlers,
  signal: AbortSignal,
) => Promise<Transport>;
