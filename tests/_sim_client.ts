/**
 * Clients of the cluster simulator (`_sim_cluster.ts`): a connection to one node, served by
 * that node's real `ClientSession`, and an acquire that follows `M` redirects as
 * `LockClient` does. Requests reach the node after the network delay, as events of its
 * process (held while it is paused, dropped once it is killed).
 *
 * @module
 */

import type { ClientSession } from "../server/session.ts";
import type { SimNode } from "./_sim_node.ts";

/** What a client needs of the simulator. */
export interface ClientHost {
  /** One-way network delay, ms. */
  readonly delayMs: number;
  /** Runs fake time until `done()` holds or `maxMs` passed. */
  runUntil(done: () => boolean, maxMs: number): Promise<boolean>;
  /** A new client connection to `address`. */
  connect(address: string): SimClient;
}

/** One client connection to a node, served by the node's real `ClientSession`. */
export class SimClient {
  /** The node it is connected to. */
  readonly address: string;
  /** Every reply line, in order. */
  readonly replies: string[] = [];
  /** Called with each reply as it is sent. */
  onReply: ((line: string) => void) | undefined;
  #sim: ClientHost;
  #node: SimNode | undefined;
  #session: ClientSession | undefined;
  #closed = false;

  /** @param sim The simulator. @param node The node (undefined: connection refused). */
  constructor(sim: ClientHost, address: string, node: SimNode | undefined) {
    this.#sim = sim;
    this.address = address;
    this.#node = node;
    this.#session = node?.accept((line) => {
      this.replies.push(line);
      this.onReply?.(line);
    });
    if (node === undefined) this.#closed = true;
  }

  /** Whether the connection is closed (by `close()`, or the node died). */
  get closed(): boolean {
    return this.#closed;
  }

  /** Sends one request line; it reaches the node after the network delay. */
  send(line: string): void {
    const node = this.#node;
    const session = this.#session;
    if (this.#closed || node === undefined || session === undefined) return;
    node.process.after(this.#sim.delayMs, () => session.line(line));
  }

  /** Sends `line` and runs fake time until its reply arrives (at most `maxMs`). */
  async request(line: string, maxMs = 100): Promise<string | undefined> {
    const count = this.replies.length;
    if (this.#closed) return undefined;
    this.send(line);
    await this.#sim.runUntil(() => this.replies.length > count || this.#closed, maxMs);
    return this.replies[count];
  }

  /** Closes the connection: the node drops its queued acquires and parked requests. */
  close(): void {
    const node = this.#node;
    const session = this.#session;
    if (this.#closed || node === undefined || session === undefined) return;
    this.#closed = true;
    node.process.after(this.#sim.delayMs, () => node.closed(session));
  }

  /** @internal The node died. */
  lost(): void {
    this.#closed = true;
  }
}

/**
 * An acquire that follows `M` redirects as `LockClient` does: resent at once, on a
 * connection to the node named, where it queues again.
 */
export class FollowingAcquire {
  /** Every reply, as `<node> <reply line>`. */
  readonly replies: string[] = [];
  /** The token once granted. */
  token: bigint | undefined;
  /** Called once granted. */
  onGrant: ((token: bigint) => void) | undefined;
  #sim: ClientHost;
  #line: string;

  /** @param sim The simulator. @param address First node. @param line `A <key> <lease> <wait>`. */
  constructor(sim: ClientHost, address: string, line: string) {
    this.#sim = sim;
    this.#line = line;
    this.#send(address);
  }

  #send(address: string): void {
    const client = this.#sim.connect(address);
    client.onReply = (reply) => {
      this.replies.push(`${address} ${reply}`);
      const redirect = /^A \S+ M (\S+)$/.exec(reply);
      const grant = /^A \S+ A (\d+)$/.exec(reply);
      if (redirect !== null) {
        client.close();
        this.#send(redirect[1]);
      } else if (grant !== null) {
        this.token = BigInt(grant[1]);
        this.onGrant?.(this.token);
      }
    };
    client.send(this.#line);
  }
}
