/**
 * Randomized tests of the lock table against a small reference model: long seeded runs of
 * acquire / release / extend / cancel / time steps over a few keys, comparing every return
 * value and every hook call, plus invariants checked on the table's own outputs.
 *
 * A failure names the seed and step; re-run with that seed to reproduce.
 *
 * @module
 */

import assert from "node:assert/strict";
import { LockTable, Waiter } from "../server/engine/lock_table.ts";
import { mulberry32 } from "./_prng.ts";

type State = "queued" | "immediate" | "granted" | "timedOut" | "cancelled";

/** One acquire request, as the test sees it. */
interface Req {
  ticket: string;
  key: string;
  leaseMs: number;
  /** Absolute wait-limit deadline, or null for no limit. */
  waitDeadline: number | null;
  /** Heap insertion rank of the wait limit (ties between equal wait deadlines). */
  waitSeq: number;
  /** The table's waiter, if it queued. */
  waiter?: Waiter<string>;
}

// ---------------------------------------------------------------------------------------
// Reference model: the rules of docs/protocol.md, "Semantics", written as plainly as possible.
// ---------------------------------------------------------------------------------------

interface ModelLock {
  token: bigint;
  deadline: number;
  /** Insertion rank of the current lease deadline (ties between equal lease deadlines). */
  seq: number;
  queue: Req[];
}

/** Something due: a lease (rank 1) or a wait limit (rank 0). */
interface Due {
  deadline: number;
  rank: number;
  seq: number;
  key: string;
  req?: Req;
}

function earlier(a: Due, b: Due): boolean {
  if (a.deadline !== b.deadline) return a.deadline < b.deadline;
  if (a.rank !== b.rank) return a.rank < b.rank;
  return a.seq < b.seq;
}

class Model {
  now = 0;
  lastToken = 0n;
  seq = 0;
  locks = new Map<string, ModelLock>();
  log: string[] = [];
  state = new Map<string, State>();

  /**
   * Settles everything due, earliest deadline first. At the same instant a wait limit runs
   * out before a lease does (the waiter's time is up: it gets T, as with a release at that
   * instant); equal deadlines of the same kind go in the order they were set.
   */
  advance(): void {
    for (;;) {
      let best: Due | null = null;
      for (const [key, lock] of this.locks) {
        const candidates: Due[] = [{ deadline: lock.deadline, rank: 1, seq: lock.seq, key }];
        for (const req of lock.queue) {
          if (req.waitDeadline === null) continue;
          candidates.push({ deadline: req.waitDeadline, rank: 0, seq: req.waitSeq, key, req });
        }
        for (const c of candidates) {
          if (c.deadline <= this.now && (best === null || earlier(c, best))) best = c;
        }
      }
      if (best === null) return;
      const lock = this.locks.get(best.key)!;
      const req = best.req;
      if (req) {
        lock.queue.splice(lock.queue.indexOf(req), 1);
        this.state.set(req.ticket, "timedOut");
        this.log.push(`timedOut ${req.ticket} ${best.key}`);
      } else this.handOver(best.key, lock);
    }
  }

  handOver(key: string, lock: ModelLock): void {
    const next = lock.queue.shift();
    if (next === undefined) {
      this.locks.delete(key);
      this.log.push(`freed ${key} ${lock.token}`);
      return;
    }
    lock.token = ++this.lastToken;
    lock.deadline = this.now + next.leaseMs;
    lock.seq = this.seq++;
    this.state.set(next.ticket, "granted");
    this.log.push(`held ${key} ${lock.token} ${lock.deadline}`);
    this.log.push(`granted ${next.ticket} ${key} ${lock.token}`);
  }

