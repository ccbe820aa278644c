/**
 * Black-box tests of session-bound locks on one node (docs/protocol.md, "Sessions"): real
 * `server/main.ts` processes on 127.0.0.1 with a short `--session-grace`, reached by raw
 * lines (`HELLO 1 <session> <name>`, `A <key> <lease> <wait> s`) and by `LockClient` in a
 * separate process that is killed with `kill -9`. The cluster cases are in
 * `session_failover_test.ts`.
 *
 * @module
 */

import assert from "node:assert/strict";
import { LockClient } from "../mod.ts";
import {
  type Clients,
  grantOf,
  type LineClient,
  type ServerProcess,
  waitFor,
  withServer,
} from "./_helpers.ts";
import { sleep, within } from "./_cluster.ts";
import { assertNoUnhandledRejections } from "./_unhandled.ts";
import { arrival, newSession, queue, releasesLogged } from "./_sessions.ts";

// ---------------------------------------------------------------------------------------
// Local helpers

/** The grace of most tests, seconds (short, to keep the suite fast). */
const GRACE_S = 1;
const GRACE_MS = GRACE_S * 1000;
const ARGS = ["--session-grace", String(GRACE_S)];

/** A grant caused by the grace may come this much early (timer and clock granularity). */
const EARLY = 0.8;
/** ... and this much late on a loaded machine. */
const LATE_MS = 4000;

/** Connects and says hello with `session`. */
async function connectAs(clients: Clients, session: string, name = "tester"): Promise<LineClient> {
  const c = await clients.connect();
  assert.equal(await c.request(`HELLO 1 ${session} ${name}`), `HELLO ${session} OK`);
  return c;
}

/** `A <key> <lease> 0 s` on `c`, which must be granted at once; returns the token. */
async function bind(c: LineClient, key: string, lease = 60): Promise<bigint> {
  return grantOf(await c.request(`A ${key} ${lease} 0 s`), key);
}

/** Waits until `server` logged `count` session releases. */
async function waitForReleases(
  server: ServerProcess,
  count: number,
  timeoutMs = 5000,
): Promise<{ session: string; count: number }[]> {
  await waitFor(
    () => releasesLogged(server).length >= count,
    `${count} session release(s)`,
    timeoutMs,
  );
  return releasesLogged(server);
}

/** Asserts that `elapsedMs` is about `expectedMs` (a grace or a lease): not early, not much late. */
function assertAbout(elapsedMs: number, expectedMs: number, what: string): void {
  assert.ok(
    elapsedMs >= expectedMs * EARLY && elapsedMs < expectedMs + LATE_MS,
    `${what} after ${elapsedMs.toFixed(0)} ms, expected about ${expectedMs} ms`,
  );
}

/** The program of a holder process: takes four locks, prints their tokens, waits forever. */
const HOLDER = `
import { LockClient } from ${JSON.stringify(new URL("../mod.ts", import.meta.url).href)};
const [address, prefix] = Deno.args;
const sessionClient = new LockClient(address, { sessionLocks: true, name: "holder-a" });
const plainClient = new LockClient(address, { name: "holder-b" });
const locks = [
  await sessionClient.acquire(prefix + ":bound", { lease: 60 }),
  await sessionClient.acquire(prefix + ":unbound", { lease: 60, session: false }),
  await plainClient.acquire(prefix + ":opted", { lease: 60, session: true }),
  await plainClient.acquire(prefix + ":plain", { lease: 60 }),
];
console.log("held " + locks.map((lock) => lock.token).join(" "));
setInterval(() => {}, 60_000); // Until killed.
`;

/** A holder process: its tokens, in `HOLDER`'s order. */
interface Holder {
  tokens: bigint[];
  /** `kill -9`, then waits for its exit (idempotent). */
  kill(): Promise<void>;
}

