/**
 * Closing a connection that has requests outstanding without leaving a grant behind
 * (docs/client.md, "Held locks"). The server drops a connection's queued acquires once it
 * reads its close (docs/protocol.md, "Semantics"), but a release from elsewhere may grant
 * one of them just before: closed at once, the client would never see that grant, and the
 * key would stay held until its lease ends. So such a connection is half-closed instead
 * (its queued lines written first): the client stops sending and keeps reading until the
 * server closes it. Replies still reach their requests; every grant the server made before
 * it read the close arrives and is released on a fresh connection to the same node (never
 * handed to its request). Both steps are bounded by {@linkcode CLOSE_DRAIN_MS}. The
 * client's close gate (close_gate.ts) holds every rejection meanwhile, so that awaiting
 * `close()` before handling a pending acquire's rejection keeps working.
 *
 * @module
 */

import type { Address } from "./address.ts";
import { parseReply, releaseLine } from "./codec.ts";
import { after } from "./timer.ts";
import type { Connect, Transport } from "./transport.ts";

/** Longest wait for the server to close a half-closed connection, and for late releases, ms. */
export const CLOSE_DRAIN_MS = 1000;

/** What a drain needs to release late grants: how to reach the node again. */
export interface DrainOptions {
  /** The node the connection is to. */
  address: Address;
  /** Opens a fresh connection to it. */
  connect: Connect;
  /** The hello line to send first on it, if the client has one. */
  hello: string | undefined;
}

/** One connection being half-closed; the owner passes it the connection's lines and close. */
export class CloseDrain {
  /** Resolves once the server closed the connection (or the bound passed) and late grants
   * were released. Never rejects. */
  readonly done: Promise<void>;
  #transport: Transport;
  #grants: { key: string; token: bigint }[] = [];
  #ended!: () => void;
  #cancel: () => void = () => {};

  /** For `transport` (it must have `end`); {@linkcode start} half-closes it. */
  constructor(transport: Transport, options: DrainOptions) {
    this.#transport = transport;
    const ended = new Promise<void>((resolve) => this.#ended = resolve);
    this.done = ended
      .then(() => this.#grants.length > 0 ? releaseLate(this.#grants, options) : undefined)
      .catch(() => {});
  }

  /** Half-closes the transport (its owner routes its lines and close here first). */
  start(): void {
    // A strong timer and a referenced socket: a script that awaits close() is not cut short.
    this.#cancel = after(CLOSE_DRAIN_MS, () => this.closed(this.#transport));
    this.#transport.ref?.(true);
    this.#transport.end!();
  }

  /** A grant received on the draining connection: kept to be released (never handed on). */
  take(key: string, token: bigint): void {
    this.#grants.push({ key, token });
  }

  /** `transport` closed (or the bound passed): the drain is over. */
  closed(transport: Transport): void {
    if (transport !== this.#transport) return;
    this.#cancel();
    transport.close();
    this.#ended();
  }
}

/**
 * Releases `grants` on a fresh connection to `options.address`; resolves once each is
 * answered `R` or `N` (a redirect or an error leaves it to its lease), or after
 * {@linkcode CLOSE_DRAIN_MS} to connect and as long again for the answers.
 */
async function releaseLate(
  grants: { key: string; token: bigint }[],
  options: DrainOptions,
): Promise<void> {
  let left = grants.length;
  let finish!: () => void;
  const finished = new Promise<void>((resolve) => finish = resolve);
  const transport = await options.connect(options.address, {
    line: (text) => {
      const reply = parseReply(text);
      if (reply?.op === "R" && (reply.status === "R" || reply.status === "N") && --left === 0) {
        finish();
      }
    },
    closed: () => finish(),
  }, AbortSignal.timeout(CLOSE_DRAIN_MS));
  const cancel = after(CLOSE_DRAIN_MS, () => finish());
  try {
    if (options.hello !== undefined) transport.send(options.hello);
    for (const { key, token } of grants) transport.send(releaseLine(key, token));
    transport.ref?.(true);
    await finished;
  } finally {
    cancel();
    transport.close();
  }
}
