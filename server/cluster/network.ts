/**
 * The real world of the role machine: the peer network over TCP (one {@linkcode PeerLink}
 * per peer, and the peer codec between typed messages and the lines on the links), and
 * real timers.
 *
 * @module
 */

import type { Batch } from "../batch.ts";
import type { HostPort } from "../cli.ts";
import type { Logger } from "../log.ts";
import { encodePeer, type PeerMessage } from "./peer_codec.ts";
import { PeerLink } from "./peer_link.ts";
import type { PeerNetwork, Scheduler } from "./ports.ts";

/** Options of {@linkcode TcpPeerNetwork}. */
export interface TcpPeerNetworkOptions {
  /** This node's address. */
  self: string;
  /** The other nodes, by address. */
  peers: ReadonlyMap<string, HostPort>;
  /** Pause between dial attempts of a link that is down, ms. */
  retryMs: number;
  /** Longest time one dial may take, ms. */
  connectTimeoutMs: number;
  /** The server's batch. */
  batch: Batch;
  /** Where drops are reported. */
  log: Logger;
  /** The cluster secret both ends of a link prove they know. */
  secret?: string;
  /** Dial peers with TLS, verifying them with these CA certificates (PEM). */
  tls?: { caCerts?: string[] };
}

/** Callbacks of the links' state. */
export interface LinkEvents {
  /** The link to `address` came up. */
  up(address: string): void;
  /** The link to `address` went down. */
  down(address: string): void;
}

/** The links of one node to its peers. */
export class TcpPeerNetwork implements PeerNetwork {
  #links = new Map<string, PeerLink>();

  /** @param options Addresses, timings, batch and log. @param events Link state callbacks. */
  constructor(options: TcpPeerNetworkOptions, events: LinkEvents) {
    for (const [address, target] of options.peers) {
      this.#links.set(
        address,
        new PeerLink(address, target, {
          self: options.self,
          retryMs: options.retryMs,
          connectTimeoutMs: options.connectTimeoutMs,
          batch: options.batch,
          log: options.log,
          secret: options.secret,
          tls: options.tls,
          onUp: (a) => events.up(a),
          onDown: (a) => events.down(a),
        }),
      );
    }
  }

  /** Starts dialing every peer. */
  start(): void {
    for (const link of this.#links.values()) link.start();
  }

  /** Closes every link after writing what is queued. */
  async stop(): Promise<void> {
    await Promise.all([...this.#links.values()].map((link) => link.stop()));
  }

  send(to: string, message: PeerMessage): void {
    this.#links.get(to)?.send(encodePeer(message));
  }

  broadcast(to: Iterable<string>, message: PeerMessage): void {
    let line: string | undefined;
    for (const address of to) {
      const link = this.#links.get(address);
      if (link === undefined) continue;
      line ??= encodePeer(message);
      link.send(line);
    }
  }

  up(address: string): boolean {
    return this.#links.get(address)?.up ?? false;
  }
}

/** The real timers. */
export const realScheduler: Scheduler = {
  every(ms, fn) {
    const id = setInterval(fn, ms);
    return () => clearInterval(id);
  },
  after(ms, fn) {
    const id = setTimeout(fn, ms);
    return () => clearTimeout(id);
  },
};