/** Runs `HOLDER` against `address` and waits for its `held` line. */
async function spawnHolder(address: string, prefix: string): Promise<Holder> {
  const script = await Deno.makeTempFile({ prefix: "lockd-holder-", suffix: ".ts" });
  await Deno.writeTextFile(script, HOLDER);
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--no-config", script, address, prefix],
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let err = "";
  const errDone = (async () => {
    for await (const chunk of child.stderr.pipeThrough(new TextDecoderStream())) err += chunk;
  })();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let out = "";
  const firstLine = (async () => {
    while (!out.includes("\n")) {
      const { value, done } = await reader.read();
      if (done) return null;
      out += value;
    }
    return out.slice(0, out.indexOf("\n"));
  })();
  let killed: Promise<void> | undefined;
  const kill = () => {
    killed ??= (async () => {
      try {
        child.kill("SIGKILL");
      } catch {
        // Exited already.
      }
      await child.status;
      await firstLine;
      while (!(await reader.read()).done) { /* drain */ }
      await errDone;
      await Deno.remove(script).catch(() => {});
    })();
    return killed;
  };
  let line: string | null;
  try {
    line = await within(firstLine, 20_000, "the holder's line");
  } catch (error) {
    await kill();
    throw new Error(`${(error as Error).message}\nholder stderr:\n${err}`);
  }
  const match = /^held (\d+) (\d+) (\d+) (\d+)$/.exec(line ?? "");
  if (match === null) {
    await kill();
    throw new Error(`unexpected holder output ${JSON.stringify(line)}\nholder stderr:\n${err}`);
  }
  return { tokens: match.slice(1).map(BigInt), kill };
}

// ---------------------------------------------------------------------------------------
// A crashed client

Deno.test("session locks of a process killed with kill -9 go one grace later; unbound locks stay", async () => {
  await withServer({ args: ARGS }, async (server, clients) => {
    const holder = await spawnHolder(server.address, "crash");
    try {
      const [bound, unbound, opted, plain] = holder.tokens;
      const waiterA = await clients.connect();
      const waiterB = await clients.connect();
      await queue(waiterA, "crash:bound", 30);
      await queue(waiterB, "crash:opted", 30);

      const killedAt = performance.now();
      await holder.kill();
      const [a, b] = await Promise.all([
        arrival(waiterA, GRACE_MS + LATE_MS),
        arrival(waiterB, GRACE_MS + LATE_MS),
      ]);
      console.log(`  bound locks released ${(a.at - killedAt).toFixed(0)} ms after kill -9`);
      assert.ok(grantOf(a.reply, "crash:bound") > bound, "a new token for the waiter");
      assert.ok(grantOf(b.reply, "crash:opted") > opted, "a new token for the waiter");
      assertAbout(a.at - killedAt, GRACE_MS, "sessionLocks: true lock released");
      assertAbout(b.at - killedAt, GRACE_MS, "session: true lock released");

      // One grace has passed: the locks not bound to a session are still held.
      const other = await clients.connect();
      assert.equal(await other.request("A crash:unbound 60 0.1"), "A crash:unbound T");
      assert.equal(await other.request("A crash:plain 60 0.1"), "A crash:plain T");
      assert.equal(await other.request(`X crash:unbound ${unbound} 60`), "X crash:unbound X");
      assert.equal(await other.request(`R crash:plain ${plain}`), "R crash:plain R");
      const logged = await waitForReleases(server, 2);
      assert.deepEqual(logged.map((l) => l.count), [1, 1], "one bound lock per session");
      assert.notEqual(logged[0].session, logged[1].session, "one session per LockClient");
    } finally {
      await holder.kill();
    }
  });
  await assertNoUnhandledRejections();
});

// ---------------------------------------------------------------------------------------
// Reconnecting, and several connections of one session

Deno.test("session locks survive a reconnect within the grace and go one grace after the last close", async () => {
  await withServer({ args: ARGS }, async (server, clients) => {
    const session = newSession();
    const first = await connectAs(clients, session);
    const a = await bind(first, "back:a");
    const b = await bind(first, "back:b");
    await first.close();
    // The client takes a moment to come back (the server sees the close meanwhile), well
    // within the grace.
    await sleep(GRACE_MS / 4);
    const second = await connectAs(clients, session);

    // More than two graces later both locks are still held.
    const other = await connectAs(clients, newSession(), "other");
    assert.equal(
      await other.request(`A back:a 60 ${2.5 * GRACE_S}`, 2.5 * GRACE_MS + LATE_MS),
      "A back:a T",
    );
    assert.equal(await other.request("A back:b 60 0.001"), "A back:b T");
    assert.deepEqual(releasesLogged(server), [], "nothing released");

    // The new connection releases with the token of the old one.
    assert.equal(await second.request(`R back:a ${a}`), "R back:a R");
    await queue(other, "back:b", 30);
    const closedAt = performance.now();
    await second.close();
    const granted = await arrival(other, GRACE_MS + LATE_MS);
    assert.ok(grantOf(granted.reply, "back:b") > b, "a new token");
    assertAbout(granted.at - closedAt, GRACE_MS, "released");
    const logged = await waitForReleases(server, 1);
    assert.deepEqual(logged, [{ session: session.slice(0, 8), count: 1 }]);
  });
  await assertNoUnhandledRejections();
});

