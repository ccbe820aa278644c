/**
 * The epoll transport of a plain-TCP listener on Linux (docs/server.md, "The epoll
 * transport"): the listening socket and every connection it accepts are non-blocking sockets
 * in one edge-triggered `epoll` set, served through FFI. One `epoll_wait` on the runtime's
 * thread finds every ready socket at once, and reads and writes are synchronous `recv` and
 * `send` calls, so a busy server pays one runtime wake for many requests, not one per socket.
 *
 * The connections keep the shape of the runtime's ({@linkcode EpollConn}: `read`, `write`,
 * `close`), so the line handling, limits and back-pressure above them are the same for both
 * transports. Scheduling, per round of the loop:
 * - wait on the set for at most {@linkcode BLOCK_MS} on the runtime's thread, and serve what
 *   is ready;
 * - let the promise jobs that serving started run (a few microtask hops);
 * - at least every {@linkcode YIELD_MS}, let the runtime's own loop run (timers, the HTTP
 *   endpoints, other sockets): the set is polled once on a thread of the runtime's pool;
 * - the runtime's own epoll sets are in this one too: when its sockets have events, sleep
 *   briefly on its pool so that its loop waits on them, and serves them, at once;
 * - when nothing was ready within that time, wait on a thread of the runtime's pool, with the
 *   runtime's loop free, until a socket is ready (an `eventfd` ends that wait at close).
 *
 * @module
 */

import {
  EAGAIN,
  EFD_CLOEXEC,
  EFD_NONBLOCK,
  EINTR,
  EPOLL_CLOEXEC,
  EPOLL_CTL_ADD,
  EPOLLERR,
  EPOLLET,
  EPOLLHUP,
  EPOLLIN,
  EPOLLOUT,
  EPOLLRDHUP,
  EVENT_BYTES,
  eventData,
  eventMask,
  type LibcHandle,
  writeEvent,
} from "./epoll_libc.ts";
import { acceptSocket, errnoError, listenSocket } from "./epoll_socket.ts";

/** Longest block on the runtime's thread when nothing is ready, in ms (timers wait that long). */
export const BLOCK_MS = 1;
/** The runtime's own loop runs at least this often while sockets keep the set busy (ms). */
export const YIELD_MS = 1;
/** Microtask hops after serving a round: the line handling and writes it started. */
const DRAIN_HOPS = 8;
/** Events taken per `epoll_wait`. */
const MAX_EVENTS = 256;
const WAKE_ID = 0;
const LISTENER_ID = 1;
/** The id of the runtime's own epoll sets in this one (never a connection's). */
const RUNTIME_ID = 0xffff_ffff;
const READABLE = EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP;
const WRITABLE = EPOLLOUT | EPOLLERR | EPOLLHUP;
const ENDED = EPOLLERR | EPOLLHUP | EPOLLRDHUP;

/** What an event of the set is for. */
interface Target {
  ready(mask: number): void;
}

/** The epoll sets of this module's pollers: not the runtime's, never watched as such. */
const OWN_SETS = new Set<number>();

/** One `epoll` set and its loop. */
class Poller {
  readonly libc: LibcHandle;
  readonly ep: number;
  #wake: number;
  #targets = new Map<number, Target>();
  #nextId = LISTENER_ID + 1;
  #events = new Uint8Array(EVENT_BYTES * MAX_EVENTS);
  #eventView = new DataView(this.#events.buffer);
  #ctl = new Uint8Array(EVENT_BYTES);
  #ctlView = new DataView(this.#ctl.buffer);
  #stopping = false;
  #idle = false;
  /** The runtime's own sockets have events its loop has not taken yet. */
  #runtimeReady = false;
  #done: Promise<void>;

