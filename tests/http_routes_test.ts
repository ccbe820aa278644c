/**
 * The HTTP endpoints of `--http` without sockets (server/http_routes.ts; issue 13): routing,
 * methods, the `/locks` query, the JSON and Prometheus responses, the token of `/locks` and
 * `/`, and the status page's Content-Security-Policy, over a fake source.
 */

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import type { LocksPage, NodeStatus } from "../client/codec.ts";
import {
  DEFAULT_LOCKS_LIMIT,
  HTTP_PATHS,
  httpRoutes,
  type HttpRoutesOptions,
  type HttpSource,
  parseLocksQuery,
  percentEncodedUtf8,
  presentedToken,
  PROMETHEUS_CONTENT_TYPE,
  STATUS_PAGE_CSP,
} from "../server/http_routes.ts";
import { zeroCounts } from "./_status_fixture.ts";
import statusPage from "../server/assets/status.html" with { type: "text" };

const STATUS: NodeStatus = {
  address: "10.0.0.1:7321",
  version: "0.1.0",
  role: "active",
  active: "10.0.0.1:7321",
  uptimeSeconds: 12.5,
  replication: { mode: "async", degraded: false, inSync: ["10.0.0.2:7321"] },
  peers: [{
    address: "10.0.0.2:7321",
    role: "standby",
    live: true,
    synced: true,
    lagMs: 0,
    lastHeardMs: 40,
  }],
  connections: 3,
  sessions: 1,
  holders: 1,
  waiters: 2,
  tokens: { last: "18000000000000000042", mark: "18000000000001000000" },
  counts: zeroCounts({ grants: 42, releases: 40, extends: 1, timeouts: 1 }),
  grantsPerSecond: [1, 2, 3],
};

const PAGE: LocksPage = {
  locks: [{
    key: "orders:17",
    token: "18000000000000000042",
    holder: "billing-7",
    leaseLeftSeconds: 29.5,
    waiters: 2,
  }],
  more: true,
};

/** A source that records the `locks` calls and answers the canned status and page. */
class FakeSource implements HttpSource {
  ready = true;
  role: NodeStatus["role"] = "active";
  calls: [string, number, string | undefined][] = [];
  failWith: Error | undefined;

  status(): NodeStatus {
    if (this.failWith) throw this.failWith;
    return { ...STATUS, role: this.role };
  }

  locks(prefix: string, limit: number, after?: string): LocksPage {
    this.calls.push([prefix, limit, after]);
    return PAGE;
  }

  metricsText(): string {
    return "# HELP lockd_grants_total Locks granted.\n# TYPE lockd_grants_total counter\n" +
      "lockd_grants_total 42\n";
  }

  isReady(): boolean {
    return this.ready;
  }
}

function setup(options?: HttpRoutesOptions) {
  const source = new FakeSource();
  const routes = httpRoutes(source, options);
  const get = (path: string, init?: RequestInit) =>
    routes(new Request(`http://lockd.test${path}`, init));
  return { source, get };
}

async function jsonOf(response: Response | undefined): Promise<unknown> {
  assert.ok(response, "the path is an endpoint");
  assert.equal(response.headers.get("content-type"), "application/json; charset=utf-8");
  assert.equal(response.headers.get("cache-control"), "no-store");
  return await response.json();
}

Deno.test("httpRoutes() answers /healthz 200 with the role, in every role", async () => {
  const { source, get } = setup();
  for (const role of ["active", "standby", "starting", "leaving"] as const) {
    source.role = role;
    source.ready = role === "active";
    const response = get("/healthz")!;
    assert.equal(response.status, 200);
    assert.deepEqual(await jsonOf(response), { status: "ok", role, address: STATUS.address });
  }
});

Deno.test("httpRoutes() answers /readyz 200 when ready, else 503", async () => {
  const { source, get } = setup();
  const ok = get("/readyz")!;
  assert.equal(ok.status, 200);
  assert.deepEqual(await jsonOf(ok), {
    ready: true,
    role: "active",
    address: STATUS.address,
    active: STATUS.active,
  });
  source.ready = false;
  source.role = "starting";
  const no = get("/readyz")!;
  assert.equal(no.status, 503);
  assert.deepEqual(await jsonOf(no), {
    ready: false,
    role: "starting",
    address: STATUS.address,
    active: STATUS.active,
  });
});

Deno.test("httpRoutes() answers /metrics in the Prometheus text format", async () => {
  const { get } = setup();
  const response = get("/metrics")!;
  assert.equal(response.status, 200);
  assert.equal(response.headers.get("content-type"), PROMETHEUS_CONTENT_TYPE);
  assert.match(PROMETHEUS_CONTENT_TYPE, /^text\/plain; version=0\.0\.4/);
  assert.match(await response.text(), /^lockd_grants_total 42$/m);
});