  /** Returns the token if granted at once, or null if queued. */
  acquire(req: Req, waitMs: number): bigint | null {
    this.advance();
    const lock = this.locks.get(req.key);
    if (lock === undefined) {
      const token = ++this.lastToken;
      const deadline = this.now + req.leaseMs;
      this.locks.set(req.key, { token, deadline, seq: this.seq++, queue: [] });
      this.state.set(req.ticket, "immediate");
      this.log.push(`held ${req.key} ${token} ${deadline}`);
      return token;
    }
    if (waitMs > 0) {
      req.waitDeadline = this.now + waitMs;
      req.waitSeq = this.seq++;
    }
    lock.queue.push(req);
    this.state.set(req.ticket, "queued");
    return null;
  }

  release(key: string, token: bigint): boolean {
    this.advance();
    const lock = this.locks.get(key);
    if (lock === undefined || lock.token !== token) return false;
    this.handOver(key, lock);
    return true;
  }

  extend(key: string, token: bigint, leaseMs: number): boolean {
    this.advance();
    const lock = this.locks.get(key);
    if (lock === undefined || lock.token !== token) return false;
    lock.deadline = this.now + leaseMs;
    lock.seq = this.seq++;
    this.log.push(`held ${key} ${token} ${lock.deadline}`);
    return true;
  }

  cancel(req: Req): void {
    if (this.state.get(req.ticket) !== "queued") return;
    const queue = this.locks.get(req.key)!.queue;
    queue.splice(queue.indexOf(req), 1);
    this.state.set(req.ticket, "cancelled");
  }

  get held(): number {
    return this.locks.size;
  }

  get waiting(): number {
    let n = 0;
    for (const lock of this.locks.values()) n += lock.queue.length;
    return n;
  }

  nextDeadline(): number | undefined {
    let min = Infinity;
    for (const lock of this.locks.values()) {
      min = Math.min(min, lock.deadline);
      for (const req of lock.queue) {
        if (req.waitDeadline !== null) min = Math.min(min, req.waitDeadline);
      }
    }
    return min === Infinity ? undefined : min;
  }

  holders(): { key: string; token: bigint; deadline: number }[] {
    this.advance();
    return [...this.locks].map(([key, l]) => ({
      key,
      token: l.token,
      deadline: l.deadline,
      owner: 0,
    }))
      .sort((a, b) => a.key.localeCompare(b.key));
  }
}

// ---------------------------------------------------------------------------------------
// Invariants checked on the table's own outputs, independently of the model.
// ---------------------------------------------------------------------------------------

class Checker {
  now = 0;
  lastToken = 0n;
  violations: string[] = [];
  reqs = new Map<string, Req>();
  state = new Map<string, State>();
  /** Per key: every request that queued, in arrival order. */
  queues = new Map<string, Req[]>();
  /** Per key: the grant the table last reported, and whether it has ended. */
  current = new Map<string, { token: bigint; deadline: number; ended: boolean; at: number }>();
  /** The grant being released right now (its successor is granted inside release()). */
  releasing: { key: string; token: bigint } | null = null;
  /** Set when the grant being released was live and ended (handed over or freed). */
  releasedLive = false;

