/**
 * Black-box tests of session-bound locks in a cluster (docs/protocol.md, "Sessions";
 * docs/cluster.md): three real `server/main.ts` processes on 127.0.0.1 with the default
 * timings (heartbeat 0.1 s, failover timeout 1 s) and `--session-grace 2`. Sessions and
 * their bound locks are replicated; after a failover (`kill -9`) or a handoff (`SIGTERM`)
 * the grace counts from the new active's promotion: a client that reconnects in time keeps
 * its locks, one that does not loses them about one grace after the promotion.
 *
 * @module
 */

import assert from "node:assert/strict";
import { LockClient } from "../mod.ts";
import type { LineClient } from "./_helpers.ts";
import { Cluster, type Member, replicated, tokenOf, within } from "./_cluster.ts";
import { assertNoUnhandledRejections } from "./_unhandled.ts";
import { arrival, newSession, queue, releasesLogged } from "./_sessions.ts";

// ---------------------------------------------------------------------------------------
// Local helpers

const GRACE_S = 2;
const GRACE_MS = GRACE_S * 1000;
const ARGS = ["--session-grace", String(GRACE_S)];

/** A release caused by the grace may come this much early (timers, log latency). */
const EARLY = 0.8;
/** ... and this much late on a loaded machine. */
const LATE_MS = 4000;

/** Raw connections opened by a test, closed at its end. */
class Lines {
  #open: LineClient[] = [];

  /** Connects to `member` and says hello with `session`. */
  async connectAs(member: Member, session: string, name = "tester"): Promise<LineClient> {
    const c = await member.connect();
    this.#open.push(c);
    assert.equal(await c.request(`HELLO 1 ${session} ${name}`), `HELLO ${session} OK`);
    return c;
  }