Deno.test("httpRoutes() answers /status with the NodeStatus JSON", async () => {
  const { get } = setup();
  const response = get("/status")!;
  assert.equal(response.status, 200);
  assert.deepEqual(await jsonOf(response), STATUS);
});

Deno.test("httpRoutes() answers /locks with a page: defaults, prefix, limit, after", async () => {
  const { source, get } = setup();
  const response = get("/locks")!;
  assert.equal(response.status, 200);
  assert.deepEqual(await jsonOf(response), PAGE);
  await get("/locks?prefix=orders%3A&limit=5&after=orders%3A1")!.body?.cancel();
  await get("/locks?limit=1000&after=")!.body?.cancel();
  assert.deepEqual(source.calls, [
    ["", DEFAULT_LOCKS_LIMIT, undefined],
    ["orders:", 5, "orders:1"],
    ["", 1000, undefined],
  ]);
});

Deno.test("httpRoutes() answers a bad /locks query 400 with a JSON error", async () => {
  const { source, get } = setup();
  const cases: [string, RegExp][] = [
    ["limit=0", /^limit must be a whole number from 1 to 1000, got "0"$/],
    ["limit=1001", /from 1 to 1000, got "1001"/],
    ["limit=abc", /got "abc"/],
    ["limit=1.5", /got "1\.5"/],
    ["limit=-1", /got "-1"/],
    ["limit=", /got ""/],
    ["limit=010", /got "010"/],
    ["limit=99999999999999999999", /from 1 to 1000/],
    ["limt=5", /^unknown parameter "limt": \/locks takes prefix, limit and after$/],
    ["limit=1&limit=2", /^parameter "limit" is given twice$/],
    ["prefix=a&prefix=b", /"prefix" is given twice/],
    // Invalid UTF-8 would become U+FFFD: another prefix than the one asked for.
    ["prefix=%FF", /^the query is not valid UTF-8 once %-decoded$/],
    ["after=a%C3", /not valid UTF-8/],
    ["prefix=%ED%A0%80", /not valid UTF-8/], // an encoded surrogate
  ];
  for (const [query, message] of cases) {
    const response = get(`/locks?${query}`)!;
    assert.equal(response.status, 400, query);
    const body = await jsonOf(response) as { error: string };
    assert.match(body.error, message, query);
  }
  assert.deepEqual(source.calls, [], "a bad query reads nothing");
});

Deno.test("percentEncodedUtf8() checks the bytes the %XX escapes stand for", () => {
  for (const ok of ["", "?prefix=a", "?prefix=%C3%A9", "?prefix=é", "?prefix=100%", "?p=%zz"]) {
    assert.equal(percentEncodedUtf8(ok), true, ok);
  }
  for (const bad of ["?prefix=%FF", "?prefix=%C3", "?a=%C3%28", "?a=%F0%9F%98"]) {
    assert.equal(percentEncodedUtf8(bad), false, bad);
  }
});

Deno.test("parseLocksQuery() reads the parameters and cuts long values in its errors", () => {
  assert.deepEqual(parseLocksQuery(new URLSearchParams("")), {
    prefix: "",
    limit: 100,
    after: undefined,
  });
  assert.deepEqual(parseLocksQuery(new URLSearchParams("prefix=a%3Ab&limit=7&after=z")), {
    prefix: "a:b",
    limit: 7,
    after: "z",
  });
  // What no key can be is refused, as `L` refuses it, instead of an empty page.
  const refused: [string, RegExp][] = [
    ["prefix=a%20b", /^prefix: must not contain whitespace/],
    ["prefix=%00", /^prefix: must not contain whitespace or control/],
    [`prefix=${"x".repeat(251)}`, /^prefix: must be at most 250 bytes/],
    ["after=a%09b", /^after: must not contain whitespace/],
  ];
  for (const [query, error] of refused) {
    const parsed = parseLocksQuery(new URLSearchParams(query));
    assert.ok("error" in parsed && error.test(parsed.error), `${query}: ${JSON.stringify(parsed)}`);
  }
  const long = parseLocksQuery(new URLSearchParams(`limit=${"9".repeat(500)}`));
  assert.ok("error" in long && long.error.length < 120, JSON.stringify(long));
});

