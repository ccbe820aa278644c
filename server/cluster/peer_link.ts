/**
 * The outbound half of a peer connection: this node dials each peer, introduces itself with
 * `PEER 1 <address>` and sends its heartbeats and replication on that connection; the peer
 * does the same the other way. A link that drops is redialled every `retryMs`.
 *
 * @module
 */

import { Connection } from "../conn.ts";
import type { HostPort } from "../cli.ts";

/** Options of {@linkcode PeerLink}. */
export interface PeerLinkOptions {
  /** This node's address, sent in the handshake. */
  self: string;
  /** Pause between dial attempts while the link is down, in ms. */
  retryMs: number;
  /** Longest time one dial may take, in ms. */
  connectTimeoutMs: number;
  /** The link came up (after the handshake was queued). */
  onUp(link: PeerLink): void;
  /** The link went down. */
  onDown(link: PeerLink): void;
}

/** Output a peer may owe us before its link is dropped (a snapshot of a million locks fits). */
const PEER_OUTPUT_LIMIT = 512 * 1024 * 1024;

/** A self-healing outbound connection to one peer. */
export class PeerLink {
  /** The peer's address as listed in `--peers`. */
  readonly address: string;
  #target: HostPort;
  #options: PeerLinkOptions;
  #conn: Connection | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #dialing = false;
  #stopped = false;

  /** @param address The peer's `host:port`. @param target Parsed. @param options Settings. */
  constructor(address: string, target: HostPort, options: PeerLinkOptions) {
    this.address = address;
    this.#target = target;
    this.#options = options;
  }

  /** Whether lines can be sent now. */
  get up(): boolean {
    return this.#conn !== undefined && !this.#conn.closed;
  }

  /** Starts dialing. */
  start(): void {
    this.#dial();
  }

  /** Queues one line; dropped if the link is down (heartbeats repeat, streams resync). */
  send(line: string): void {
    this.#conn?.send(line);
  }

  /** Drops the connection; it is redialled later. */
  reset(): void {
    this.#conn?.close();
  }

  /** Closes the link for good, after writing what is queued. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    const conn = this.#conn;
    if (conn === undefined) return;
    conn.closeAfterFlush();
    await conn.done;
  }

  async #dial(): Promise<void> {
    if (this.#stopped || this.#dialing || this.up) return;
    this.#dialing = true;
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), this.#options.connectTimeoutMs);
    try {
      const socket = await Deno.connect({
        hostname: this.#target.hostname,
        port: this.#target.port,
        signal: abort.signal,
      });
      if (this.#stopped) {
        socket.close();
        return;
      }
      const conn = new Connection(socket, {
        line: () => {}, // Peers never write on the link we dialled.
        closed: () => {
          if (this.#conn !== conn) return;
          this.#conn = undefined;
          this.#options.onDown(this);
          this.#retry();
        },
      }, { dropAtBytes: PEER_OUTPUT_LIMIT, pauseAtBytes: PEER_OUTPUT_LIMIT });
      this.#conn = conn;
      conn.send(`PEER 1 ${this.#options.self}`);
      this.#options.onUp(this);
    } catch {
      this.#retry();
    } finally {
      clearTimeout(timer);
      this.#dialing = false;
    }
  }

  #retry(): void {
    if (this.#stopped || this.#timer !== undefined) return;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#dial();
    }, this.#options.retryMs);
  }
}
