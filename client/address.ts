/**
 * lockd addresses as users write them: `host:port` (TCP, port 7321 when left out),
 * `tcp://host:port`, `tls://host:port` (TCP with TLS), and `ws://` or `wss://` URLs of a
 * WebSocket bridge.
 *
 * @module
 */

/** Default lockd port, used when an address has none. */
export const DEFAULT_PORT = 7321;

/**
 * A parsed lockd address, as a custom `Connect` receives it. A TCP address without
 * a port uses 7321.
 *
 * @example The parts of an address
 * ```ts
 * import { parseAddress } from "@lockd/client";
 * const address = parseAddress("tcp://10.0.0.1:7000");
 * console.log(address.scheme, address.hostname, address.port, address.key); // tcp 10.0.0.1 7000 10.0.0.1:7000
 * ```
 */
export interface Address {
  /** `tcp`, `tls`, `ws` or `wss`. */
  scheme: "tcp" | "tls" | "ws" | "wss";
  /** Host name or IP address (IPv6 without brackets). */
  hostname: string;
  /** Port. */
  port: number;
  /** The WebSocket URL (ws/wss only). */
  url?: string;
  /** The canonical form: `host:port` for TCP and TLS (as in `M` replies), the URL for WebSocket. */
  key: string;
  /** CA certificates (PEM) a `tls` address is verified with (default: the system's roots). */
  caCerts?: string[];
  /** A bearer token a bridge (`ws`, `wss`) requires. */
  bearer?: string;
}

/**
 * Parses `host:port`, `tcp://host:port`, `tls://host:port`, `ws://host:port/path` or
 * `wss://...`. A TCP or TLS address without a port uses 7321.
 *
 * @throws {TypeError} If the address cannot be understood.
 * @example Parsing addresses
 * ```ts
 * import { parseAddress } from "@lockd/client";
 * parseAddress("10.0.0.1:7321").key; // "10.0.0.1:7321"
 * parseAddress("tcp://[::1]:7000").hostname; // "::1"
 * parseAddress("wss://locks.example.com/lockd").scheme; // "wss"
 * ```
 */
export function parseAddress(text: string): Address {
  if (typeof text !== "string") {
    throw new TypeError(`Invalid lockd address: expected a string, got ${kindOf(text)}`);
  }
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
  const tls = /^tls:\/\//i.test(trimmed);
  const rest = trimmed.replace(/^(?:tcp|tls):\/\//i, "");
  const match = /^(?:\[([0-9A-Fa-f:.]+)\]|([^\s:/\[\]]+))(?::([0-9]{1,5}))?$/.exec(rest);
  const port = match?.[3] === undefined ? DEFAULT_PORT : Number(match[3]);
  if (!match || port < 1 || port > 65535) {
    throw new TypeError(
      `Invalid lockd address "${text}": expected host:port, tcp://host:port, tls://host:port, ws:// or wss:// URL`,
    );
  }
  const hostname = match[1] ?? match[2];
  const key = hostname.includes(":") ? `[${hostname}]:${port}` : `${hostname}:${port}`;
  return { scheme: tls ? "tls" : "tcp", hostname, port, key };
}

/** How an address reads in messages: its key, with `tls://` in front for TLS. */
export function addressText(address: Address): string {
  return address.scheme === "tls" ? `tls://${address.key}` : address.key;
}

/**
 * The addresses a `LockClient` was given, as a list: one string or an array of strings.
 *
 * @throws {TypeError} If there is none, or `servers` is neither (an options object passed
 * first, say).
 */
export function serverList(servers: unknown): string[] {
  if (typeof servers === "string") return [servers];
  const iterable = typeof servers === "object" && servers !== null && Symbol.iterator in servers;
  if (!iterable) {
    throw new TypeError(
      `LockClient takes its server addresses first: a string or an array of strings, got ${
        kindOf(servers)
      }`,
    );
  }
  const list = [...(servers as Iterable<unknown>)] as string[];
  if (list.length === 0) throw new TypeError("LockClient needs at least one server address");
  return list;
}

/** What a value that should have been a string is, for an error message (never its content). */
function kindOf(value: unknown): string {
  if (value === null || value === undefined) return String(value);
  if (Array.isArray(value)) return "an array";
  return typeof value === "object" ? "an object" : `a ${typeof value}`;
}