  #fail(message: string): void {
    this.violations.push(`at ${this.now}: ${message}`);
  }

  /** A new grant of `key` with `token`: one holder at a time, tokens always increasing. */
  grant(key: string, token: bigint): void {
    if (token <= this.lastToken) this.#fail(`token ${token} not above ${this.lastToken}`);
    this.lastToken = token;
    const prev = this.current.get(key);
    // When the handover logically happened: when the old lease ran out (a late timer
    // settles it later, but in deadline order), or now if the old holder released it.
    let at = this.now;
    if (prev && !prev.ended) {
      if (prev.deadline <= this.now) at = prev.deadline;
      else if (this.releasing?.key === key && this.releasing.token === prev.token) {
        this.releasedLive = true;
      } else {
        this.#fail(
          `${key} granted to ${token} while ${prev.token} holds it until ${prev.deadline}`,
        );
      }
    }
    this.current.set(key, { token, deadline: NaN, ended: false, at });
  }

  /** A `held` hook: a new grant (a new token) or a new lease deadline for the current one. */
  held(key: string, token: bigint, deadline: number): void {
    const cur = this.current.get(key);
    if (!cur || cur.ended || cur.token !== token) this.grant(key, token);
    else if (cur.deadline <= this.now) {
      this.#fail(`extended ${key} ${token}, whose lease ran out at ${cur.deadline}`);
    }
    if (!(deadline > this.now)) {
      this.#fail(`lease of ${key} ${token} ends at ${deadline}, not after now`);
    }
    this.current.get(key)!.deadline = deadline;
  }

  ended(key: string, token: bigint, how: string): void {
    const cur = this.current.get(key);
    if (!cur || cur.token !== token || cur.ended) {
      this.#fail(`${how} ${key} ${token}: not the current grant`);
      return;
    }
    cur.ended = true;
    if (this.releasing?.key === key && this.releasing.token === token) {
      if (cur.deadline > this.now) this.releasedLive = true;
    }
  }

  queued(req: Req): void {
    this.reqs.set(req.ticket, req);
    this.state.set(req.ticket, "queued");
    let q = this.queues.get(req.key);
    if (!q) this.queues.set(req.key, q = []);
    q.push(req);
  }

  /** A `granted` hook: only a queued request, only the first unanswered one, only in time. */
  granted(ticket: string, key: string, token: bigint): void {
    const req = this.reqs.get(ticket);
    if (!req || req.key !== key) return this.#fail(`granted unknown ${ticket} ${key}`);
    const state = this.state.get(ticket);
    if (state !== "queued") return this.#fail(`granted ${ticket} which is ${state}`);
    const cur = this.current.get(key);
    if (cur?.token !== token || cur.ended) this.#fail(`granted ${ticket} ${token} without held`);
    else if (req.waitDeadline !== null && cur.at >= req.waitDeadline) {
      this.#fail(`granted ${ticket} at ${cur.at}, its wait ran out at ${req.waitDeadline}`);
    }
    for (const other of this.queues.get(key)!) {
      if (other === req) break;
      if (this.state.get(other.ticket) === "queued") {
        this.#fail(`granted ${ticket} before ${other.ticket}, which queued earlier (FIFO)`);
      }
    }
    this.state.set(ticket, "granted");
  }

  timedOut(ticket: string, key: string): void {
    const req = this.reqs.get(ticket);
    if (!req || req.key !== key) return this.#fail(`timedOut unknown ${ticket} ${key}`);
    const state = this.state.get(ticket);
    if (state !== "queued") return this.#fail(`timedOut ${ticket} which is ${state}`);
    if (req.waitDeadline === null) this.#fail(`timedOut ${ticket}, which waits without limit`);
    else if (this.now < req.waitDeadline) {
      this.#fail(`timedOut ${ticket} at ${this.now}, before its limit ${req.waitDeadline}`);
    }
    this.state.set(ticket, "timedOut");
  }

  cancelled(req: Req): void {
    if (this.state.get(req.ticket) === "queued") this.state.set(req.ticket, "cancelled");
  }
}

// ---------------------------------------------------------------------------------------
// The run.
// ---------------------------------------------------------------------------------------

const KEYS = ["k0", "k1", "k2", "k3"];

/**
 * Hook calls of one operation grouped by key: per key, the held / granted / freed calls in
 * call order, and the set of waiters answered T. Neither how keys interleave at one instant
 * nor when a T is sent relative to a grant to another waiter is a rule; which waiter gets
 * what, in which order, with which token, is.
 */
function byKey(lines: string[]): Record<string, { changes: string[]; timedOut: string[] }> {
  const groups: Record<string, { changes: string[]; timedOut: string[] }> = {};
  for (const line of lines) {
    const f = line.split(" ");
    const key = f[0] === "granted" || f[0] === "timedOut" ? f[2] : f[1];
    const group = groups[key] ??= { changes: [], timedOut: [] };
    if (f[0] === "timedOut") group.timedOut.push(f[1]);
    else group.changes.push(line);
  }
  for (const group of Object.values(groups)) group.timedOut.sort();
  return groups;
}

