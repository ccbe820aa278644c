/**
 * Unit tests of the lease timer (server/ticker.ts; docs/server.md, "Leases and timers") with a
 * fake clock and fake timers: a lone deadline is timed, a close deadline after a long
 * settlement is polled for, polling is bounded by its window and its share of the settling,
 * a long run of settling yields, and stop() and freezes leave nothing armed. One case runs
 * on the runtime's timers.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  type Deadlines,
  POLL_SHARE,
  POLL_WINDOW_MS,
  RUNTIME_SCHEDULER,
  type Scheduler,
  Ticker,
  type TickerOptions,
} from "../server/ticker.ts";

interface Pending {
  kind: "timeout" | "immediate";
  fn: () => void;
  ms: number;
  cancelled: boolean;
}

/** Fake timers: records what is scheduled; `run()` runs the oldest pending callback. */
function fakeScheduler() {
  const pending: Pending[] = [];
  const add = (kind: Pending["kind"], fn: () => void, ms: number) => {
    const entry: Pending = { kind, fn, ms, cancelled: false };
    pending.push(entry);
    return entry;
  };
  const scheduler: Scheduler = {
    timeout: (fn, ms) => add("timeout", fn, ms),
    cancelTimeout: (handle) => (handle as Pending).cancelled = true,
    immediate: (fn) => add("immediate", fn, 0),
    cancelImmediate: (handle) => (handle as Pending).cancelled = true,
  };
  return {
    scheduler,
    /** What is scheduled and not cancelled, as `timeout:<ms>` or `immediate`. */
    live: () =>
      pending.filter((p) => !p.cancelled).map((p) =>
        p.kind === "timeout" ? `timeout:${p.ms}` : "immediate"
      ),
    /** Runs (and removes) the oldest live callback. */
    run: () => {
      const i = pending.findIndex((p) => !p.cancelled);
      assert.ok(i >= 0, "nothing is scheduled");
      const [entry] = pending.splice(i, 1);
      entry.fn();
    },
    /** Runs every callback that was cancelled (as if the cancel came too late); returns how many. */
    runCancelled: () => {
      const late = pending.filter((p) => p.cancelled);
      for (const entry of late) pending.splice(pending.indexOf(entry), 1);
      for (const entry of late) entry.fn();
      return late.length;
    },
  };
}

/**
 * Deadlines on a fake clock: `advance()` settles every due deadline, each taking `costMs` of
 * the clock, and records when it settled it.
 */
function fakeDeadlines(deadlines: number[], costMs = 0) {
  const clock = { now: 0 };
  const due = [...deadlines].sort((a, b) => a - b);
  const settled: { deadline: number; at: number }[] = [];
  const target: Deadlines = {
    nextDeadline: () => due[0],
    // Like the lock table: settles what is due at the time it starts.
    advance: () => {
      const now = clock.now;
      while (due.length > 0 && due[0] <= now) {
        settled.push({ deadline: due.shift()!, at: clock.now });
        clock.now += costMs;
      }
    },
  };
  return { clock, due, settled, target };
}

/**
 * A ticker on `d`'s fake clock and `s`'s fake timers; `options` replaces any of its options
 * (by default errors are thrown, ticks counted).
 */
function ticker(
  d: ReturnType<typeof fakeDeadlines>,
  s: ReturnType<typeof fakeScheduler>,
  options: Partial<TickerOptions> & { target?: Deadlines } = {},
) {
  let ticks = 0;
  const { target = d.target, ...rest } = options;
  const t = new Ticker(target, {
    clock: () => d.clock.now,
    afterTick: () => ticks++,
    onError: (error) => {
      throw error;
    },
    scheduler: s.scheduler,
    ...rest,
  });
  return { ticker: t, ticks: () => ticks };
}

/** Arms `tk`, sets the clock to `at` and runs the timer it armed: its first settlement. */
function fireAt(
  tk: Ticker,
  d: ReturnType<typeof fakeDeadlines>,
  s: ReturnType<typeof fakeScheduler>,
  at: number,
): void {
  tk.arm();
  d.clock.now = at;
  s.run();
}