Deno.test("httpRoutes() serves the status page at / with a strict CSP", async () => {
  const { get } = setup();
  const response = get("/")!;
  assert.equal(response.status, 200);
  assert.equal(response.headers.get("content-type"), "text/html; charset=utf-8");
  assert.equal(response.headers.get("content-security-policy"), STATUS_PAGE_CSP);
  assert.equal(response.headers.get("x-frame-options"), "DENY");
  const html = await response.text();
  assert.equal(html, statusPage);
  assert.match(html, /<svg id="chart"/);
  assert.match(html, /fetch\(path/);
  // The CSP's hashes are those of the page's one inline script and style.
  for (const tag of ["script", "style"]) {
    const blocks = [...html.matchAll(new RegExp(`<${tag}>([\\s\\S]*?)</${tag}>`, "g"))];
    assert.equal(blocks.length, 1, `one inline <${tag}>`);
    const hash = createHash("sha256").update(blocks[0][1]).digest("base64");
    assert.ok(STATUS_PAGE_CSP.includes(`${tag}-src 'sha256-${hash}'`), `${tag} hash`);
  }
  assert.match(STATUS_PAGE_CSP, /default-src 'none'/);
  assert.match(STATUS_PAGE_CSP, /connect-src 'self'/);
  // No build step and nothing from elsewhere: no external scripts, styles or fonts.
  assert.doesNotMatch(html, /<script[^>]*\ssrc=|<link[^>]*stylesheet|@import|@font-face|url\(/);
  assert.doesNotMatch(html.replace("http://www.w3.org/2000/svg", ""), /https?:\/\//);
});

Deno.test("httpRoutes() leaves other paths to the caller, refuses other methods with 405, answers HEAD without a body", async () => {
  const { get } = setup();
  for (const path of ["/nope", "/status/", "/healthz/x", "/client.js", "/index.html"]) {
    assert.equal(get(path), undefined, path);
  }
  for (const path of HTTP_PATHS) {
    for (const method of ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"]) {
      const response = get(path, { method })!;
      assert.equal(response.status, 405, `${method} ${path}`);
      assert.equal(response.headers.get("allow"), "GET, HEAD");
      assert.match((await jsonOf(response) as { error: string }).error, /GET and HEAD only/);
    }
    // HEAD: the GET's status and headers, its length included, and no body (HTTP/2 needs it).
    const head = get(path, { method: "HEAD" })!;
    const body = new Uint8Array(await get(path)!.arrayBuffer());
    assert.equal(head.status, 200, `HEAD ${path}`);
    assert.equal(head.body, null, `HEAD ${path}`);
    assert.equal(head.headers.get("content-type"), get(path)!.headers.get("content-type"));
    if (path !== "/status" && path !== "/metrics") {
      assert.equal(head.headers.get("content-length"), String(body.byteLength), `HEAD ${path}`);
    }
  }
  const unauthorized = setup({ token: () => false }).get("/locks", { method: "HEAD" })!;
  assert.equal(unauthorized.status, 401);
  assert.equal(unauthorized.body, null);
  assert.match(unauthorized.headers.get("www-authenticate") ?? "", /Basic/);
});

Deno.test("httpRoutes() with a token: /locks and / need it, the others stay open", async () => {
  const { get } = setup({ token: (t) => t === "s3cret-token" });
  const basic = (user: string, password: string) => `Basic ${btoa(`${user}:${password}`)}`;
  for (const path of ["/locks", "/"]) {
    for (const authorization of [undefined, "Bearer wrong", basic("x", "wrong"), "Basic !!"]) {
      const headers: Record<string, string> = authorization ? { authorization } : {};
      const response = get(path, { headers })!;
      assert.equal(response.status, 401, `${path} with ${authorization}`);
      const challenges = response.headers.get("www-authenticate") ?? "";
      assert.match(challenges, /Basic realm="lockd"/);
      const body = await response.text();
      assert.doesNotMatch(body, /s3cret|wrong/, "the answer echoes no token");
      assert.match(body, /--bridge-token-file/);
    }
    for (const authorization of ["Bearer s3cret-token", basic("", "s3cret-token")]) {
      const response = get(path, { headers: { authorization } })!;
      assert.equal(response.status, 200, `${path} with ${authorization}`);
      await response.body?.cancel();
    }
  }
  for (const path of ["/healthz", "/readyz", "/metrics", "/status"]) {
    const response = get(path)!;
    assert.equal(response.status, 200, path);
    await response.body?.cancel();
  }
});

Deno.test("presentedToken() reads Bearer and Basic credentials", () => {
  const token = (authorization?: string) =>
    presentedToken(
      new Request("http://x/", { headers: authorization ? { authorization } : {} }),
    );
  assert.equal(token(), undefined);
  assert.equal(token("Bearer abc"), "abc");
  assert.equal(token("bearer abc"), "abc");
  assert.equal(token("Bearer a b"), undefined);
  assert.equal(token(`Basic ${btoa("ops:pa:ss")}`), "pa:ss");
  assert.equal(token(`Basic ${btoa("no-colon")}`), undefined);
  assert.equal(token("Basic %%%"), undefined);
  assert.equal(token("Digest abc"), undefined);
});

Deno.test("httpRoutes() answers 500 without details when the source throws", async () => {
  const errors: unknown[] = [];
  const { source, get } = setup({ onError: (e) => errors.push(e) });
  source.failWith = new Error("table exploded");
  const response = get("/status")!;
  assert.equal(response.status, 500);
  assert.deepEqual(await jsonOf(response), { error: "internal error" });
  assert.equal((errors[0] as Error).message, "table exploded");
});