  constructor(libc: LibcHandle) {
    this.libc = libc;
    const fn = libc.fn;
    this.ep = fn.epoll_create1(EPOLL_CLOEXEC);
    if (this.ep < 0) throw errnoError("epoll_create1", libc.errno());
    this.#wake = fn.eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (this.#wake < 0) {
      const errno = libc.errno();
      fn.close(this.ep);
      throw errnoError("eventfd", errno);
    }
    this.#add(this.#wake, WAKE_ID, EPOLLIN);
    OWN_SETS.add(this.ep);
    this.#watchRuntime();
    // The loop starts once the listener is in the set.
    this.#done = Promise.resolve().then(() => this.#run());
  }

  /**
   * Adds the runtime's own epoll sets (the `eventpoll` descriptors of the process but those of
   * this module's pollers) to this one, so that an event on the runtime's sockets (the HTTP endpoints, a signal) wakes
   * this loop, which then lets the runtime's loop wait on them at once. Without read access
   * to `/proc/self/fd` they are served at the periodic yield only.
   */
  #watchRuntime(): void {
    try {
      // Asked first, so a node run without read access never prompts for it on a terminal.
      const read = Deno.permissions.querySync({ name: "read", path: "/proc/self/fd" });
      if (read.state !== "granted") return;
      for (const entry of Deno.readDirSync("/proc/self/fd")) {
        const fd = Number(entry.name);
        if (OWN_SETS.has(fd) || !Number.isInteger(fd)) continue;
        let target: string;
        try {
          target = Deno.readLinkSync(`/proc/self/fd/${fd}`);
        } catch {
          continue; // closed meanwhile (the directory's own descriptor)
        }
        if (target !== "anon_inode:[eventpoll]") continue;
        writeEvent(this.#ctlView, 0, EPOLLIN | EPOLLET, RUNTIME_ID);
        this.libc.fn.epoll_ctl(this.ep, EPOLL_CTL_ADD, fd, this.#ctl);
      }
    } catch {
      // No read permission, or no /proc: the periodic yield serves the runtime's sockets.
    }
  }

  /** Resolves once the loop is over and the set is closed. */
  get done(): Promise<void> {
    return this.#done;
  }

  /** Watches `fd` for `target` (edge-triggered reads and writes); the id of its events. */
  watch(fd: number, target: Target, listener = false): number {
    const id = listener ? LISTENER_ID : this.#freeId();
    this.#add(fd, id, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET);
    this.#targets.set(id, target);
    return id;
  }

  /** The next connection id: they wrap after 2^32 - 3, skipping those still in use. */
  #freeId(): number {
    for (;;) {
      const id = this.#nextId++;
      if (this.#nextId >= RUNTIME_ID) this.#nextId = LISTENER_ID + 1;
      if (!this.#targets.has(id)) return id;
    }
  }

  /** Forgets `id` (its socket is closed). */
  forget(id: number): void {
    this.#targets.delete(id);
    if (this.#targets.size === 0) this.stop();
  }

  /** Ends the loop once it is idle or between rounds; closes the set. */
  stop(): void {
    if (this.#stopping) return;
    this.#stopping = true;
    if (this.#idle) this.libc.fn.write(this.#wake, new BigUint64Array([1n]), 8);
  }

  #add(fd: number, id: number, events: number): void {
    writeEvent(this.#ctlView, 0, events, id);
    if (this.libc.fn.epoll_ctl(this.ep, EPOLL_CTL_ADD, fd, this.#ctl) < 0) {
      throw errnoError("epoll_ctl", this.libc.errno());
    }
  }

  async #run(): Promise<void> {
    const fn = this.libc.fn;
    let yieldedAt = performance.now();
    while (!this.#stopping) {
      // Returns at once when a socket is ready; blocks the runtime's thread otherwise.
      let n = fn.epoll_wait(this.ep, this.#events, MAX_EVENTS, BLOCK_MS);
      if (n === 0 && !this.#stopping) {
        this.#idle = true;
        n = await fn.epoll_wait_idle(this.ep, this.#events, MAX_EVENTS, -1);
        this.#idle = false;
        yieldedAt = performance.now();
        // That wait ran on another thread, whose errno is out of reach: a failure there (a
        // signal's EINTR) is retried, and a lasting one shows in the next wait on this thread.
        if (n < 0) continue;
      }
      if (n < 0) {
        const errno = this.libc.errno();
        if (errno === EINTR || errno === 0) continue;
        throw errnoError("epoll_wait", errno);
      }
      this.#dispatch(n);
      for (let hop = 0; hop < DRAIN_HOPS; hop++) await null;
      if (performance.now() - yieldedAt >= YIELD_MS) {
        // A poll of the set on the runtime's pool: while it runs, the runtime's loop is free
        // and can wait on its own sockets (a message to itself would not let it).
        n = await fn.epoll_wait_idle(this.ep, this.#events, MAX_EVENTS, 0);
        yieldedAt = performance.now();
        if (n > 0) {
          this.#dispatch(n);
          for (let hop = 0; hop < DRAIN_HOPS; hop++) await null;
        }
      }
      if (this.#runtimeReady) {
        // The runtime's sockets have events (seen in either wait): a sleep on its pool is sure
        // to let its loop wait on them (a call that returned at once might not), ~60 µs.
        this.#runtimeReady = false;
        await fn.usleep_idle(1);
        yieldedAt = performance.now();
      }
    }
    fn.close(this.#wake);
    OWN_SETS.delete(this.ep);
    fn.close(this.ep);
  }

  #dispatch(n: number): void {
    const view = this.#eventView;
    for (let i = 0; i < n; i++) {
      const id = eventData(view, i);
      if (id === WAKE_ID) continue;
      if (id === RUNTIME_ID) {
        this.#runtimeReady = true;
        continue;
      }
      this.#targets.get(id)?.ready(eventMask(view, i));
    }
  }
}

/** A connection accepted by an {@linkcode EpollListener}: a runtime connection's shape. */
export class EpollConn {
  /** The client's address. */
  readonly remoteAddr: Deno.NetAddr;
  /** This end's address. */
  readonly localAddr: Deno.NetAddr;
  #poller: Poller;
  #fd: number;
  #id: number;
  #readable = true;
  /**
   * The peer's end of input or a reset was signalled (`EPOLLRDHUP`, `EPOLLHUP`, `EPOLLERR`):
   * no edge will come after it, so reads go on until `recv` says so (0, an error).
   */
  #ended = false;
  #writable = true;
  #closed = false;
  #read: { buffer: Uint8Array; resolve(n: number | null): void; reject(e: Error): void } | null =
    null;
  #write: { data: Uint8Array; resolve(n: number): void; reject(e: Error): void } | null = null;

  /** @internal */
  constructor(poller: Poller, fd: number, remote: Deno.NetAddr, local: Deno.NetAddr) {
    this.#poller = poller;
    this.#fd = fd;
    this.remoteAddr = remote;
    this.localAddr = local;
    this.#id = poller.watch(fd, this);
  }

  /** Reads into `buffer`: how many bytes, or `null` at the end of the input. */
  read(buffer: Uint8Array): Promise<number | null> {
    if (this.#closed) return Promise.reject(new Deno.errors.BadResource("connection closed"));
    if (this.#read !== null) return Promise.reject(new Error("a read is already pending"));
    if (this.#readable) {
      const n = this.#recv(buffer);
      if (n !== undefined) {
        return typeof n === "number" || n === null ? Promise.resolve(n) : Promise.reject(n);
      }
    }
    const { promise, resolve, reject } = Promise.withResolvers<number | null>();
    this.#read = { buffer, resolve, reject };
    return promise;
  }

  /** Writes some of `data`: resolves with how many bytes went out. */
  write(data: Uint8Array): Promise<number> {
    if (this.#closed) return Promise.reject(new Deno.errors.BadResource("connection closed"));
    if (this.#write !== null) return Promise.reject(new Error("a write is already pending"));
    if (this.#writable) {
      const n = this.#send(data);
      if (n !== undefined) return typeof n === "number" ? Promise.resolve(n) : Promise.reject(n);
    }
    const { promise, resolve, reject } = Promise.withResolvers<number>();
    this.#write = { data, resolve, reject };
    return promise;
  }

  /**
   * Writes some of `data` now if the socket has room: how much, or `undefined` (no room, a
   * write pending, closed, or an error that {@linkcode write} then reports).
   */
  writeNow(data: Uint8Array): number | undefined {
    if (this.#closed || this.#write !== null || !this.#writable) return undefined;
    const n = this.#send(data);
    return typeof n === "number" ? n : undefined;
  }

  /** Nagle's algorithm is always off on this transport. */
  setNoDelay(_noDelay = true): void {}

  /** Closes both directions; a pending read or write fails. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#poller.libc.fn.close(this.#fd);
    this.#poller.forget(this.#id);
    const gone = () => new Deno.errors.Interrupted("connection closed");
    this.#read?.reject(gone());
    this.#write?.reject(gone());
    this.#read = this.#write = null;
  }

  /** @internal */
  ready(mask: number): void {
    if (mask & READABLE) {
      this.#readable = true;
      if (mask & ENDED) this.#ended = true;
      const read = this.#read;
      if (read !== null) {
        const n = this.#recv(read.buffer);
        if (n !== undefined) {
          this.#read = null;
          if (typeof n === "number" || n === null) read.resolve(n);
          else read.reject(n);
        }
      }
    }
    if (mask & WRITABLE) {
      this.#writable = true;
      const write = this.#write;
      if (write !== null) {
        const n = this.#send(write.data);
        if (n !== undefined) {
          this.#write = null;
          if (typeof n === "number") write.resolve(n);
          else write.reject(n);
        }
      }
    }
  }

  /** One `recv`: bytes read, `null` at the end, an error, or `undefined` to wait. */
  #recv(buffer: Uint8Array): number | null | Error | undefined {
    const { fn, errno } = this.#poller.libc;
    for (;;) {
      const n = fn.recv(this.#fd, buffer, buffer.length, 0);
      if (n > 0) {
        // Less than asked: the socket's queue is empty now, and the next bytes raise an edge;
        // an end of input or a reset that came with these bytes raises none.
        if (n < buffer.length && !this.#ended) this.#readable = false;
        return n;
      }
      if (n === 0) return buffer.length === 0 ? 0 : null;
      const code = errno();
      if (code === EINTR) continue;
      if (code === EAGAIN) {
        this.#readable = false;
        return undefined;
      }
      return errnoError("recv", code);
    }
  }

  /** One `send`: bytes written, an error, or `undefined` to wait for room. */
  #send(data: Uint8Array): number | Error | undefined {
    const { fn, errno } = this.#poller.libc;
    for (;;) {
      const n = fn.send(this.#fd, data, data.length, MSG_NOSIGNAL_FLAG);
      if (n >= 0) {
        if (n < data.length) this.#writable = false;
        return n;
      }
      const code = errno();
      if (code === EINTR) continue;
      if (code === EAGAIN) {
        this.#writable = false;
        return undefined;
      }
      return errnoError("send", code);
    }
  }
}

const MSG_NOSIGNAL_FLAG = 0x4000;

/** A listening TCP socket on the epoll transport: a runtime listener's shape. */
export class EpollListener {
  /** The address listened on (the real port when 0 was asked). */
  readonly addr: Deno.NetAddr;
  #poller: Poller;
  #fd: number;
  #readable = true;
  #closed = false;
  #accept: { resolve(conn: EpollConn): void; reject(e: Error): void } | null = null;

  /**
   * Listens on `hostname` (an IPv4 literal) and `port` with `libc`.
   *
   * @throws {Deno.errors.AddrInUse} The address is taken.
   */
  constructor(libc: LibcHandle, hostname: string, port: number) {
    const { fd, addr } = listenSocket(libc, hostname, port);
    this.#fd = fd;
    this.addr = addr;
    try {
      this.#poller = new Poller(libc);
      this.#poller.watch(fd, this, true);
    } catch (error) {
      libc.fn.close(fd);
      throw error;
    }
  }

  /** Resolves once the listener and all its connections are closed and the loop ended. */
  get done(): Promise<void> {
    return this.#poller.done;
  }

  /** The next connection. Rejects once the listener is closed. */
  accept(): Promise<EpollConn> {
    if (this.#closed) return Promise.reject(new Deno.errors.BadResource("listener closed"));
    if (this.#readable) {
      const got = this.#tryAccept();
      if (got !== undefined) {
        return got instanceof Error ? Promise.reject(got) : Promise.resolve(got);
      }
    }
    const { promise, resolve, reject } = Promise.withResolvers<EpollConn>();
    this.#accept = { resolve, reject };
    return promise;
  }

  /** Stops listening; accepted connections stay open (the loop runs until they close). */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#poller.libc.fn.close(this.#fd);
    this.#poller.forget(LISTENER_ID);
    this.#accept?.reject(new Deno.errors.BadResource("listener closed"));
    this.#accept = null;
  }

  /** @internal */
  ready(mask: number): void {
    if (!(mask & EPOLLIN)) return;
    this.#readable = true;
    const pending = this.#accept;
    if (pending === null) return;
    const got = this.#tryAccept();
    if (got === undefined) return;
    this.#accept = null;
    if (got instanceof Error) pending.reject(got);
    else pending.resolve(got);
  }

  #tryAccept(): EpollConn | Error | undefined {
    const accepted = acceptSocket(this.#poller.libc, this.#fd);
    if (accepted === undefined) {
      this.#readable = false;
      return undefined;
    }
    if (accepted instanceof Error) return accepted;
    try {
      return new EpollConn(this.#poller, accepted.fd, accepted.remote, this.addr);
    } catch (error) {
      // Not added to the set (epoll's watch limit, memory): that connection is refused.
      this.#poller.libc.fn.close(accepted.fd);
      return error as Error;
    }
  }
}
