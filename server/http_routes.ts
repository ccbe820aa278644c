/**
 * The HTTP endpoints of `--http` (docs/server.md, "HTTP endpoints") as a Web-standard
 * handler: `/healthz`, `/readyz`, `/metrics`, `/status`, `/locks` and the status page at
 * `/`, read from a {@linkcode HttpSource} (a `LockServer`). Pure routing, query parsing and
 * responses, no `Deno.*` and no sockets: `http.ts` puts it on a listener.
 *
 * @module
 */

import { createHash } from "node:crypto";
import { keyError, type LocksPage, MAX_LOCKS_LIMIT, type NodeStatus } from "../client/codec.ts";
import { contentLength, forMethod } from "../client/http_answer.ts";
import statusPage from "./assets/status.html" with { type: "text" };

/** What the endpoints read: `LockServer` has all of it. */
export interface HttpSource {
  /** This node's status, in any role. */
  status(): NodeStatus;
  /**
   * Up to `limit` held keys starting with `prefix`, after `after`, in key order.
   *
   * @throws {RangeError} For a `limit` outside 1–1000.
   */
  locks(prefix: string, limit: number, after?: string): LocksPage;
  /** The metrics in the Prometheus text format. */
  metricsText(): string;
  /** The active while it serves, or a standby in sync with it. */
  isReady(): boolean;
}

/** Options of {@linkcode httpRoutes}. */
export interface HttpRoutesOptions {
  /**
   * When given, `/locks` and `/` (they show keys and holder names) need a token it accepts,
   * as `Authorization: Bearer <token>` or as the password of HTTP Basic authentication
   * (what a browser prompts for); the other endpoints stay open. Default: all open.
   */
  token?: (token: string) => boolean;
  /** Told of an error the source threw; the client only gets a 500. Default: ignored. */
  onError?: (error: unknown) => void;
}

/** Answers a request for one of the endpoints; `undefined` for any other path. */
export type HttpRoutes = (request: Request) => Response | undefined;

/** The page size of `/locks` without `limit`. */
export const DEFAULT_LOCKS_LIMIT = 100;

/** Every path served, for the 404 hint. */
export const HTTP_PATHS: readonly string[] = [
  "/",
  "/healthz",
  "/readyz",
  "/metrics",
  "/status",
  "/locks",
];

/** The query of `/locks`. */
export interface LocksQuery {
  /** The start of the keys to list (`""`: every key). */
  prefix: string;
  /** Most keys in the page, 1–1000. */
  limit: number;
  /** List the keys after this one (the last key of the previous page). */
  after: string | undefined;
}

/** The Prometheus text exposition format's content type. */
export const PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

const LOCKS_PARAMS = ["prefix", "limit", "after"];

/** A value quoted for an error message, cut to 40 characters. */
function quoted(text: string): string {
  return JSON.stringify(text.length > 40 ? `${text.slice(0, 40)}...` : text);
}

/**
 * Whether `search` (a URL's `?...`, or empty) is valid UTF-8 once its `%XX` escapes are
 * decoded. `URLSearchParams` would turn invalid bytes into U+FFFD, a different prefix than
 * the one asked for. A `%` not followed by two hex digits stays a `%`, as it does there.
 */
export function percentEncodedUtf8(search: string): boolean {
  try {
    // decodeURIComponent refuses invalid UTF-8, but also a lone `%`: escape those first.
    decodeURIComponent(search.replace(/%(?![0-9A-Fa-f]{2})/g, "%25"));
    return true;
  } catch {
    return false;
  }
}

/**
 * Reads `/locks?prefix=P&limit=N&after=K`: every parameter optional (limit 100), none
 * repeated, no other.
 *
 * @returns The query, or `{ error }` saying what is wrong (answered 400).
 */
export function parseLocksQuery(params: URLSearchParams): LocksQuery | { error: string } {
  const seen = new Set<string>();
  for (const name of params.keys()) {
    if (!LOCKS_PARAMS.includes(name)) {
      return { error: `unknown parameter ${quoted(name)}: /locks takes prefix, limit and after` };
    }
    if (seen.has(name)) return { error: `parameter ${quoted(name)} is given twice` };
    seen.add(name);
  }
  const limitText = params.get("limit");
  let limit = DEFAULT_LOCKS_LIMIT;
  if (limitText !== null) {
    limit = /^[1-9][0-9]{0,3}$/.test(limitText) ? Number(limitText) : NaN;
    if (!(limit <= MAX_LOCKS_LIMIT)) {
      return {
        error: `limit must be a whole number from 1 to ${MAX_LOCKS_LIMIT}, got ${
          quoted(limitText)
        }`,
      };
    }
  }
  // The rules of `L`'s fields (docs/protocol.md, "Inspection"): a prefix or an `after`
  // that no key could match is a mistake, not an empty page.
  const prefix = params.get("prefix") || undefined;
  const after = params.get("after") || undefined;
  for (const [name, value] of [["prefix", prefix], ["after", after]]) {
    const bad = value === undefined ? undefined : keyError(value);
    if (bad !== undefined) return { error: `${name}: ${bad.replace(/^key /, "")}` };
  }
  return { prefix: prefix ?? "", limit, after };
}

/**
 * The token a request presents: `Authorization: Bearer <token>`, or the password of
 * `Authorization: Basic` (any user name); `undefined` if none.
 */
