/**
 * The WebSocket transport (`ws://`, `wss://`) on the standard `WebSocket`, for browsers and
 * edge runtimes talking to a lockd bridge: one protocol line per text frame (docs/protocol.md).
 *
 * @module
 */

import type { Address } from "./address.ts";
import type { Transport, TransportHandlers } from "./transport.ts";

/**
 * Opens a WebSocket to a lockd bridge and resolves once it is open.
 *
 * @throws {Error} If the socket closes or fails before opening, or `signal` aborts.
 */
export function connectWebSocket(
  address: Address,
  handlers: TransportHandlers,
  signal: AbortSignal,
): Promise<Transport> {
  return new Promise((resolve, reject) => {
    // A bridge that requires a bearer token reads it from the offered protocols.
    const socket = address.bearer === undefined
      ? new WebSocket(address.url!)
      : new WebSocket(address.url!, ["lockd", `bearer.${address.bearer}`]);
    let open = false;
    let closed = false;
    /** What the runtime said went wrong (Deno: "... Invalid status code: 401"; browsers: nothing). */
    let why: string | undefined;
    const transport: Transport = {
      send(line) {
        if (socket.readyState === WebSocket.OPEN) socket.send(line);
      },
      close() {
        if (socket.readyState === WebSocket.CONNECTING || socket.readyState === WebSocket.OPEN) {
          socket.close();
        }
        finish();
      },
    };
    const finish = () => {
      if (closed) return;
      closed = true;
      signal.removeEventListener("abort", onAbort);
      if (open) handlers.closed();
      // Named by its key: the URL carries the client's id, which lets a bridge's caller act
      // on this client's grants, so it stays out of messages.
      else reject(new Error(`Cannot open WebSocket ${address.key}${why ? `: ${why}` : ""}`));
    };
    const onAbort = () => {
      socket.close();
      if (!open) {
        closed = true;
        reject(signal.reason);
      }
    };
    signal.addEventListener("abort", onAbort, { once: true });
    socket.onopen = () => {
      open = true;
      resolve(transport);
    };
    socket.onmessage = (event) => {
      if (typeof event.data === "string") handlers.line(event.data);
    };
    socket.onerror = (event) => {
      const message = (event as ErrorEvent).message;
      if (typeof message === "string" && message !== "") why = message;
    };
    socket.onclose = finish;
  });
}