/**
 * Deadlines at 5 and 5.5 ms whose settling takes 0.25 ms each, with the first just settled at
 * 5: the clock reads 5.25 and 5.5 is being polled for (within POLL_SHARE × 0.25 = 1 ms).
 */
function polling(options: Partial<TickerOptions> = {}) {
  const d = fakeDeadlines([5, 5.5], 0.25);
  const s = fakeScheduler();
  const { ticker: tk } = ticker(d, s, options);
  fireAt(tk, d, s, 5);
  return { d, s, tk };
}

Deno.test("a lone deadline is timed, never polled, and settled when the timer fires", () => {
  const d = fakeDeadlines([30.2]);
  const s = fakeScheduler();
  const { ticker: t, ticks } = ticker(d, s);
  t.arm();
  assert.deepEqual(s.live(), ["timeout:31"]); // rounded up: never early
  t.arm(); // nothing earlier: the timer stays
  assert.deepEqual(s.live(), ["timeout:31"]);
  d.clock.now = 31.5;
  s.run();
  assert.deepEqual(d.settled, [{ deadline: 30.2, at: 31.5 }]);
  assert.equal(ticks(), 1);
  assert.deepEqual(s.live(), []);
});

Deno.test("an earlier deadline replaces the armed timer", () => {
  const d = fakeDeadlines([100]);
  const s = fakeScheduler();
  const { ticker: t } = ticker(d, s);
  t.arm();
  d.due.unshift(10);
  t.arm();
  assert.deepEqual(s.live(), ["timeout:10"]);
});

Deno.test("a timer that fires early settles nothing and re-arms for what is left", () => {
  const d = fakeDeadlines([20]);
  const s = fakeScheduler();
  const { ticker: t } = ticker(d, s);
  t.arm();
  d.clock.now = 19.5;
  s.run();
  assert.deepEqual(d.settled, []);
  // Settling took no time: nothing earns a poll, so a timer waits for the rest.
  assert.deepEqual(s.live(), ["timeout:1"]);
});

Deno.test("a long run of settling yields to requests with a poll, not a timer", () => {
  // 200 deadlines 0.01 ms apart, each settlement costing 0.05 ms: settling runs behind them
  // for 10 ms, past the 5 ms budget.
  const d = fakeDeadlines(Array.from({ length: 200 }, (_, i) => 10 + i * 0.01), 0.05);
  const s = fakeScheduler();
  const { ticker: t, ticks } = ticker(d, s);
  t.arm();
  d.clock.now = 10;
  s.run();
  assert.ok(d.settled.length < 200, `${d.settled.length} settled in the first run`);
  assert.ok(d.clock.now - 10 > 5, "the budget was used");
  assert.deepEqual(s.live(), ["immediate"]);
  let turns = 0;
  while (s.live().length > 0 && turns++ < 10) {
    assert.deepEqual(s.live(), ["immediate"]);
    s.run();
  }
  assert.equal(d.settled.length, 200);
  assert.ok(ticks() >= 2, "each run ended its batch");
  assert.deepEqual(s.live(), []);
});

