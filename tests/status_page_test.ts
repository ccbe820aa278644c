/**
 * The status page of `--http` (server/assets/status.html; issue 13) in a real headless
 * Chromium (tests/_chromium.ts): lockd runs with `--http 127.0.0.1:0`, raw TCP clients
 * take locks under client names, and the page must show the node's role, the holders with
 * their names and a lease countdown that ticks between refreshes, the waiters, the counts
 * and the grant chart, with no script error or CSP violation. Keys and names are shown as
 * text, never as markup.
 *
 * `LOCKD_SCREENSHOT=1` also writes the README's screenshot, docs/status-page.png
 * (1000×700), after a minute of varying load so that the chart has a shape; without it the
 * screenshot is taken and checked but not saved (a test run leaves the tree unchanged).
 */

import assert from "node:assert/strict";
import type { Page } from "npm:playwright-core@1.65.1";
import { browserTests, launchChromium } from "./_chromium.ts";
import { Cluster } from "./_cluster.ts";
import { grantOf, LineClient, startServer, waitFor } from "./_helpers.ts";

const browserTest = browserTests("the status page");
const SAVE_SCREENSHOT = Deno.env.get("LOCKD_SCREENSHOT") === "1";
const SCREENSHOT = new URL("../docs/status-page.png", import.meta.url);

/** The base URL from a ready line ending in `, http on http://HOST:PORT/`. */
function httpBase(ready: string): string {
  const match = /, http on (http:\/\/127\.0\.0\.1:\d+\/)$/.exec(ready);
  assert.ok(match, `ready line without http: ${ready}`);
  return match[1];
}

/** What a test of the page gets. */
interface Fixture {
  /** The HTTP base URL of the node whose page is shown. */
  base: string;
  /** Its page in Chromium (1000×700). */
  page: Page;
  /** A raw client of that node, with a hello naming it when `name` is given. */
  client(name?: string): Promise<LineClient>;
  /** Script errors and console errors (CSP violations among them) of the page. */
  problems: string[];
}

/**
 * Runs `fn` with a page of a single lockd node with `--http`, or of the active of a 2-node
 * cluster; everything is closed at the end.
 */
async function withStatusPage(
  kind: "single" | "cluster",
  fn: (f: Fixture) => Promise<void>,
): Promise<void> {
  const args = ["--http", "127.0.0.1:0"];
  let stop: () => Promise<unknown>;
  let node: { port: number; ready: string };
  if (kind === "single") {
    const server = await startServer({ args });
    stop = async () => {
      await server.stop();
      await Deno.remove(server.dataDir, { recursive: true }).catch(() => {});
    };
    node = server;
  } else {
    const cluster = await Cluster.start(2, { args });
    stop = () => cluster.close();
    try {
      const active = await cluster.waitForOneActive();
      node = { port: active.port, ready: active.readyLine };
    } catch (error) {
      await stop();
      throw error;
    }
  }
  const clients: LineClient[] = [];
  let browser;
  try {
    browser = await launchChromium();
    const context = await browser.newContext({ viewport: { width: 1000, height: 700 } });
    const page = await context.newPage();
    const problems: string[] = [];
    page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
    page.on("console", (m) => m.type() === "error" && problems.push(`console: ${m.text()}`));
    const client = async (name?: string) => {
      const c = await LineClient.connect(node.port);
      clients.push(c);
      if (name !== undefined) {
        const session = crypto.randomUUID().replaceAll("-", "");
        assert.equal(await c.request(`HELLO 1 ${session} ${name}`), `HELLO ${session} OK`);
      }
      return c;
    };
    await fn({ base: httpBase(node.ready), page, client, problems });
    // The page's own requests to /status and /locks go on: leave it before stopping.
    await page.goto("about:blank");
  } finally {
    await browser?.close();
    await Promise.all(clients.map((c) => c.close()));
    await stop();
  }
}

/** `12.3 s`, `4m 05s`... → seconds. */
function seconds(text: string | null): number {
  const short = /^([\d.]+) s$/.exec(text ?? "");
  if (short) return Number(short[1]);
  const long = /^(\d+)m (\d+)s$/.exec(text ?? "");
  assert.ok(long, `a lease left, got ${JSON.stringify(text)}`);
  return Number(long[1]) * 60 + Number(long[2]);
}

