/**
 * One managed connection of a `LockClient` (docs/client.md, "Connections"): connects in
 * the background, reconnects every `reconnectIntervalMs` after a drop, pipelines requests
 * and matches replies by the echoed (op, key), several outstanding requests with the same
 * pair in the order they were sent; probes a connection that goes silent and drops it when
 * the probe goes unanswered.
 *
 * @module
 */

import type { Address } from "./address.ts";
import { CloseDrain } from "./close_drain.ts";
import { MAX_REFUSAL_DELAY_MS, parseReply, PROBE, type Reply } from "./codec.ts";
import {
  ConnectionLost,
  PendingReplies,
  PromiseReceiver,
  type Receiver,
} from "./pending_replies.ts";
import { after, Alarm, type CancelTimer, type TimerQueue, timers, weakTimers } from "./timer.ts";
import type { Connect, Transport } from "./transport.ts";

/** How early a look of the watch may come and still count its full interval, in ms. */
const LOOK_SLACK_MS = 1;

/** The hello a client sends first on every connection (docs/protocol.md, "Sessions"). */
export interface HelloLine {
  /** The line. */
  line: string;
  /** Its session. */
  session: string | undefined;
  /** Whether it presents a credential (a wrong one is refused after a delay). */
  credential?: boolean;
}

/** Options shared by every connection of a client. */
export interface ManagedConnectionOptions {
  /** Opens transports. */
  connect: Connect;
  /** Pause between background reconnection attempts, in ms. */
  reconnectIntervalMs: number;
  /** Longest time one connection attempt may take, in ms. */
  connectTimeoutMs: number;
  /** Aborts when the client closes. */
  closed: AbortSignal;
  /** Reports a measured round trip (connect, release, extend), in ms. */
  roundTrip(ms: number): void;
  /**
   * A connection with requests outstanding that receives nothing for this long is dropped
   * (a frozen or unreachable node), so its requests move on. It is probed with `?` after a
   * third of it. In ms.
   */
  staleAfterMs: number;
  /** The connection dropped (after its requests were failed). */
  lost(): void;
  /** The hello line sent first on every connection (docs/protocol.md, "Sessions"). */
  hello?: HelloLine;
}

/** A connection to one address that comes back by itself. */
export class ManagedConnection {
  /** Where it connects. */
  readonly address: Address;
  #options: ManagedConnectionOptions;
  #transport: Transport | undefined;
  /** Whether the transport said hello and may carry requests. */
  #ready = false;
  #refusal: string | undefined;
  #connecting: Promise<boolean> | undefined;
  /** What waits for replies. */
  #pending = new PendingReplies();
  #reconnectTimer: CancelTimer | undefined;
  #lastError: string | undefined;
  /** Outstanding requests (pings included). */
  #outstanding = 0;
  /** Lines received so far, over all of its transports. */
  #received = 0;
  #drops = 0;
  /**
   * Signs of life for the watch: lines received, and the moments silence starts to count
   * from (a connection opened, a request sent to an idle one). Counting them costs nothing
   * per line, where reading the clock per line would.
   */
  #activity = 0;
  /** {@linkcode #activity} when the watch last looked. */
  #activitySeen = 0;
  /** When the watch last saw a sign of life (an upper bound of the last one), ms. */
  #lastHeard = 0;
  #watchAlarm = new Alarm(() => this.#watchTick());
  /** The watch's timers: weak if the transport refs itself while requests are out. */
  #watchTimers: TimerQueue = weakTimers;
  /** The half-close of the last transport, when the client closed with acquires queued. */
  #drain: CloseDrain | undefined;
  /** The client's close began: no request goes out, no transport is opened. */
  #closing = false;
  /** The one request whose round trip is being measured, and when it was sent. */
  #timed: Receiver | undefined;
  #timedAt = 0;
  /** The hello of the current transport, until it is answered. */
  #hello: Receiver | undefined;
  /** Whether a node accepted this client's hello on this connection once. */
  #helloAccepted = false;

  /** @param address Where to connect. @param options Shared settings. */
  constructor(address: Address, options: ManagedConnectionOptions) {
    this.address = address;
    this.#options = options;
    options.closed.addEventListener("abort", this.#onClientClosed, { once: true });
  }

  #onClientClosed = () => this.#shutdown();

  /** Down, not connecting, nothing outstanding: unused (an `M`-named one may be retired). */
  get dormant(): boolean {
    return !this.up && this.#connecting === undefined && this.#outstanding === 0 &&
      this.#drain === undefined;
  }

  /** Stops this connection for good: no reconnect, and the client's close no longer reaches it. */
  retire(): void {
    this.#closing = true;
    this.#options.closed.removeEventListener("abort", this.#onClientClosed);
    this.#shutdown();
  }

  /**
   * The close's first step (client/close_drain.ts): with requests outstanding (an acquire
   * queued, a release on its way), half-closes and reads to the end; replies still reach
   * their requests, grants are released on a fresh connection, the rest fails at the close's
   * abort. Resolves at once when nothing is outstanding.
   */
  drain(): Promise<void> {
    this.#closing = true;
    this.#ready = false;
    const transport = this.#transport;
    if (transport?.end === undefined || this.#outstanding === 0) return Promise.resolve();
    // Silence is expected now (the node answers, then closes): the watch must not cut it short.
    this.#watchTimers.cancel(this.#watchAlarm);
    const { connect, hello } = this.#options;
    const drain = this.#drain = new CloseDrain(transport, {
      address: this.address,
      connect,
      hello: hello?.line,
    });
    drain.start();
    return drain.done;
  }

