/**
 * Browser tests of the WebSocket bridge (issue 5) in a real headless Chromium (Debian's
 * `chromium`, driven by `npm:playwright-core`): lockd runs with `--bridge 127.0.0.1:0
 * --bridge-demo`, and pages load the demo (`server/assets/demo.html`, served by the
 * bridge at `/` with the client bundle at `/client.js`), which puts its `LockClient` at
 * `globalThis.lockd` for scripted use. What lockd itself holds is checked with raw TCP
 * clients.
 *
 * Without Chromium these tests are skipped with a loud warning, unless
 * `LOCKD_REQUIRE_BROWSER=1` (set by `.ci/run`): then a missing Chromium fails the suite.
 * `LOCKD_CHROMIUM=/path/to/chromium` picks another browser binary.
 */

import assert from "node:assert/strict";
import { setTimeout as delay } from "node:timers/promises";
import type { Browser, Page } from "npm:playwright-core@1.65.1";
import type { Lock, LockClient } from "../mod.ts";
import { browserTests, launchChromium } from "./_chromium.ts";
import { LineClient, type ServerProcess, startServer, waitFor } from "./_helpers.ts";

/** `Deno.test` for a browser test: ignored, loudly, when Chromium is absent (tests/_chromium.ts). */
const browserTest = browserTests("the WebSocket bridge");

// ---------------------------------------------------------------------------------------
// Local helpers

/** What the demo page puts on `globalThis`, plus what these tests keep there. */
interface PageGlobals {
  lockd: { client: LockClient; LockClient: typeof LockClient };
  held?: Record<string, Lock>;
  pending?: Record<string, Promise<string>>;
  settled?: Record<string, string>;
}

/** Bridge port from a ready line ending in `, bridge on ws://HOST:PORT/`. */
function bridgePort(ready: string): number {
  const match = /, bridge on ws:\/\/127\.0\.0\.1:(\d+)\/$/.exec(ready);
  assert.ok(match, `ready line without the bridge: ${ready}`);
  return Number(match[1]);
}

/** `A <key> A <token>` → the token. */
function tokenOf(reply: string | null, key: string): bigint {
  const match = /^A (\S+) A (\d+)$/.exec(reply ?? "");
  assert.ok(match && match[1] === key, `expected a grant of ${key}, got ${JSON.stringify(reply)}`);
  return BigInt(match[2]);
}

/** A browser, a lockd with the bridge and demo, and what a test opened (closed at the end). */
class Fixture {
  readonly browser: Browser;
  server: ServerProcess;
  readonly bridgePort: number;
  readonly base: string;
  #raws: LineClient[] = [];
  #cleanups: (() => Promise<unknown>)[] = [];

  constructor(browser: Browser, server: ServerProcess) {
    this.browser = browser;
    this.server = server;
    this.bridgePort = bridgePort(server.ready);
    this.base = `http://127.0.0.1:${this.bridgePort}/`;
  }

  /** Opens the demo page in a fresh browser context, once its client is on `globalThis`. */
  async demo(): Promise<Page> {
    const context = await this.browser.newContext();
    const page = await context.newPage();
    await page.goto(this.base);
    await page.waitForFunction(() => "lockd" in globalThis);
    return page;
  }

  /** A raw TCP client of lockd itself. */
  async raw(): Promise<LineClient> {
    const client = await LineClient.connect(this.server.port);
    this.#raws.push(client);
    return client;
  }

  /** Runs `fn` at cleanup, before the browser and lockd stop. */
  defer(fn: () => Promise<unknown>): void {
    this.#cleanups.push(fn);
  }