Deno.test("session grace starts only when the last connection of the session closes", async () => {
  await withServer({ args: ARGS }, async (server, clients) => {
    const session = newSession();
    const one = await connectAs(clients, session);
    const two = await connectAs(clients, session);
    const a = await bind(one, "two:a");
    const b = await bind(two, "two:b");
    const waiter = await connectAs(clients, newSession(), "waiter");

    await one.close();
    // The session lives on through the other connection: both locks stay.
    assert.equal(
      await waiter.request(`A two:a 60 ${2.5 * GRACE_S}`, 2.5 * GRACE_MS + LATE_MS),
      "A two:a T",
    );
    assert.equal(await waiter.request("A two:b 60 0.001"), "A two:b T");
    assert.deepEqual(releasesLogged(server), [], "nothing released");

    await queue(waiter, "two:a", 30);
    const other = await clients.connect();
    await queue(other, "two:b", 30);
    const closedAt = performance.now();
    await two.close();
    const [ga, gb] = await Promise.all([
      arrival(waiter, GRACE_MS + LATE_MS),
      arrival(other, GRACE_MS + LATE_MS),
    ]);
    assert.ok(grantOf(ga.reply, "two:a") > a && grantOf(gb.reply, "two:b") > b, "new tokens");
    assertAbout(ga.at - closedAt, GRACE_MS, "two:a released");
    assertAbout(gb.at - closedAt, GRACE_MS, "two:b released");
    const logged = await waitForReleases(server, 1);
    assert.deepEqual(logged, [{ session: session.slice(0, 8), count: 2 }]);
  });
  await assertNoUnhandledRejections();
});

// ---------------------------------------------------------------------------------------
// What the grace does not change

Deno.test("LockClient.close() releases session locks at once, without waiting for the grace", async () => {
  const graceMs = 5000;
  await withServer({ args: ["--session-grace", "5"] }, async (server, clients) => {
    const client = new LockClient(server.address, { sessionLocks: true, name: "closer" });
    try {
      const lock = await within(client.acquire("close:k", { lease: 60 }), 5000, "acquire");
      const waiter = await clients.connect();
      await queue(waiter, "close:k", 30);
      const closing = performance.now();
      await client.close();
      const { reply, at } = await arrival(waiter, graceMs);
      const elapsedMs = at - closing;
      assert.ok(grantOf(reply, "close:k") > lock.token, "a new token");
      assert.ok(elapsedMs < graceMs / 2, `granted ${elapsedMs.toFixed(0)} ms after close()`);
    } finally {
      await client.close();
    }
  });
  await assertNoUnhandledRejections();
});

Deno.test("session locks still end with their lease while the session is alive", async () => {
  await withServer({ args: ARGS }, async (server, clients) => {
    const holder = await connectAs(clients, newSession());
    const waiter = await clients.connect();
    const token = await bind(holder, "lease:k", 1);
    const grantedAt = performance.now();
    await queue(waiter, "lease:k", 30);
    const { reply, at } = await arrival(waiter, 1000 + LATE_MS);
    assert.ok(grantOf(reply, "lease:k") > token, "a new token");
    assertAbout(at - grantedAt, 1000, "the 1 s lease ran out");
    // The holder is still connected: its token is simply stale now.
    assert.equal(await holder.request(`R lease:k ${token}`), "R lease:k N");
    assert.equal(await holder.request(`X lease:k ${token} 60`), "X lease:k N");
    assert.deepEqual(releasesLogged(server), [], "no session went");
  });
  await assertNoUnhandledRejections();
});

Deno.test("session-bound acquires need a hello with a session", async () => {
  await withServer({ args: ARGS }, async (_server, clients) => {
    const bare = await clients.connect();
    assert.match((await bare.request("A need:a 60 0 s"))!, /^A need:a E /);
    const anonymous = await clients.connect();
    assert.equal(await anonymous.request("HELLO 1 - anonymous"), "HELLO - OK");
    assert.match((await anonymous.request("A need:a 60 0 s"))!, /^A need:a E /);
    // Nothing was granted: the key is free.
    grantOf(await anonymous.request("A need:a 60 0.001"), "need:a");
  });
});
