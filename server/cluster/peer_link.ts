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
import { LogLimit } from "../log_limit.ts";
import { acceptorProof, dialerProof, newNonce, sameProof } from "./peer_auth.ts";
import { decodePeer, encodePeer } from "./peer_codec.ts";

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
  /** The cluster secret: the peer and this node prove they know it (`peer_auth.ts`). */
  secret?: string;
  /** Dial with TLS, verifying the peer's certificate with these CA certificates (PEM). */
  tls?: { caCerts?: string[] };
  /** The link came up (after the handshake). */
  onUp(address: string): void;
  /** The link went down. */
  onDown(address: string): void;
}

/**
 * A link is logged as up once it has stayed up this long (ms); one that closes sooner is a
 * brief link (the peer restarting, or refusing this node's handshake).
 */
const BRIEF_MS = 1000;
/** Brief links and refused proofs are logged at most this often (ms), with a count. */
const BRIEF_LOG_MS = 10_000;

/** Output a peer may owe us before its link is dropped (a snapshot of a million locks fits). */
const PEER_OUTPUT_LIMIT = 512 * 1024 * 1024;

/** A self-healing outbound connection to one peer. */
export class PeerLink {
  /** The peer's address as listed in `--peers`. */
  readonly address: string;
  #target: HostPort;
  #options: PeerLinkOptions;
  #socket: LineSocket | undefined;
  /** A socket still proving the acceptor, not up yet. */
  #pending: LineSocket | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #dialing = false;
  /** Aborts the dial in progress (its connect, its TLS handshake): on stop(). */
  #dialAbort: AbortController | undefined;
  #stopped = false;
  /** Logs the current link as up once it has lasted {@linkcode BRIEF_MS}. */
  #upTimer: ReturnType<typeof setTimeout> | undefined;
  /** Whether the current link was logged as up (so its end is logged too). */
  #upLogged = false;
  /** Brief links since the last link logged as up. */
  #brief = 0;
  /** Brief links and refused proofs: one line per kind every {@linkcode BRIEF_LOG_MS}. */
  #limit = new LogLimit(BRIEF_LOG_MS);

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
    this.#dialAbort?.abort();
    clearTimeout(this.#timer);
    clearTimeout(this.#upTimer);
    this.#pending?.close();
    const socket = this.#socket;
    if (socket === undefined) return;
    socket.closeAfterFlush();
    await socket.done;
  }

  async #dial(): Promise<void> {
    if (this.#stopped || this.#dialing || this.up) return;
    this.#dialing = true;
    const abort = this.#dialAbort = new AbortController();
    const timer = setTimeout(() => abort.abort(), this.#options.connectTimeoutMs);
    try {
      const { hostname, port } = this.#target;
      const tls = this.#options.tls;
      let conn: Deno.Conn;
      if (tls === undefined) conn = await Deno.connect({ hostname, port, signal: abort.signal });
      else {
        // connectTls takes no signal: a dial that outlives the timeout is closed when done.
        const dialing = Deno.connectTls({ hostname, port, caCerts: tls.caCerts });
        dialing.then((late) => abort.signal.aborted && late.close(), () => {});
        const timedOut = new Promise<never>((_, reject) => {
          abort.signal.addEventListener("abort", () => reject(new Error("timed out")));
        });
        timedOut.catch(() => {});
        conn = await Promise.race([dialing, timedOut]);
        // The handshake now, not at the first read, so that its failure is told with its
        // reason (a certificate this node does not trust) rather than as a brief link.
        try {
          await Promise.race([(conn as Deno.TlsConn).handshake(), timedOut]);
        } catch (error) {
          conn.close();
          if (!abort.signal.aborted && !this.#stopped) this.#logTls(error);
          throw error;
        }
      }
      if (this.#stopped) {
        conn.close();
        return;
      }
      if (tls === undefined) (conn as Deno.TcpConn).setNoDelay(true);
      this.#open(conn);
    } catch {
      this.#retry();
    } finally {
      clearTimeout(timer);
      this.#dialing = false;
      this.#dialAbort = undefined;
    }
  }

  /** Wraps a connected socket; with a secret, the link is up once the acceptor proved it. */
  #open(conn: Deno.Conn): void {
    const secret = this.#options.secret;
    const nonce = secret === undefined ? undefined : newNonce();
    const self = this.#options.self;
    // The acceptor must prove it is the peer this link was dialled to, not any node that
    // knows the secret (one listening at this address could relay the handshake to another).
    const ends = { dialer: self, acceptor: this.address };
    let proven = secret === undefined;
    const socket = new LineSocket(conn, this.address, {
      line: (text) => {
        // Peers write on the link we dialled only to prove who they are.
        if (proven || secret === undefined || nonce === undefined) return;
        const message = decodePeer(text);
        const ok = message.type === "PEERAUTH" &&
          sameProof(acceptorProof(secret, nonce, message.nonce, ends), message.proof);
        if (!ok) {
          const held = this.#limit.pass("proof");
          if (held !== undefined) {
            this.#options.log.warn(
              `peer ${this.address} did not prove the cluster secret${LogLimit.more(held)}`,
              { event: "peer-refused", peer: this.address, suppressed: held },
            );
          }
          socket.close();
          return;
        }
        proven = true;
        socket.send(
          encodePeer({ type: "PEERPROOF", proof: dialerProof(secret, nonce, message.nonce, ends) }),
        );
        this.#up(socket);
      },
      closed: () => {
        if (this.#socket !== socket) {
          // Closed before the acceptor proved itself (a refusal, a TLS failure): brief.
          if (!this.#stopped && !proven) {
            this.#logBrief();
            this.#retry();
          }
          return;
        }
        this.#socket = undefined;
        if (!this.#stopped) this.#logDown();
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
    socket.send(encodePeer({ type: "PEER", address: self, nonce }));
    if (proven) {
      this.#up(socket);
      return;
    }
    // The acceptor's proof must come within the connect timeout.
    this.#pending = socket;
    const timer = setTimeout(() => {
      if (!proven) socket.close();
    }, this.#options.connectTimeoutMs);
    socket.done.finally(() => {
      clearTimeout(timer);
      if (this.#pending === socket) this.#pending = undefined;
    });
  }

  #up(socket: LineSocket): void {
    this.#socket = socket;
    this.#upLogged = false;
    // Logged once it has lasted: a peer that closes every link at once (it refuses this
    // node's handshake) then makes one limited line, not an "up" and a "down" per redial.
    this.#upTimer = setTimeout(() => {
      this.#upTimer = undefined;
      if (this.#socket !== socket || this.#stopped) return;
      this.#upLogged = true;
      const brief = this.#brief;
      this.#brief = 0;
      const after = brief > 0 ? `, after ${brief} brief ${brief === 1 ? "link" : "links"}` : "";
      const since = new Date(Date.now() - BRIEF_MS).toISOString();
      this.#options.log.info(`link to peer ${this.address} up (since ${since}${after})`, {
        event: "link-up",
        peer: this.address,
        since,
        brief,
      });
    }, BRIEF_MS);
    this.#options.onUp(this.address);
  }

  /**
   * The link went down: logged if its coming up was. A brief one counts, and is said once per
   * {@linkcode BRIEF_LOG_MS} with a count and the likely causes.
   */
  #logDown(): void {
    const peer = this.address;
    clearTimeout(this.#upTimer);
    this.#upTimer = undefined;
    if (this.#upLogged) {
      this.#upLogged = false;
      this.#options.log.info(`link to peer ${peer} down`, { event: "link-down", peer });
      return;
    }
    this.#logBrief();
  }

  /** A link closed within {@linkcode BRIEF_MS} of opening (or before its handshake ended). */
  #logBrief(): void {
    const peer = this.address;
    this.#brief++;
    const held = this.#limit.pass("brief");
    if (held === undefined) return;
    this.#options.log.warn(
      `link to peer ${peer} closed within ${BRIEF_MS / 1000} s of opening` +
        `${LogLimit.more(held)}: the peer is restarting, or refuses this node's handshake ` +
        `(check --peer-secret-file and the TLS certificates on both)`,
      { event: "link-brief", peer, suppressed: held },
    );
  }

  /**
   * This node's TLS handshake with the peer failed for a TLS reason (`InvalidData`: a
   * certificate it does not trust): said once per {@linkcode BRIEF_LOG_MS}. A peer that
   * closed or reset meanwhile is restarting: only retried, as a refused connect is.
   */
  #logTls(error: unknown): void {
    if (!(error instanceof Deno.errors.InvalidData)) return;
    const peer = this.address;
    const held = this.#limit.pass("tls");
    if (held === undefined) return;
    const why = error.message.split("\n")[0];
    this.#options.log.warn(
      `TLS handshake with peer ${peer} failed${LogLimit.more(held)}: ${why} ` +
        "(check that --tls-ca holds the CA that signed the peers' certificates)",
      { event: "link-tls-failed", peer, suppressed: held },
    );
  }

  #retry(): void {
    if (this.#stopped || this.#timer !== undefined) return;
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#dial();
    }, this.#options.retryMs);
  }
}