  async closeAll(): Promise<void> {
    await Promise.all(this.#open.map((c) => c.close()));
    this.#open = [];
  }
}

/** Runs `fn` with a {@linkcode Lines}, closing its connections afterwards. */
async function withLines(fn: (lines: Lines) => Promise<void>): Promise<void> {
  const lines = new Lines();
  try {
    await fn(lines);
  } finally {
    await lines.closeAll();
  }
}

/** Runs `fn` with a plain connection to `member` (no hello), closed afterwards. */
async function withLinesOn(member: Member, fn: (c: LineClient) => Promise<void>): Promise<void> {
  const c = await member.connect();
  try {
    await fn(c);
  } finally {
    await c.close();
  }
}

/** `A <key> 60 0 s` on `c`, which must be granted at once; returns the token. */
async function bind(c: LineClient, key: string): Promise<bigint> {
  return tokenOf(await c.request(`A ${key} 60 0 s`), key);
}

function assertAboutOneGrace(elapsedMs: number, what: string): void {
  assert.ok(
    elapsedMs >= GRACE_MS * EARLY,
    `${what} ${elapsedMs.toFixed(0)} ms after the promotion: before the grace of ${GRACE_MS} ms`,
  );
  assert.ok(
    elapsedMs < GRACE_MS + LATE_MS,
    `${what} ${elapsedMs.toFixed(0)} ms after the promotion: long after the grace`,
  );
}

/**
 * On the new active `heir`, right after its promotion: `back` reconnects and keeps
 * `kept`/`keptToken` past the grace (another session's acquire times out, the same session
 * releases it with the old token); nobody comes back for `lost`/`lostToken`, which a waiter
 * gets about one grace after `promotedAt`. Returns when both are settled.
 */
async function checkAfterPromotion(
  lines: Lines,
  heir: Member,
  promotedAt: number,
  kept: { key: string; token: bigint; session: string },
  lost: { key: string; token: bigint; session: string },
): Promise<void> {
  const again = await lines.connectAs(heir, kept.session, "returning");
  const waiter = await lines.connectAs(heir, newSession(), "waiter");
  await queue(waiter, lost.key, 30);
  const other = await lines.connectAs(heir, newSession(), "other");
  await other.send(`A ${kept.key} 60 ${GRACE_S + 2}`);

  const [granted, refused] = await Promise.all([
    arrival(waiter, GRACE_MS + LATE_MS),
    arrival(other, GRACE_MS + 2000 + LATE_MS),
  ]);
  const grantMs = granted.at - promotedAt;
  const refusedMs = refused.at - promotedAt;
  console.log(
    `  lost lock granted ${grantMs.toFixed(0)} ms after the promotion, ` +
      `kept lock still held ${refusedMs.toFixed(0)} ms after it`,
  );
  const token = tokenOf(granted.reply, lost.key);
  assert.ok(token > lost.token && token > kept.token, `token ${token} is not above the old ones`);
  assertAboutOneGrace(grantMs, "the lock of the session that never came back was released");
  assert.equal(refused.reply, `A ${kept.key} T`, "the returning session keeps its lock");
  assert.ok(refusedMs > GRACE_MS, `held only ${refusedMs.toFixed(0)} ms after the promotion`);
  assert.equal(await again.request(`R ${kept.key} ${kept.token}`), `R ${kept.key} R`);
  assert.deepEqual(releasesLogged(heir), [{ session: lost.session.slice(0, 8), count: 1 }]);
}

// ---------------------------------------------------------------------------------------
// Failover

Deno.test("cluster (3 nodes) after a kill -9 of the active keeps the bound locks of sessions that reconnect, and releases the others one grace after the promotion", async () => {
  await Cluster.run(3, async (cluster) => {
    const old = await cluster.waitForOneActive();
    assert.equal(old, cluster.at(0), "the highest-priority node is active after a cold start");
    const heir = cluster.at(1);
    await withLines(async (lines) => {
      // Any session id a hello accepts is replicated: not only LockClient's 32 hex digits.
      const back = crypto.randomUUID();
      const gone = `Other_${crypto.randomUUID().slice(0, 13).toUpperCase()}`;
      const keep = await lines.connectAs(old, back, "keeper");
      const lose = await lines.connectAs(old, gone, "loser");
      const kept = { key: "fail:kept", token: await bind(keep, "fail:kept"), session: back };
      const lost = { key: "fail:lost", token: await bind(lose, "fail:lost"), session: gone };
      const plain = tokenOf(await lose.request("A fail:plain 60 0"), "fail:plain");
      await replicated(heir, kept.key, kept.token);
      await replicated(heir, lost.key, lost.token);
      await replicated(heir, "fail:plain", plain);

      const mark = heir.logMark();
      await old.kill("SIGKILL");
      await heir.waitForLog(/ is active \(/, { since: mark, timeoutMs: 5000 });
      const promotedAt = performance.now();
      await checkAfterPromotion(lines, heir, promotedAt, kept, lost);

      // The session that never came back had an unbound lock too: its lease still holds it.
      await withLinesOn(heir, async (c) => {
        assert.equal(await c.request("A fail:plain 60 0.1"), "A fail:plain T");
        assert.equal(await c.request(`R fail:plain ${plain}`), "R fail:plain R");
      });
      assert.equal(await cluster.waitForOneActive({ not: [old] }), heir);
    });
  }, { args: ARGS });
  await assertNoUnhandledRejections();
});

// ---------------------------------------------------------------------------------------
// Graceful handoff

Deno.test("cluster (3 nodes) handing over on SIGTERM keeps the bound locks of sessions that reconnect, LockClient's included", async () => {
  await Cluster.run(3, async (cluster) => {
    const old = await cluster.waitForOneActive();
    assert.equal(old, cluster.at(0), "the highest-priority node is active after a cold start");
    const heir = cluster.at(1);
    const client = new LockClient(cluster.addresses, { sessionLocks: true, name: "published" });
    try {
      await withLines(async (lines) => {
        const back = newSession();
        const gone = newSession();
        const keep = await lines.connectAs(old, back, "keeper");
        const lose = await lines.connectAs(old, gone, "loser");
        const kept = { key: "term:kept", token: await bind(keep, "term:kept"), session: back };
        const lost = { key: "term:lost", token: await bind(lose, "term:lost"), session: gone };
        const lock = await within(client.acquire("term:client", { lease: 60 }), 5000, "acquire");
        await replicated(heir, kept.key, kept.token);
        await replicated(heir, lost.key, lost.token);
        await replicated(heir, "term:client", lock.token);

        const mark = heir.logMark();
        const exitCode = old.kill("SIGTERM");
        await heir.waitForLog(/ is active \(took over from /, { since: mark, timeoutMs: 5000 });
        const promotedAt = performance.now();
        await checkAfterPromotion(lines, heir, promotedAt, kept, lost);

        // More than a grace after the takeover, LockClient's lock is still held, and its
        // token still works on the new active.
        await withLinesOn(heir, async (c) => {
          assert.equal(await c.request("A term:client 60 0.001"), "A term:client T");
        });
        assert.equal(lock.signal.aborted, false, "LockClient did not lose its lock");
        await within(lock.extend(60), 5000, "extend on the new active");
        await within(lock.release(), 5000, "release on the new active");
        await withLinesOn(heir, async (c) => {
          tokenOf(await c.request("A term:client 60 0.001"), "term:client");
        });
        assert.equal(await within(exitCode, 5000, "the old active exits"), 0, "exit code");
        assert.equal(await cluster.waitForOneActive({ not: [old] }), heir);
      });
    } finally {
      await client.close();
    }
  }, { args: ARGS });
  await assertNoUnhandledRejections();
});
