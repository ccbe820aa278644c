/**
 * The client's view of a connection: something that carries SPEC §2 lines both ways. TCP
 * (`host:port`, `tcp://host:port`) and WebSocket (`ws://`, `wss://`) implementations are
 * loaded on first use, so importing the client touches no runtime-specific API.
 *
 * @module
 */

/** Default lockd port, used when an address has none. */
export const DEFAULT_PORT = 7321;

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
 *   };
 * }
 * ```
 */
export interface Transport {
  /** Sends one line (without `\n`). Lines sent in one turn may be batched into one write. */
  send(line: string): void;
  /** Closes the connection; `closed` is then called on its handlers. */
  close(): void;
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
  /** The connection is gone (called once, whoever closed it). */
  closed(): void;
}

/**
 * Opens a transport to `address`; rejects if it cannot connect. Give one to
 * `LockClient` (`connect` option) to carry the protocol over something else.
 *
 * @example Wrap the default TCP/WebSocket connector
 * ```ts
 * import { type Connect, LockClient } from "@lockd/client";
 * import { connectTransport } from "./transport.ts";
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

/**
 * A parsed lockd address, as a custom {@linkcode Connect} receives it. A TCP address without
 * a port uses 7321.
 *
 * @example The parts of an address
 * ```ts
 * import { parseAddress } from "./transport.ts";
 * const address = parseAddress("tcp://10.0.0.1:7000");
 * console.log(address.scheme, address.hostname, address.port, address.key); // tcp 10.0.0.1 7000 10.0.0.1:7000
 * ```
 */
export interface Address {
  /** `tcp`, `ws` or `wss`. */
  scheme: "tcp" | "ws" | "wss";
  /** Host name or IP address (IPv6 without brackets). */
  hostname: string;
  /** Port. */
  port: number;
  /** The WebSocket URL (ws/wss only). */
  url?: string;
  /** The canonical form: `host:port` for TCP (as in `M` replies), the URL for WebSocket. */
  key: string;
}

/**
 * Parses `host:port`, `tcp://host:port`, `ws://host:port/path` or `wss://...`. A TCP
 * address without a port uses 7321.
 *
 * @throws {TypeError} If the address cannot be understood.
 * @example Parsing addresses
 * ```ts
 * import { parseAddress } from "./transport.ts";
 * parseAddress("10.0.0.1:7321").key; // "10.0.0.1:7321"
 * parseAddress("tcp://[::1]:7000").hostname; // "::1"
 * parseAddress("wss://locks.example.com/lockd").scheme; // "wss"
 * ```
 */
export function parseAddress(text: string): Address {
  const trimmed = text.trim();
  if (/^wss?:\/\//i.test(trimmed)) {
    let url: URL;
    try {
      url = new URL(trimmed);
    } catch {
      throw new TypeError(`Invalid lockd address "${text}"`);
    }
    const scheme = url.protocol === "wss:" ? "wss" : "ws";
    const port = url.port ? Number(url.port) : scheme === "wss" ? 443 : 80;
    return { scheme, hostname: url.hostname, port, url: url.href, key: url.href };
  }
  const rest = trimmed.replace(/^tcp:\/\//i, "");
  const match = /^(?:\[([0-9A-Fa-f:.]+)\]|([^\s:/\[\]]+))(?::([0-9]{1,5}))?$/.exec(rest);
  const port = match?.[3] === undefined ? DEFAULT_PORT : Number(match[3]);
  if (!match || port < 1 || port > 65535) {
    throw new TypeError(
      `Invalid lockd address "${text}": expected host:port, tcp://host:port, ws:// or wss:// URL`,
    );
  }
  const hostname = match[1] ?? match[2];
  const key = hostname.includes(":") ? `[${hostname}]:${port}` : `${hostname}:${port}`;
  return { scheme: "tcp", hostname, port, key };
}

/**
 * Opens a transport for `address`, loading the TCP or WebSocket implementation on demand.
 */
export const connectTransport: Connect = async (address, handlers, signal) => {
  if (address.scheme === "tcp") {
    const { connectTcp } = await import("./tcp.ts");
    return connectTcp(address, handlers, signal);
  }
  const { connectWebSocket } = await import("./ws.ts");
  return connectWebSocket(address, handlers, signal);
};