  async cleanup(): Promise<void> {
    for (const fn of this.#cleanups.reverse()) await fn();
    await this.browser.close();
    await Promise.all(this.#raws.map((r) => r.close()));
    await this.server.stop();
    await Deno.remove(this.server.dataDir, { recursive: true }).catch(() => {});
  }
}

/** Starts lockd (`--bridge 127.0.0.1:0 --bridge-demo`) and Chromium, runs `fn`, cleans up. */
async function withBrowser(fn: (f: Fixture) => Promise<void>): Promise<void> {
  const [browser, server] = await Promise.allSettled([
    launchChromium(),
    startServer({ args: ["--bridge", "127.0.0.1:0", "--bridge-demo"] }),
  ]);
  if (browser.status === "rejected" || server.status === "rejected") {
    if (browser.status === "fulfilled") await browser.value.close();
    if (server.status === "fulfilled") {
      await server.value.stop();
      await Deno.remove(server.value.dataDir, { recursive: true }).catch(() => {});
    }
    throw browser.status === "rejected" ? browser.reason : (server as PromiseRejectedResult).reason;
  }
  const fixture = new Fixture(browser.value, server.value);
  try {
    await fn(fixture);
  } finally {
    await fixture.cleanup();
  }
}

/** Acquires `key` with the page's client; keeps the lock on the page; returns its token. */
async function acquire(page: Page, key: string, lease = 30): Promise<bigint> {
  const { token, type } = await page.evaluate(async ({ key, lease }) => {
    const g = globalThis as unknown as PageGlobals;
    const lock = await g.lockd.client.acquire(key, { lease });
    (g.held ??= {})[key] = lock;
    return { token: String(lock.token), type: typeof lock.token };
  }, { key, lease });
  assert.equal(type, "bigint", "fencing tokens are bigint in the browser too");
  return BigInt(token);
}

/** Starts an acquire of `key` on the page without waiting for it. */
async function startAcquire(page: Page, key: string, lease = 30): Promise<void> {
  await page.evaluate(({ key, lease }) => {
    const g = globalThis as unknown as PageGlobals;
    (g.pending ??= {})[key] = g.lockd.client.acquire(key, { lease }).then((lock) => {
      (g.held ??= {})[key] = lock;
      return (g.settled ??= {})[key] = String(lock.token);
    }, (error) => (g.settled ??= {})[key] = `error: ${error}`);
  }, { key, lease });
}

/** Whether the acquire started by {@linkcode startAcquire} is still waiting. */
function stillPending(page: Page, key: string): Promise<boolean> {
  return page.evaluate((key) => {
    const g = globalThis as unknown as PageGlobals;
    return g.settled?.[key] === undefined;
  }, key);
}

/** Waits for the acquire started by {@linkcode startAcquire}; returns its token. */
async function pendingToken(page: Page, key: string): Promise<bigint> {
  const text = await page.evaluate((key) => {
    const g = globalThis as unknown as PageGlobals;
    return g.pending![key];
  }, key);
  assert.match(text, /^\d+$/);
  return BigInt(text);
}

/** Releases the page's lock of `key`. */
async function release(page: Page, key: string): Promise<void> {
  await page.evaluate(async (key) => {
    const g = globalThis as unknown as PageGlobals;
    await g.held![key].release();
  }, key);
}

/** How many connections of the page's client are up. */
function connected(page: Page): Promise<number> {
  return page.evaluate(() => (globalThis as unknown as PageGlobals).lockd.client.connected);
}

/** Text of `#state` on the demo page. */
function state(page: Page): Promise<string> {
  return page.textContent("#state").then((text) => text ?? "");
}

async function waitForState(page: Page, pattern: RegExp, timeoutMs = 5000): Promise<string> {
  let last = "";
  await waitFor(
    async () => pattern.test(last = await state(page)),
    `#state ~ ${pattern}`,
    timeoutMs,
    25,
  )
    .catch((error) => {
      throw new Error(`${error.message}; #state is ${JSON.stringify(last)}`);
    });
  return last;
}

// ---------------------------------------------------------------------------------------
// Tests

browserTest("browser acquires and releases through the bridge with the demo page", async () => {
  await withBrowser(async (f) => {
    const page = await f.demo();
    const raw = await f.raw();
    // The buttons of the demo page.
    await page.fill("#key", "ui:door");
    await page.click("#acquire");
    const holding = await waitForState(page, /^holding ui:door with fencing token \d+$/);
    const token = BigInt(/token (\d+)$/.exec(holding)![1]);
    assert.match(
      await page.textContent("#log") ?? "",
      new RegExp(`acquired ui:door, token ${token}`),
    );
    assert.equal(await raw.request("A ui:door 30 0.001"), "A ui:door T", "lockd holds it");
    await page.click("#release");
    await waitForState(page, /^idle$/);
    const next = tokenOf(await raw.request("A ui:door 30 2"), "ui:door");
    assert.ok(next > token, `${next} > ${token}`);
    assert.equal(await raw.request(`R ui:door ${next}`), "R ui:door R");
    // The scripted client: bigint tokens, releases that free the key on lockd.
    const scripted = await acquire(page, "ui:scripted");
    assert.ok(scripted > next);
    assert.equal(await raw.request("A ui:scripted 30 0.001"), "A ui:scripted T");
    await release(page, "ui:scripted");
    tokenOf(await raw.request("A ui:scripted 30 0.001"), "ui:scripted");
  });
});

browserTest("browser pages contending on one key are served in FIFO order", async () => {
  await withBrowser(async (f) => {
    const [first, second] = await Promise.all([f.demo(), f.demo()]);
    const key = "fifo:door";
    const t1 = await acquire(first, key);
    // The second page queues (and says so on the page).
    await second.fill("#key", key);
    await second.click("#acquire");
    await waitForState(second, /^waiting for fifo:door/);
    await delay(300);
    assert.match(await state(second), /^waiting for fifo:door/, "still queued");
    // A third contender (raw TCP) queues behind it.
    const third = await f.raw();
    await third.send(`A ${key} 30 10`);
    assert.ok(await third.silentFor(200));
    await release(first, key);
    const holding = await waitForState(second, /^holding fifo:door with fencing token \d+$/);
    const t2 = BigInt(/token (\d+)$/.exec(holding)![1]);
    assert.ok(t2 > t1, `${t2} > ${t1}`);
    assert.ok(await third.silentFor(200), "the raw client queued after the second page");
    await second.click("#release");
    const t3 = tokenOf(await third.readLine(3000), key);
    assert.ok(t3 > t2, `${t3} > ${t2}`);
  });
});

browserTest("browser closing a page frees its lock and its queued acquire", async () => {
  await withBrowser(async (f) => {
    const [holder, waiter] = await Promise.all([f.demo(), f.demo()]);
    const raw = await f.raw();
    const t1 = await acquire(holder, "close:k");
    await startAcquire(waiter, "close:k");
    await delay(200);
    assert.ok(await stillPending(waiter, "close:k"));
    let started = Date.now();
    await holder.close();
    const t2 = await pendingToken(waiter, "close:k");
    assert.ok(t2 > t1);
    assert.ok(Date.now() - started < 3000, `freed after ${Date.now() - started} ms (lease 30 s)`);
    // A page waiting in the queue that closes is dropped too: its late grant is released.
    const queued = await f.demo();
    await startAcquire(queued, "close:k");
    await delay(200);
    assert.ok(await stillPending(queued, "close:k"));
    assert.equal((await raw.request("I close:k"))?.split(" ")[5], "1", "the page's acquire queued");
    await queued.close();
    // The bridge may notice this close at about the moment the release below reaches lockd,
    // which may then grant the key to the closing page's acquire: the bridge's client, which
    // half-closes a connection with acquires queued, still sees that grant and releases it.
    started = Date.now();
    await waiter.close();
    tokenOf(await raw.request("A close:k 30 5", 6000), "close:k");
    assert.ok(Date.now() - started < 3000, `freed after ${Date.now() - started} ms (lease 30 s)`);
  });
});

browserTest("browser page's client reconnects after the bridge restarts", async () => {
  await withBrowser(async (f) => {
    const page = await f.demo();
    const before = await acquire(page, "restart:k");
    await release(page, "restart:k");
    await waitFor(
      async () => await connected(page) === 2,
      "both connections up",
    );
    const first = f.server;
    assert.equal(await first.stop(), 0);
    await waitFor(
      async () => await connected(page) === 0,
      "the page to notice the bridge is gone",
    );
    // Same lockd port, bridge port and data directory.
    f.server = await startServer({
      listen: first.address,
      dataDir: first.dataDir,
      args: ["--bridge", `127.0.0.1:${f.bridgePort}`, "--bridge-demo"],
    });
    const restarted = Date.now();
    // The page's client reconnects in the background (every 3 s).
    await waitFor(
      async () => await connected(page) === 2,
      "the page's client to reconnect",
      6500,
      50,
    );
    assert.ok(Date.now() - restarted < 6500);
    const after = await acquire(page, "restart:k");
    assert.ok(after > before, `${after} > ${before}`);
    await release(page, "restart:k");
  });
});

browserTest("browser page from another origin is refused by the bridge", async () => {
  await withBrowser(async (f) => {
    const bundle = await Deno.readTextFile(
      new URL("../server/assets/lockd-client.js", import.meta.url),
    );
    const bridgeUrl = `ws://127.0.0.1:${f.bridgePort}/`;
    const html = `<!doctype html><title>elsewhere</title>
<script type="module">
  import { LockClient } from "/client.js";
  globalThis.foreign = { LockClient };
  globalThis.rawResult = new Promise((resolve) => {
    const events = [];
    const ws = new WebSocket(${JSON.stringify(bridgeUrl)});
    ws.onopen = () => events.push("open");
    ws.onerror = () => events.push("error");
    ws.onclose = (event) => { events.push("close"); resolve(events); };
  });
</script>`;
    const other = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, (request) => {
      const path = new URL(request.url).pathname;
      if (path === "/client.js") {
        return new Response(bundle, { headers: { "content-type": "text/javascript" } });
      }
      return new Response(html, { headers: { "content-type": "text/html" } });
    });
    f.defer(() => other.shutdown());
    const origin = `http://127.0.0.1:${other.addr.port}`;
    const page = await (await f.browser.newContext()).newPage();
    const messages: string[] = [];
    page.on("console", (message) => messages.push(message.text()));
    await page.goto(`${origin}/`);
    await page.waitForFunction(() => "rawResult" in globalThis);
    const events = await page.evaluate(() =>
      (globalThis as unknown as { rawResult: Promise<string[]> }).rawResult
    );
    assert.ok(!events.includes("open"), `the WebSocket must not open: ${events}`);
    assert.deepEqual(events, ["error", "close"]);
    await waitFor(() => messages.some((m) => m.includes("403")), "Chromium to report the 403");
    // The client of another origin gets no connection either.
    const outcome = await page.evaluate(async (url) => {
      const g = globalThis as unknown as { foreign: { LockClient: typeof LockClient } };
      const client = new g.foreign.LockClient(url, { retryTimeoutMs: 500, connectTimeoutMs: 1000 });
      try {
        const lock = await client.acquire("foreign:k", { lease: 5 });
        return `acquired ${lock.token}`;
      } catch (error) {
        return (error as Error).name;
      } finally {
        await client.close();
      }
    }, bridgeUrl);
    assert.equal(outcome, "LockUnavailableError");
    const raw = await f.raw();
    tokenOf(await raw.request("A foreign:k 30 0.001"), "foreign:k");
    // The same refusal, seen from plain HTTP with the page's Origin.
    const response = await fetch(`http://127.0.0.1:${f.bridgePort}/`, {
      headers: {
        upgrade: "websocket",
        connection: "Upgrade",
        "sec-websocket-key": "dGhlIHNhbXBsZSBub25jZQ==",
        "sec-websocket-version": "13",
        origin,
      },
    });
    await response.body?.cancel();
    assert.equal(response.status, 403);
  });
});

browserTest(
  "browser demo page shows the queue place and a lease countdown, and survives its server",
  async () => {
    await withBrowser(async (f) => {
      const [holder, waiter] = await Promise.all([f.demo(), f.demo()]);
      const errors: string[] = [];
      for (const page of [holder, waiter]) page.on("pageerror", (e) => errors.push(e.message));
      const detail = async (page: Page) => (await page.textContent("#detail")) ?? "";
      await holder.fill("#key", "ui:queue");
      await holder.click("#acquire");
      await waitForState(holder, /^holding ui:queue with fencing token \d+$/);
      let first = NaN;
      await waitFor(async () => {
        const m = /^lease left: ([\d.]+) s$/.exec(await detail(holder));
        return m !== null && (first = Number(m[1])) <= 30;
      }, "the lease countdown");
      await waitFor(async () => {
        const m = /^lease left: ([\d.]+) s$/.exec(await detail(holder));
        return m !== null && Number(m[1]) < first;
      }, "the countdown to go down");
      await waiter.fill("#key", "ui:queue");
      await waiter.click("#acquire");
      await waitForState(waiter, /^waiting for ui:queue/);
      await waitFor(
        async () => /^place in the queue: 1 of 1$/.test(await detail(waiter)),
        "the waiter's place in the queue",
      );
      // The server goes away while the holder holds: the page says why it lost the lock,
      // Release (if clicked before the page noticed) neither throws nor sticks.
      await f.server.stop();
      await holder.$eval("#release", (button) => (button as unknown as { click(): void }).click());
      const lost = await waitForState(holder, /^(lost the lock: .+|idle)$/);
      assert.doesNotMatch(lost, /lease ran out/, `the reason is not the lease: ${lost}`);
      await waitFor(() => holder.isEnabled("#acquire"), "the page can acquire again");
      // The waiter's acquire gives up (no bridge) and its page is usable again.
      await waitForState(waiter, /^idle$/, 20_000);
      assert.equal(await waiter.isEnabled("#acquire"), true);
      assert.deepEqual(errors, [], "no uncaught error on the pages");
    });
  },
);

browserTest("browser demo page names why a held lock was lost", async () => {
  await withBrowser(async (f) => {
    const page = await f.demo();
    const raw = await f.raw();
    await page.fill("#key", "ui:lost");
    await page.fill("#lease", "1");
    await page.click("#acquire");
    const holding = await waitForState(page, /^holding ui:lost with fencing token \d+$/);
    const token = BigInt(/token (\d+)$/.exec(holding)![1]);
    // Someone else takes the key once the 1 s lease ran out: the page says so, not "idle".
    tokenOf(await raw.request("A ui:lost 30 5"), "ui:lost");
    const lost = await waitForState(page, /^lost the lock: /);
    assert.match(lost, /lease/i, `the reason names the lease: ${lost}`);
    assert.ok(token > 0n);
  });
});