/** Takes and releases locks for `ms` at a rate that varies, so the chart has a shape. */
async function load(c: LineClient, ms: number): Promise<void> {
  const start = performance.now();
  let n = 0;
  while (performance.now() - start < ms) {
    const t = (performance.now() - start) / 1000;
    const perTick = Math.round(3 + 2.5 * Math.sin(t / 5) + 1.5 * Math.sin(t / 1.7));
    for (let i = 0; i < perTick; i++) {
      const key = `load:${n++}`;
      const token = grantOf(await c.request(`A ${key} 5 0`), key);
      assert.equal(await c.request(`R ${key} ${token}`), `R ${key} R`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Width and height from a PNG's IHDR. */
function pngSize(png: Uint8Array): { width: number; height: number } {
  assert.deepEqual([...png.subarray(0, 8)], [137, 80, 78, 71, 13, 10, 26, 10], "a PNG");
  const view = new DataView(png.buffer, png.byteOffset, png.byteLength);
  return { width: view.getUint32(16), height: view.getUint32(20) };
}

/** Takes and releases locks in the background until the returned function is called. */
function backgroundLoad(c: LineClient): () => Promise<void> {
  let running = true;
  const done = (async () => {
    for (let n = 0; running; n++) {
      const key = `bg:${n}`;
      const token = grantOf(await c.request(`A ${key} 5 0`), key);
      assert.equal(await c.request(`R ${key} ${token}`), `R ${key} R`);
      await new Promise((r) => setTimeout(r, 25));
    }
  })();
  done.catch(() => {}); // Seen by whoever stops it; a test that failed first closed the client.
  return () => {
    running = false;
    return done;
  };
}

browserTest(
  "status page of a cluster's active: roles, holders, a ticking countdown, waiters, the chart",
  async () => {
    await withStatusPage("cluster", async ({ base, page, client, problems }) => {
      // First some history for the chart (the leases below must not run out meanwhile).
      await load(await client("load-gen"), SAVE_SCREENSHOT ? 60_000 : 2500);
      const billing = await client("billing-7");
      const orders = grantOf(await billing.request("A orders:17 30 0"), "orders:17");
      grantOf(await billing.request("A orders:23 45 0"), "orders:23");
      const reports = await client("reports-2");
      grantOf(await reports.request("A reports:daily 600 0"), "reports:daily");
      const deploy = await client("deploy@ci-41");
      grantOf(await deploy.request("A deploy:prod 120 0"), "deploy:prod");
      const anonymous = await client();
      grantOf(await anonymous.request("A cache:warm 15 0"), "cache:warm");
      // Two acquires queue behind orders:17.
      for (const name of ["billing-8", "billing-9"]) {
        await (await client(name)).send("A orders:17 30 300");
      }
      await waitFor(async () => {
        const status = await (await fetch(`${base}status`)).json();
        return status.waiters === 2 && status.replication.inSync.length === 1 &&
          status.peers[0].lagMs !== null;
      }, "two waiters queued, the standby in sync");
      const stopLoad = backgroundLoad(await client("load-gen-2"));
      try {
        await checkPage(page, base, orders);
      } finally {
        await stopLoad();
      }
      assert.deepEqual(problems, [], "no script error or CSP violation");
    });
  },
);

/** The checks of the test above, on the active's page. */
async function checkPage(page: Page, base: string, orders: bigint): Promise<void> {
  await page.goto(base);
  await page.waitForSelector('body[data-loaded="true"]');
  assert.equal(await page.textContent("#role"), "active");
  assert.equal(await page.getAttribute("#role", "class"), "badge role-active");
  const address = (await page.textContent("#address"))!;
  assert.match(address, /^127\.0\.0\.1:\d+$/);
  assert.equal(await page.textContent("#active"), `${address} (this node)`);
  // (The background load holds a key for a moment now and then: a refresh may count it.)
  await waitFor(async () => await page.textContent("#holders") === "5", "5 holders shown");
  assert.equal(await page.textContent("#waiters"), "2");
  assert.match((await page.textContent("#replication"))!, /^async in sync: 127\.0\.0\.1:\d+/);
  // Every node's role as this one sees it: itself, then its peer.
  const nodes = page.locator("#nodes tbody tr");
  assert.equal(await nodes.count(), 2);
  assert.equal(await nodes.nth(0).getAttribute("data-address"), address);
  assert.equal(await nodes.nth(0).locator(".badge").textContent(), "active");
  assert.equal(await nodes.nth(1).locator(".badge").textContent(), "standby");
  assert.match((await nodes.nth(1).textContent())!, /standbyyesyes\d+ ms\d+ ms ago$/);

  const row = page.locator('#locks tr[data-key="orders:17"]');
  assert.equal(await row.locator(".holder").textContent(), "billing-7");
  assert.equal(await row.locator(".waiters").textContent(), "2");
  assert.equal(await row.locator("td").nth(1).textContent(), String(orders));
  const anonymousRow = page.locator('#locks tr[data-key="cache:warm"] .holder');
  assert.equal(await anonymousRow.textContent(), "(no name)");
  assert.deepEqual(
    await page.locator("#locks tbody tr").evaluateAll((rows) =>
      rows.map((r) => (r as unknown as { dataset: { key: string } }).dataset.key)
    ).then((keys) => keys.filter((k) => !k.startsWith("bg:"))),
    ["cache:warm", "deploy:prod", "orders:17", "orders:23", "reports:daily"],
    "held keys in key order",
  );
  // The countdown goes down, and ticks between the once-a-second refreshes.
  const lease = async () => seconds(await row.locator(".lease").textContent());
  const first = await lease();
  assert.ok(first > 10 && first <= 30, `lease left ${first}`);
  const seen = new Set<number>();
  for (let i = 0; i < 10; i++) {
    seen.add(await lease());
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.ok(seen.size >= 4, `ticks between refreshes: ${[...seen].join(", ")}`);
  await waitFor(async () => (await lease()) < first - 1, "the countdown to go down");
  const reportsLease = seconds(
    await page.textContent('#locks tr[data-key="reports:daily"] .lease'),
  );
  assert.ok(reportsLease > 500 && reportsLease <= 600, `reports lease ${reportsLease}`);

  await page.waitForSelector("#chart polyline");
  assert.equal(await page.locator("svg#chart").count(), 1);
  assert.match((await page.textContent("#chart-foot"))!, /grants since start/);

  await page.waitForTimeout(1200); // A refresh after the last checks: a settled picture.
  const png = await page.screenshot();
  assert.deepEqual(pngSize(png), { width: 1000, height: 700 });
  if (SAVE_SCREENSHOT) await Deno.writeFile(SCREENSHOT, png);
}

browserTest("status page: keys and names are text, the prefix filter asks /locks", async () => {
  await withStatusPage("single", async ({ base, page, client, problems }) => {
    const markup = "<img/src=x/onerror=alert(1)>";
    const c = await client("<b>bold</b>");
    grantOf(await c.request(`A ${markup} 30 0`), markup);
    grantOf(await c.request("A jobs:1 30 0"), "jobs:1");
    await page.goto(base);
    await page.waitForSelector('body[data-loaded="true"]');
    assert.equal(await page.textContent("#replication"), "none (a single node)");
    assert.equal(await page.locator("#nodes tbody tr").count(), 1, "a single node: itself");
    const key = page.locator("#locks tbody tr").first();
    assert.equal(await key.getAttribute("data-key"), markup);
    assert.equal(await key.locator("td.key").textContent(), markup);
    assert.equal(await key.locator(".holder").textContent(), "<b>bold</b>");
    assert.equal(await page.locator("#locks img, #locks b").count(), 0, "no markup made");
    await page.fill("#prefix", "jobs:");
    await page.waitForFunction(() => {
      const doc = (globalThis as unknown as {
        document: { querySelectorAll(s: string): { length: number } };
      }).document;
      return doc.querySelectorAll("#locks tbody tr").length === 1 &&
        doc.querySelectorAll('#locks tr[data-key="jobs:1"]').length === 1;
    });
    await page.fill("#prefix", "nothing:");
    await page.waitForSelector("#locks td.empty");
    assert.match((await page.textContent("#locks td.empty"))!, /No held key starts with/);
    assert.deepEqual(problems, []);
  });
});
