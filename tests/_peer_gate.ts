/**
 * Test helper: a TCP front port for one lockd node that can hold back one directed peer link
 * at a time, for partitions of real processes (tests/cluster_faults_test.ts, the chaos
 * harness in chaos/). A node advertises the gate's address (`--advertise`) and every node's
 * `--peers` lists the gates, so peer links go through the gates while clients keep using the
 * nodes' own ports.
 *
 * @module
 */

/**
 * A front port for one node (its `--advertise` address): forwards every connection to the
 * node, and holds back, while told to, what given peers send it on the links they dialled
 * (a peer is known by its `PEER 5 <address>` line). Held bytes flow again on `heal`, in
 * order, as after a network stall. Connections that do not start with a peer handshake
 * (clients) pass through untouched.
 *
 * @example Cut what node B sends to node A, then heal
 * ```ts
 * const gateA = new PeerGate(portOfA); // A runs with --advertise gateA.address
 * gateA.hold(gateB.address); // B's peer messages to A are held back
 * gateA.heal(); // and flow again, in order
 * await gateA.close();
 * ```
 */
export class PeerGate {
  /** The gate's own port on 127.0.0.1. */
  readonly port: number;
  #target: number;
  #listener: Deno.TcpListener;
  #accepting: Promise<void>;
  #pumps = new Set<Promise<void>>();
  #conns = new Set<Deno.TcpConn>();
  #held = new Set<string>();
  #healed: { promise: Promise<void>; resolve: () => void } = Promise.withResolvers<void>();
  #closed = false;

  /** Listens on a free port of 127.0.0.1 and forwards to `127.0.0.1:<target>`. */
  constructor(target: number) {
    this.#target = target;
    this.#listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    this.port = (this.#listener.addr as Deno.NetAddr).port;
    this.#accepting = this.#accept();
  }

  /** `127.0.0.1:<port>`: what the node advertises and every `--peers` list names. */
  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  /** Holds what `peer` sends from now on. */
  hold(peer: string): void {
    this.#held.add(peer);
  }

  /** Lets everything through again. */
  heal(): void {
    this.#held.clear();
    this.#healed.resolve();
    this.#healed = Promise.withResolvers<void>();
  }

  /** Heals, stops listening, closes every forwarded connection and waits for the pumps. */
  async close(): Promise<void> {
    this.#closed = true;
    this.heal();
    this.#listener.close();
    for (const conn of this.#conns) {
      try {
        conn.close();
      } catch {
        // Already closed.
      }
    }
    await this.#accepting;
    await Promise.all(this.#pumps);
  }

  async #accept(): Promise<void> {
    try {
      for await (const client of this.#listener) {
        const pump = this.#pair(client);
        this.#pumps.add(pump);
        pump.finally(() => this.#pumps.delete(pump));
      }
    } catch {
      // Closed.
    }
  }

  async #pair(client: Deno.TcpConn): Promise<void> {
    this.#conns.add(client);
    let server: Deno.TcpConn;
    try {
      server = await Deno.connect({ hostname: "127.0.0.1", port: this.#target });
    } catch {
      client.close();
      this.#conns.delete(client);
      return;
    }
    this.#conns.add(server);
    if (this.#closed) server.close();
    let from: string | undefined;
    let head = "";
    const closeBoth = () => {
      for (const conn of [client, server]) {
        try {
          conn.close();
        } catch {
          // Already closed.
        }
        this.#conns.delete(conn);
      }
    };
    const pump = async (src: Deno.TcpConn, dst: Deno.TcpConn, inbound: boolean) => {
      const buf = new Uint8Array(64 * 1024);
      try {
        for (;;) {
          const n = await src.read(buf);
          if (n === null) break;
          const data = buf.slice(0, n);
          if (inbound && from === undefined && head.length < 512) {
            head += new TextDecoder().decode(data);
            const match = /^PEER \d+ (\S+)\r?\n/.exec(head);
            if (match) from = match[1];
            else if (head.includes("\n")) from = "client";
          }
          while (inbound && from !== undefined && this.#held.has(from) && !this.#closed) {
            await this.#healed.promise;
          }
          let offset = 0;
          while (offset < data.length) offset += await dst.write(data.subarray(offset));
        }
      } catch {
        // Closed.
      }
      closeBoth();
    };
    await Promise.all([pump(client, server, true), pump(server, client, false)]);
  }
}