Deno.test("the poll window is bounded by the settling share and by POLL_WINDOW_MS", async (t) => {
  await t.step("a next deadline within the share is polled for until due", () => {
    const { d, s } = polling(); // settling the first takes 0.25 ms
    // Clock 5.25, next 5.5: 0.25 ms away, within POLL_SHARE × 0.25 = 1 ms.
    assert.equal(d.settled.length, 1);
    assert.deepEqual(s.live(), ["immediate"]);
    d.clock.now = 5.4;
    s.run(); // not due yet: polls again
    assert.deepEqual(s.live(), ["immediate"]);
    assert.equal(d.settled.length, 1);
    d.clock.now = 5.5;
    s.run();
    assert.deepEqual(d.settled.map((x) => x.at), [5, 5.5]);
  });

  await t.step("a next deadline beyond the share is timed", () => {
    const d = fakeDeadlines([5, 5.5], 0.05); // 0.05 ms of settling earns 0.2 ms of polling
    const s = fakeScheduler();
    const { ticker: tk } = ticker(d, s);
    fireAt(tk, d, s, 5);
    assert.equal(POLL_SHARE * 0.05 < 0.45, true);
    assert.deepEqual(s.live(), ["timeout:1"]);
  });

  await t.step("a next deadline beyond POLL_WINDOW_MS is timed, however long settling took", () => {
    const d = fakeDeadlines([5, 5 + 4 + POLL_WINDOW_MS + 0.5], 4); // 4 ms of settling
    const s = fakeScheduler();
    const { ticker: tk } = ticker(d, s);
    fireAt(tk, d, s, 5);
    assert.deepEqual(s.live(), [`timeout:${Math.ceil(POLL_WINDOW_MS + 0.5)}`]);
  });

  await t.step("polling gives way to a timer when its window ends", () => {
    const { d, s } = polling(); // window 1 ms from 5.25: until 6.25
    assert.deepEqual(s.live(), ["immediate"]);
    // The awaited deadline went away (released) and a later one came: 1.5 ms away.
    d.due.splice(0, 1, 6.8);
    d.clock.now = 5.3;
    s.run();
    assert.deepEqual(s.live(), ["immediate"], "still within the window: polls");
    d.clock.now = 6.3;
    s.run();
    assert.deepEqual(s.live(), ["timeout:1"], "window over: a timer");
  });

  await t.step("with nothing left, polling stops and nothing is armed", () => {
    const { d, s, tk } = polling();
    d.due.length = 0;
    s.run();
    assert.deepEqual(s.live(), []);
    d.due.push(50);
    tk.arm();
    assert.deepEqual(s.live(), ["timeout:45"]);
  });
});

Deno.test("while polling, arm() leaves the poll in charge, and it sees earlier deadlines", () => {
  const d = fakeDeadlines([5, 5.5], 0.25);
  const s = fakeScheduler();
  const { ticker: t } = ticker(d, s);
  t.arm();
  d.clock.now = 5;
  s.run();
  d.due.unshift(5.3); // a request's short wait limit
  t.arm();
  assert.deepEqual(s.live(), ["immediate"]);
  d.clock.now = 5.3;
  s.run();
  // 5.3 settled on time; its 0.25 ms of settling made 5.5 due as well.
  assert.deepEqual(d.settled.map((x) => [x.deadline, x.at]), [[5, 5], [5.3, 5.3], [5.5, 5.55]]);
});

Deno.test("stop() cancels a pending poll and a pending timer; a frozen ticker arms nothing", async (t) => {
  await t.step("stop during a poll", () => {
    const { d, s, tk } = polling();
    assert.deepEqual(s.live(), ["immediate"]);
    tk.stop();
    assert.deepEqual(s.live(), []);
    tk.arm();
    tk.fire();
    assert.deepEqual(s.live(), []);
    assert.equal(d.settled.length, 1);
  });

  await t.step("frozen", () => {
    const d = fakeDeadlines([5]);
    const s = fakeScheduler();
    let frozen = true;
    const { ticker: tk } = ticker(d, s, { canAdvance: () => !frozen });
    tk.arm();
    d.clock.now = 10;
    tk.fire();
    assert.deepEqual(s.live(), []);
    assert.deepEqual(d.settled, []);
    frozen = false;
    tk.fire();
    assert.deepEqual(d.settled, [{ deadline: 5, at: 10 }]);
  });
});

Deno.test("an error while settling is reported and the ticker carries on", () => {
  const d = fakeDeadlines([5, 50]);
  const s = fakeScheduler();
  const errors: unknown[] = [];
  let fail = true;
  const { ticker: tk } = ticker(d, s, {
    target: {
      nextDeadline: d.target.nextDeadline,
      advance: () => {
        if (fail) {
          fail = false;
          throw new Error("tokens exhausted");
        }
        d.target.advance();
      },
    },
    onError: (error) => errors.push(error),
  });
  fireAt(tk, d, s, 5);
  assert.equal(errors.length, 1);
  assert.deepEqual(s.live(), ["timeout:0"], "the due deadline is tried again");
  s.run();
  assert.deepEqual(d.settled.map((x) => x.deadline), [5]);
  assert.deepEqual(s.live(), ["timeout:45"]);
});

