/**
 * The outbound half of a peer connection: this node dials each peer, introduces itself
 * with the peer handshake and sends its heartbeats and replication on that connection; the
 * peer does the same the other way (docs/cluster.md, "Peer protocol"). A link that drops is
 * redialled every `retryMs`.
 *
 * @module
 */

import type { Batch } from "../batch.ts";
import type { HostPort } from "../cli.ts";
import { LineSocket } from "../line_socket.ts";
import type { Logger } from "../log.ts";
import { encodePeer } from "./peer_codec.ts";

/** Options of {@linkcode PeerLink}. */
export interface PeerLinkOptions {
  /** This node's address, sent in the handshake. */
  self: string;
  /** Pause between dial attempts while the link is down, in ms. */
  retryMs: number;
  /** Longest time one dial may take, in ms. */
  connectTimeoutMs: number;
  /** The server's batch (the link writes at the end of each). */
  batch: Batch;
  /** Where drops are reported. */
  log: Logger;
  /** The link came up (after the handshake was queued). */
  onUp(address: string): void;
  /** The link went down. */
  onDown(address: string): void;
}

/** Output a peer may owe us before its link is dropped (a snapshot of a million locks fits). */
const PEER_OUTPUT_LIMIT = 512 * 1024 * 1024;

/** A self-healing outbound connection to one peer. */
export class PeerLink {
  /** The peer's address as listed in `--peers`. */
  readonly address: string;
  #target: HostPort;
  #options: PeerLinkOptions;
  #socket: LineSocket | undefined;
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
    return this.#socket !== undefined && !this.#socket.closed;
  }

  /** Starts dialing. */
  start(): void {
    this.#dial();
  }

  /** Queues one line; dropped if the link is down (heartbeats repeat, streams resync). */
  send(line: string): void {
    this.#socket?.send(line);
  }

  /** Closes the link for good, after writing what is queued. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    const socket = this.#socket;
    if (socket === undefined) return;
    socket.closeAfterFlush();
    await socket.done;
  }

  async #dial(): Promise<void> {
    if (this.#stopped || this.#dialing || this.up) return;
    this.#dialing = true;
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), this.#options.connectTimeoutMs);
    try {
      const conn = await Deno.connect({
        hostname: this.#target.hostname,
        port: this.#target.port,
        signal: abort.signal,
      });
      if (this.#stopped) {
        conn.close();
        return;
      }
      conn.setNoDelay(true);
      const socket = new LineSocket(conn, this.address, {
        line: () => {}, // Peers never write on the link we dialled.
        closed: () => {
          if (this.#socket !== socket) return;
          this.#socket = undefined;
          this.#options.onDown(this.address);
          this.#retry();
        },
      }, {
        batch: this.#options.batch,
        log: this.#options.log,
        urgent: true,
        dropAt: PEER_OUTPUT_LIMIT,
        pauseAt: PEER_OUTPUT_LIMIT,
      });
      this.#socket = socket;
      socket.send(encodePeer({ type: "PEER", address: this.#options.self }));
      this.#options.onUp(this.address);
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