const OWNERS = ["ann", "bob", "cid", "dee", "eve"];

interface RunOptions {
  seed: number;
  steps: number;
  /**
   * Added to every nonzero wait (ms). With 0.5 and whole-millisecond clocks and leases, a
   * wait limit never falls on the same instant as a lease deadline or an operation.
   */
  waitOffset: number;
}

function run({ seed, steps, waitOffset }: RunOptions): void {
  const random = mulberry32(seed);
  const int = (n: number) => Math.floor(random() * n);
  const pick = <T>(xs: T[]): T => xs[int(xs.length)];

  let now = 0;
  const log: string[] = [];
  const model = new Model();
  const check = new Checker();
  const table = new LockTable<string>({
    clock: () => now,
    nextToken: (() => {
      let token = 0n;
      return () => ++token;
    })(),
    hooks: {
      granted(ticket, key, token) {
        log.push(`granted ${ticket} ${key} ${token}`);
        check.granted(ticket, key, token);
      },
      timedOut(ticket, key) {
        log.push(`timedOut ${ticket} ${key}`);
        check.timedOut(ticket, key);
      },
      held(key, token, deadline) {
        log.push(`held ${key} ${token} ${deadline}`);
        check.held(key, token, deadline);
      },
      freed(key, token) {
        log.push(`freed ${key} ${token}`);
        check.ended(key, token, "freed");
      },
    },
  });

  const reqs: Req[] = [];
  const issued: bigint[] = [];
  const trace: string[] = [];
  let nextId = 0;

  const setNow = (t: number) => {
    now = t;
    model.now = t;
    check.now = t;
  };

  const tokenFor = (key: string): bigint => {
    const r = random();
    const held = model.locks.get(key)?.token;
    if (r < 0.7 && held !== undefined) return held;
    if (r < 0.85 && issued.length > 0) return pick(issued);
    return model.lastToken + BigInt(1 + int(3));
  };

  const compare = (what: string) => {
    assert.deepEqual(check.violations, [], `invariant broken after ${what}`);
    assert.deepEqual(byKey(log.splice(0)), byKey(model.log.splice(0)), `hook calls after ${what}`);
    assert.equal(table.held, model.held, `held after ${what}`);
    assert.equal(table.waiting, model.waiting, `waiting after ${what}`);
    assert.equal(table.nextDeadline(), model.nextDeadline(), `nextDeadline after ${what}`);
  };

  const step = (i: number) => {
    const r = random();
    let what: string;
    if (r < 0.3) {
      const key = pick(KEYS);
      const leaseMs = 1 + int(40);
      const waitMs = random() < 0.3 ? 0 : 1 + int(60) + waitOffset;
      const req: Req = {
        ticket: `${pick(OWNERS)}#${nextId++}`,
        key,
        leaseMs,
        waitDeadline: null,
        waitSeq: -1,
      };
      what = `acquire(${key}, ${leaseMs}, ${waitMs}, ${req.ticket})`;
      const want = model.acquire(req, waitMs);
      const got = table.acquire(key, leaseMs, waitMs, req.ticket);
      reqs.push(req);
      if (want === null) {
        assert.ok(got instanceof Waiter, `${what} should queue, got ${got}`);
        req.waiter = got as Waiter<string>;
        check.queued(req);
      } else {
        assert.equal(got, want, what);
        check.reqs.set(req.ticket, req);
        check.state.set(req.ticket, "immediate");
        const cur = check.current.get(key);
        assert.ok(cur?.token === got && !cur.ended, `${what}: no held hook for ${got}`);
        issued.push(want);
      }
    } else if (r < 0.45) {
      const key = pick(KEYS);
      const token = tokenFor(key);
      what = `release(${key}, ${token})`;
      const want = model.release(key, token);
      check.releasing = { key, token };
      check.releasedLive = false;
      const got = table.release(key, token);
      check.releasing = null;
      assert.equal(got, want, what);
      assert.equal(check.releasedLive, got, `${what}: whether a live grant ended`);
    } else if (r < 0.57) {
      const key = pick(KEYS);
      const token = tokenFor(key);
      const leaseMs = 1 + int(40);
      what = `extend(${key}, ${token}, ${leaseMs})`;
      const got = table.extend(key, token, leaseMs);
      assert.equal(got, model.extend(key, token, leaseMs), what);
      if (got) {
        const cur = check.current.get(key);
        assert.ok(cur?.token === token && cur.deadline === now + leaseMs, `${what}: no held`);
      }
    } else if (r < 0.67) {
      const queued = reqs.filter((q) => q.waiter && model.state.get(q.ticket) === "queued");
      const candidates = random() < 0.7 && queued.length > 0
        ? queued
        : reqs.filter((q) => q.waiter);
      if (candidates.length === 0) return;
      const req = pick(candidates);
      what = `cancel(${req.ticket})`;
      model.cancel(req);
      check.cancelled(req);
      table.cancel(req.waiter!);
    } else if (r < 0.92) {
      const dt = random() < 0.05 ? int(300) : int(20);
      const settle = random() < 0.5;
      what = `time +${dt}${settle ? ", advance()" : " (late timer)"}`;
      setNow(now + dt);
      if (settle) {
        model.advance();
        table.advance();
      }
    } else if (r < 0.95) {
      what = "advance() twice";
      model.advance();
      table.advance();
      table.advance();
    } else {
      what = "holders()";
      const want = model.holders();
      const got = [...table.holders()].sort((a, b) => a.key.localeCompare(b.key));
      assert.deepEqual(got, want, what);
      const key = pick(KEYS);
      assert.deepEqual(table.holder(key), want.find((h) => h.key === key), `holder(${key})`);
    }
    // Grants made through hooks count as issued tokens too.
    for (const line of model.log) {
      const m = /^granted \S+ \S+ (\d+)$/.exec(line);
      if (m) issued.push(BigInt(m[1]));
    }
    trace.push(`${i} @${now}: ${what}`);
    if (trace.length > 12) trace.shift();
    compare(what);
  };

  let i = 0;
  try {
    for (i = 0; i < steps; i++) step(i);
    // Let every lease run out: every acquire must then have exactly one outcome.
    for (let round = 0; table.held > 0 || table.waiting > 0; round++) {
      assert.ok(round < 10_000, "the table does not drain");
      setNow(now + 1000);
      model.advance();
      table.advance();
      compare("drain");
    }
    assert.equal(table.nextDeadline(), undefined);
    for (const req of reqs) {
      const state = check.state.get(req.ticket);
      assert.ok(
        state === "immediate" || state === "granted" || state === "timedOut" ||
          state === "cancelled",
        `${req.ticket} ended ${state}`,
      );
      assert.equal(state, model.state.get(req.ticket), `outcome of ${req.ticket}`);
    }
  } catch (error) {
    const message = `seed ${seed} failed at step ${i}; last steps:\n  ${trace.join("\n  ")}`;
    throw new Error(message, { cause: error });
  }
}

Deno.test("LockTable matches the reference model over random runs", async (t) => {
  for (const seed of [1, 7, 1234, 99991, 0x5eed]) {
    await t.step(`seed ${seed}`, () => run({ seed, steps: 10_000, waitOffset: 0.5 }));
  }
});

// Same, but wait limits land on whole milliseconds, so a lease and a wait limit often run
// out at the same instant (and operations land exactly on wait limits).
Deno.test("LockTable matches the reference model when leases and wait limits tie", async (t) => {
  for (const seed of [2, 31337, 424242]) {
    await t.step(`seed ${seed}`, () => run({ seed, steps: 10_000, waitOffset: 0 }));
  }
});