  /** Whether requests can be sent now. */
  get up(): boolean {
    return this.#transport !== undefined && this.#ready;
  }

  /** Why the node refused this client's last hello (`E ...`); `undefined` once one passed. */
  get refusal(): string | undefined {
    return this.#refusal;
  }

  /** Why the last attempt failed or the connection was lost, if it did. */
  get lastError(): string | undefined {
    return this.#lastError;
  }

  /** How many times it was lost so far (compare two readings to see whether it dropped). */
  get drops(): number {
    return this.#drops;
  }

  /** How many lines arrived so far, the hello's answer aside (compare two readings). */
  get received(): number {
    return this.#received;
  }

  /**
   * Checks that the node still answers: sends a probe (`?`) and resolves `true` as soon as
   * anything arrives. If nothing arrives within `graceMs`, the connection is dropped as
   * frozen (its requests move to other connections) and it resolves `false`; also `false`
   * if it is down or drops meanwhile. While a refusal may be on its way (see
   * `#refusalMayBeLate`) the grace is {@linkcode MAX_REFUSAL_DELAY_MS} longer.
   */
  probe(graceMs: number): Promise<boolean> {
    const transport = this.#transport;
    if (transport === undefined || !this.#ready) return Promise.resolve(false);
    const before = this.#received;
    if (this.#refusalMayBeLate()) graceMs += MAX_REFUSAL_DELAY_MS;
    return new Promise<boolean>((resolve) => {
      const cancel = after(graceMs, () => {
        if (this.#received !== before) return resolve(true);
        this.#dropFrozen(transport, `no reply to a probe for ${Math.round(graceMs)} ms`);
        resolve(false);
      });
      this.request(PROBE, "-", PROBE).then(
        () => resolve(true),
        () => resolve(false),
      ).finally(cancel);
    });
  }

  /**
   * When the oldest request with this (op, key) outstanding here was sent (its `sentSeq`),
   * or `Infinity` if there is none.
   */
  oldest(op: string, key: string): number {
    return this.#pending.oldest(op, key);
  }

  /** Whether a request with this (op, key) is outstanding here. */
  outstanding(op: string, key: string): boolean {
    return this.#pending.has(op, key);
  }

  /**
   * Connects now unless connected or connecting. Resolves `true` once usable, `false` if
   * the attempt failed (a background retry is then scheduled).
   */
  connect(): Promise<boolean> {
    if (this.up) return Promise.resolve(true);
    if (this.#options.closed.aborted || this.#closing) return Promise.resolve(false);
    this.#connecting ??= this.#open().finally(() => this.#connecting = undefined);
    return this.#connecting;
  }

  /**
   * Sends a request line and resolves with the reply whose (op, key) echo matches.
   *
   * @throws {ConnectionLost} If not connected, or if the connection drops before the reply.
   */
  request(op: string, key: string, line: string): Promise<Reply> {
    if (!this.#ready) return Promise.reject(new ConnectionLost(this.address.key));
    return this.#request(op, key, line);
  }

  /**
   * Sends a request line; `receiver` gets the reply whose (op, key) echo matches, or hears
   * that the connection dropped first (also at once, in a microtask, if it is not up).
   */
  send(op: string, key: string, line: string, receiver: Receiver): void {
    if (!this.#ready || this.#transport === undefined) {
      queueMicrotask(() => receiver.lost(new ConnectionLost(this.address.key)));
      return;
    }
    this.#send(this.#transport, op, key, line, receiver);
  }

  #request(op: string, key: string, line: string): Promise<Reply> {
    const transport = this.#transport;
    if (transport === undefined) return Promise.reject(new ConnectionLost(this.address.key));
    return new Promise<Reply>((resolve, reject) => {
      this.#send(transport, op, key, line, new PromiseReceiver(resolve, reject));
    });
  }

  #send(transport: Transport, op: string, key: string, line: string, receiver: Receiver): void {
    if (this.#outstanding++ === 0) {
      // A connection keeps the process alive only while it has requests outstanding.
      transport.ref?.(true);
      // Idle time is not silence: the watch starts over from now (a weak alarm left from the
      // last busy spell is moved, or the first look would come up to a third late).
      this.#watch();
    } else if (!this.#watchTimers.scheduled(this.#watchAlarm)) this.#watch();
    // Pings, releases and extends are answered at once: their round trip bounds latency.
    // One at a time is timed (two clock readings), which under load is one per round trip.
    if (op !== "A" && this.#timed === undefined) {
      this.#timed = receiver;
      this.#timedAt = performance.now();
    }
    this.#pending.add(op, key, receiver);
    transport.send(line);
  }

  async #open(): Promise<boolean> {
    this.#reconnectTimer?.();
    this.#reconnectTimer = undefined;
    const attempt = new AbortController();
    const cancelTimeout = after(
      this.#options.connectTimeoutMs,
      () => attempt.abort(new Error("connect timed out")),
    );
    const onClose = () => attempt.abort(new Error("client closed"));
    this.#options.closed.addEventListener("abort", onClose, { once: true });
    let transport: Transport | undefined;
    let dead = false;
    try {
      transport = await this.#options.connect(this.address, {
        line: (text) => this.#reply(text),
        closed: (reason) => {
          dead = true;
          if (reason !== undefined) this.#lastError = reason;
          if (transport === undefined) return;
          if (this.#drain !== undefined) this.#drain.closed(transport);
          else this.#lost(transport);
        },
      }, attempt.signal);
      // Closed, or closing (a dial that began before the close): it carries nothing more.
      if (this.#options.closed.aborted || dead || this.#closing) {
        transport.close();
        if (dead) this.#scheduleReconnect();
        return false;
      }
      this.#transport = transport;
      this.#watchTimers = transport.ref === undefined ? timers : weakTimers;
      this.#activity++;
      this.#sayHello(transport);
      this.#ready = true;
      this.#lastError = undefined;
      this.#ping();
      return true;
    } catch (error) {
      this.#lastError = error instanceof Error ? error.message : String(error);
      this.#scheduleReconnect();
      return false;
    } finally {
      cancelTimeout();
      this.#options.closed.removeEventListener("abort", onClose);
    }
  }

  /**
   * Sends the hello (when the client has one) first on a fresh connection. Its answer is not
   * waited for: the server handles lines in order, so requests may follow at once (no round
   * trip is added to a connect, and a node that froze is noticed by the requests' probes as
   * without a hello). A refusal (a wrong credential) is kept in {@linkcode refusal} before
   * the server closes the connection, so the requests it fails can say why. A node answers
   * the hello before any later line; one that answers a later line first never will, and is
   * not waited for (the hello would keep the process alive).
   */
  #sayHello(transport: Transport): void {
    const hello = this.#options.hello;
    if (hello === undefined) return;
    const answered = new Promise<Reply>((resolve, reject) => {
      this.#hello = new PromiseReceiver(resolve, reject);
    });
    this.#send(transport, "HELLO", "", hello.line, this.#hello!);
    answered.then((reply) => {
      // Accepted, or answered `E unknown op` by a server that has no hellos.
      if (reply.status === "OK" || (reply.status === "E" && reply.text === "unknown op")) {
        this.#refusal = undefined;
        this.#helloAccepted = true;
        return;
      }
      this.#refusal = reply.status === "E" ? reply.text ?? "hello refused" : "hello refused";
      this.#dropFrozen(transport, this.#refusal);
    }, () => {});
  }

  /**
   * Measures the round trip of a fresh connection with a request that changes nothing: an
   * unknown op, answered `? - E unknown op` by any node (docs/protocol.md). Sent before anything
   * else, so the latency is known before the first grant arrives.
   */
  #ping(): void {
    this.request(PROBE, "-", PROBE).catch(() => {});
  }