Deno.test("a poll pending when the ticker freezes settles nothing until the freeze ends", () => {
  let frozen = false;
  const { d, s, tk } = polling({ canAdvance: () => !frozen });
  assert.deepEqual(s.live(), ["immediate"]);
  frozen = true; // a cluster node starts handing over
  d.clock.now = 5.6;
  s.run();
  assert.equal(d.settled.length, 1, "nothing settled while frozen");
  assert.deepEqual(s.live(), [], "and nothing armed");
  tk.arm();
  assert.deepEqual(s.live(), [], "arm() arms nothing while frozen");
  frozen = false; // the handover was not taken: the node fires its ticker again
  tk.fire();
  assert.deepEqual(d.settled.map((x) => x.deadline), [5, 5.5]);
});

Deno.test("stop() cancels a pending timer, and a callback that runs anyway after it does nothing", async (t) => {
  await t.step("a pending timer", () => {
    const d = fakeDeadlines([5, 50]);
    const s = fakeScheduler();
    const { ticker: tk } = ticker(d, s);
    tk.arm();
    assert.deepEqual(s.live(), ["timeout:5"]);
    tk.stop();
    assert.deepEqual(s.live(), []);
    d.clock.now = 60;
    assert.equal(s.runCancelled(), 1);
    assert.deepEqual(d.settled, []);
    assert.deepEqual(s.live(), []);
  });

  await t.step("a pending poll", () => {
    const { d, s, tk } = polling();
    assert.deepEqual(s.live(), ["immediate"]);
    tk.stop();
    d.clock.now = 6;
    assert.equal(s.runCancelled(), 1);
    assert.equal(d.settled.length, 1);
    assert.deepEqual(s.live(), []);
  });
});

Deno.test("a poll whose deadline went away times a far one at once, whatever its window", () => {
  const d = fakeDeadlines([5, 6.5], 1); // 1 ms of settling: a window of min(2, 4) = 2 ms
  const s = fakeScheduler();
  const { ticker: tk } = ticker(d, s);
  fireAt(tk, d, s, 5);
  assert.deepEqual(s.live(), ["immediate"]);
  d.due.splice(0, 1, 16); // released; the next deadline is 10 ms away
  s.run();
  assert.deepEqual(s.live(), ["timeout:10"]);
});

Deno.test("on the runtime's timers, close deadlines are polled for and all settled, and stop() leaves nothing", async () => {
  // 500 deadlines 0.1 ms apart, each costing 20 µs to settle: a timer runs 0.2 ms or more
  // late, so some settlements find several due and earn a poll for the next one.
  const start = performance.now() + 20;
  const due = Array.from({ length: 500 }, (_, i) => start + i * 0.1);
  let settled = 0;
  const calls = { timeout: 0, immediate: 0 };
  const counted: Scheduler = {
    ...RUNTIME_SCHEDULER,
    timeout: (fn, ms) => (calls.timeout++, RUNTIME_SCHEDULER.timeout(fn, ms)),
    immediate: (fn) => (calls.immediate++, RUNTIME_SCHEDULER.immediate(fn)),
  };
  const { promise: done, resolve } = Promise.withResolvers<void>();
  const tk = new Ticker({
    nextDeadline: () => due[0],
    advance: () => {
      const now = performance.now();
      while (due.length > 0 && due[0] <= now) {
        due.shift();
        settled++;
        const until = performance.now() + 0.02;
        while (performance.now() < until) { /* the cost of a settlement */ }
      }
    },
  }, {
    clock: () => performance.now(),
    afterTick: () => due.length === 0 && resolve(),
    onError: (error) => {
      throw error;
    },
    scheduler: counted,
  });
  tk.arm();
  await done;
  assert.equal(settled, 500);
  assert.ok(calls.immediate > 0, `polled ${calls.immediate} times, timed ${calls.timeout} times`);
  // Stopped with a deadline pending: nothing settles it any more.
  due.push(performance.now() + 1);
  tk.arm();
  tk.stop();
  await new Promise((r) => setTimeout(r, 10));
  assert.equal(settled, 500);
});