export function presentedToken(request: Request): string | undefined {
  const header = request.headers.get("authorization") ?? "";
  const bearer = /^Bearer +(\S+) *$/i.exec(header);
  if (bearer !== null) return bearer[1];
  const basic = /^Basic +([A-Za-z0-9+/]+={0,2}) *$/i.exec(header);
  if (basic === null) return undefined;
  let text: string;
  try {
    const bytes = Uint8Array.from(atob(basic[1]), (c) => c.charCodeAt(0));
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    return undefined;
  }
  const colon = text.indexOf(":");
  return colon < 0 ? undefined : text.slice(colon + 1);
}

/** The base64 SHA-256 of the first `<tag>…</tag>` of `html`, for a CSP hash source. */
function inlineHash(html: string, tag: string): string {
  const match = new RegExp(`<${tag}>([\\s\\S]*?)</${tag}>`).exec(html);
  if (match === null) throw new Error(`the status page has no <${tag}>`);
  return `'sha256-${createHash("sha256").update(match[1], "utf8").digest("base64")}'`;
}

/**
 * The status page's Content-Security-Policy: its one inline script and style (by hash),
 * requests to its own origin, nothing else (no external fonts, scripts or frames).
 */
export const STATUS_PAGE_CSP: string = [
  "default-src 'none'",
  `script-src ${inlineHash(statusPage, "script")}`,
  `style-src ${inlineHash(statusPage, "style")}`,
  "connect-src 'self'",
  "img-src data:",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join("; ");

const COMMON = { "cache-control": "no-store", "x-content-type-options": "nosniff" };

function respond(
  status: number,
  body: string,
  type: string,
  extra: Record<string, string> = {},
): Response {
  // The length is explicit so that the answer to a HEAD (forMethod) keeps it.
  const length = contentLength(body);
  return new Response(body, {
    status,
    headers: { ...COMMON, "content-type": type, "content-length": length, ...extra },
  });
}

function json(status: number, value: unknown): Response {
  return respond(status, JSON.stringify(value) + "\n", "application/json; charset=utf-8");
}

/** The 404 of an unknown path: JSON naming the paths there are (no body for a HEAD). */
export function notFound(request: Request): Response {
  return forMethod(request, json(404, { error: "not found", paths: HTTP_PATHS }));
}

function unauthorized(): Response {
  const response = json(401, {
    error: "this endpoint lists keys and holder names: it needs a token of " +
      "--bridge-token-file (Authorization: Bearer <token>, or as the Basic password)",
  });
  // Browsers prompt for Basic credentials (the token as the password) and then send them
  // with the page's own requests too.
  response.headers.append("www-authenticate", 'Bearer realm="lockd"');
  response.headers.append("www-authenticate", 'Basic realm="lockd", charset="UTF-8"');
  return response;
}

/** The paths that show keys and holder names (behind the token when there is one). */
const PRIVATE = new Set(["/", "/locks"]);

/**
 * The endpoints over `source`, as a handler that answers their paths (GET, and HEAD with
 * the same status and headers and no body; other methods 405) and leaves every other path
 * to the caller (`undefined`).
 *
 * @example Answer /healthz from a fake source
 * ```ts ignore
 * const routes = httpRoutes(source);
 * const response = routes(new Request("http://x/healthz"))!;
 * console.log(response.status, await response.json()); // 200 { status: "ok", role: ... }
 * ```
 */
export function httpRoutes(source: HttpSource, options: HttpRoutesOptions = {}): HttpRoutes {
  const answer = (path: string, url: URL): Response => {
    switch (path) {
      case "/healthz": {
        const { role, address } = source.status();
        return json(200, { status: "ok", role, address });
      }
      case "/readyz": {
        const { role, address, active } = source.status();
        const ready = source.isReady();
        return json(ready ? 200 : 503, { ready, role, address, active });
      }
      case "/metrics":
        return respond(200, source.metricsText(), PROMETHEUS_CONTENT_TYPE);
      case "/status":
        return json(200, source.status());
      case "/locks": {
        if (!percentEncodedUtf8(url.search)) {
          return json(400, { error: "the query is not valid UTF-8 once %-decoded" });
        }
        const query = parseLocksQuery(url.searchParams);
        if ("error" in query) return json(400, { error: query.error });
        return json(200, source.locks(query.prefix, query.limit, query.after));
      }
      default:
        return respond(200, statusPage, "text/html; charset=utf-8", {
          "cache-control": "no-cache",
          "content-security-policy": STATUS_PAGE_CSP,
          "referrer-policy": "no-referrer",
          "x-frame-options": "DENY",
        });
    }
  };
  const route = (request: Request): Response | undefined => {
    let url: URL;
    try {
      url = new URL(request.url);
    } catch {
      return json(400, { error: "the request's URL is not valid (check the Host header)" });
    }
    const path = url.pathname;
    if (!HTTP_PATHS.includes(path)) return undefined;
    if (request.method !== "GET" && request.method !== "HEAD") {
      const response = json(405, { error: `${path} answers GET and HEAD only` });
      response.headers.set("allow", "GET, HEAD");
      return response;
    }
    if (options.token !== undefined && PRIVATE.has(path)) {
      const token = presentedToken(request);
      if (token === undefined || !options.token(token)) return unauthorized();
    }
    try {
      return answer(path, url);
    } catch (error) {
      options.onError?.(error);
      return json(500, { error: "internal error" });
    }
  };
  return (request) => {
    const response = route(request);
    return response && forMethod(request, response);
  };
}