  /**
   * Keeps an eye on a connection while requests are outstanding on it: looks every third of
   * `staleAfterMs`, probes it once it was silent for that long, drops it once it was silent
   * for all of it (and for {@linkcode MAX_REFUSAL_DELAY_MS} more while a refusal may be on its
   * way).
   */
  #watch(): void {
    if (this.#outstanding === 0) return;
    const now = performance.now();
    // A fresh watch starts with a request sent to an idle connection: silence counts from now.
    this.#activitySeen = this.#activity;
    this.#lastHeard = now;
    this.#watchTimers.schedule(this.#watchAlarm, now + this.#options.staleAfterMs / 3);
  }

  #watchTick(): void {
    const transport = this.#transport;
    if (transport === undefined || this.#outstanding === 0) return;
    const now = performance.now();
    // Something arrived since the last look (or silence restarted): it was heard by now.
    if (this.#activitySeen !== this.#activity) {
      this.#activitySeen = this.#activity;
      this.#lastHeard = now;
    }
    const probeMs = this.#options.staleAfterMs / 3;
    const silentMs = now - this.#lastHeard;
    const staleMs = this.#options.staleAfterMs +
      (this.#refusalMayBeLate() ? MAX_REFUSAL_DELAY_MS : 0);
    // The last sign of life is known to a look, not to the moment: a look that comes a
    // fraction of a millisecond early (timers round to whole ms) still counts in full.
    if (silentMs + LOOK_SLACK_MS >= staleMs) {
      this.#dropFrozen(transport, `no reply for ${Math.round(silentMs)} ms`);
      return;
    }
    // The next look first: the probe, sent to a watched connection, must not restart it.
    this.#watchTimers.schedule(this.#watchAlarm, now + probeMs);
    if (silentMs + LOOK_SLACK_MS >= probeMs) this.#ping();
  }

  /** Closes `transport` (if still current) as frozen; it is reported lost, so its requests move on. */
  #dropFrozen(transport: Transport, why: string): void {
    if (this.#transport !== transport) return;
    this.#lastError = why;
    transport.close();
  }

  #reply(text: string): void {
    this.#activity++;
    const reply = parseReply(text);
    if (reply === undefined) {
      this.#received++;
      // Not a reply of the protocol: this stream cannot be trusted to match replies any more.
      this.#lastError = `malformed reply ${JSON.stringify(text.slice(0, 100))}`;
      this.#transport?.close();
      return;
    }
    // The hello's answer echoes its session, but a server without hellos echoes `1`.
    const key = reply.op === "HELLO" ? "" : reply.key;
    const receiver = this.#pending.take(reply.op, key);
    if (receiver === undefined || receiver !== this.#hello) this.#received++; // See `received`.
    if (this.#hello !== undefined) {
      if (receiver === this.#hello) this.#hello = undefined;
      else this.#forgetHello();
    }
    // A grant while the client's close drains this connection: released on a fresh one.
    const late = this.#drain !== undefined && reply.op === "A" && reply.status === "A";
    if (late) this.#drain!.take(reply.key, reply.token!);
    if (receiver === undefined) {
      // `- - E ...` (too many connections, line too long) precedes a close: keep the reason.
      if (reply.status === "E") this.#lastError = reply.text;
      return;
    }
    if (--this.#outstanding === 0) this.#idle();
    if (receiver === this.#timed) {
      this.#timed = undefined;
      this.#options.roundTrip(performance.now() - this.#timedAt);
    }
    if (late) receiver.lost(new ConnectionLost(this.address.key, "client closed"));
    else receiver.replied(reply);
  }

  /** Nothing outstanding: the connection, and a strong watch, may let the process exit. */
  #idle(): void {
    this.#transport?.ref?.(false);
    if (this.#watchTimers === timers) timers.cancel(this.#watchAlarm);
  }

  /**
   * Whether silence may be a refusal on its way (a wrong credential is answered after up to
   * {@linkcode MAX_REFUSAL_DELAY_MS}): only while a credential's hello is unanswered and none
   * was ever accepted here, so a frozen node does not hold a known client's requests longer.
   */
  #refusalMayBeLate(): boolean {
    return this.#hello !== undefined && this.#options.hello?.credential === true &&
      !this.#helloAccepted;
  }

  /** Stops waiting for the hello's answer: a later line was answered first. */
  #forgetHello(): void {
    const hello = this.#pending.take("HELLO", "");
    this.#hello = undefined;
    if (hello === undefined) return;
    if (this.#timed === hello) this.#timed = undefined;
    if (--this.#outstanding === 0) this.#idle();
    hello.lost(new ConnectionLost(this.address.key, "the hello was not answered"));
  }

  #lost(transport: Transport): void {
    if (this.#transport !== transport) return;
    this.#transport = undefined;
    this.#ready = false;
    this.#drops++;
    this.#failAll(this.#lastError);
    this.#scheduleReconnect();
    this.#options.lost();
  }

  #scheduleReconnect(): void {
    if (this.#options.closed.aborted || this.#reconnectTimer !== undefined) return;
    // A weak timer: a reconnect in the background never keeps the process alive (a request
    // waiting for a connection has timers of its own).
    this.#reconnectTimer = after(this.#options.reconnectIntervalMs, () => {
      this.#reconnectTimer = undefined;
      this.connect();
    }, true);
  }

  #shutdown(): void {
    this.#reconnectTimer?.();
    this.#reconnectTimer = undefined;
    const transport = this.#transport;
    this.#transport = undefined;
    this.#ready = false;
    transport?.close();
    this.#failAll("client closed");
  }

  #failAll(detail: string | undefined): void {
    this.#watchTimers.cancel(this.#watchAlarm);
    this.#hello = undefined;
    this.#outstanding = 0;
    this.#timed = undefined;
    for (const p of this.#pending.clear()) p.lost(new ConnectionLost(this.address.key, detail));
  }
}
