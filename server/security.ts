/**
 * The security settings of a node, read from their files at start (docs/security.md): the
 * TLS certificate and key, the CA to verify peers with, the cluster's peer secret, the
 * auth file (watched), and the bridge's bearer tokens. A file that cannot be used stops the
 * node with a message naming the file, never its content.
 *
 * @module
 */

import { randomBytes, timingSafeEqual } from "node:crypto";
import type { Credentials } from "./auth.ts";
import { AuthFile } from "./auth_file.ts";
import type { Config } from "./cli.ts";
import { parsePeerSecret } from "./cluster/peer_auth.ts";
import type { Logger } from "./log.ts";

/** What the node's security files say. */
export interface Security {
  /** TLS for the client and peer port (and the bridge), with the CA to verify peers. */
  tls: { cert: string; key: string; caCerts?: string[] } | undefined;
  /** The cluster secret. */
  peerSecret: string | undefined;
  /** The credentials in force (the auth file's, plus the bridge's own), when auth is on. */
  credentials: (() => Credentials) | undefined;
  /** The in-process bridge's own credential, when auth is on. */
  bridgeCredential: { name: string; secret: string } | undefined;
  /** Checks a bridge upgrade's bearer token, when the bridge requires one. */
  bridgeAuthorize: ((request: Request) => boolean) | undefined;
  /**
   * Whether a token is one of `--bridge-token-file`'s (constant time), when there is such a
   * file: the HTTP endpoints that list keys take the same tokens.
   */
  bridgeToken: ((token: string) => boolean) | undefined;
  /** Stops watching files. */
  close(): void;
}

/**
 * Reads a PEM file that must hold a `label` block (`CERTIFICATE`, `PRIVATE KEY`, which also
 * matches `RSA PRIVATE KEY` and `EC PRIVATE KEY`): a certificate and a key swapped, or a DER
 * file, is named with its flag instead of the TLS library's "No certificates found".
 *
 * @throws {Error} If it cannot be read or holds no such block.
 */
function pem(path: string, what: string, flag: string, label: string): string {
  const text = read(path, what);
  if (!new RegExp(`-----BEGIN [A-Z ]*${label}-----`).test(text)) {
    throw new Error(
      `${flag} "${path}" holds no PEM ${label} block (are the certificate and the key swapped?)`,
    );
  }
  return text;
}

function read(path: string, what: string): string {
  try {
    return Deno.readTextFileSync(path);
  } catch (error) {
    const why = error instanceof Deno.errors.NotFound
      ? "no such file"
      : error instanceof Deno.errors.PermissionDenied
      ? "permission denied"
      : "unreadable";
    throw new Error(`Cannot read the ${what} "${path}": ${why}`);
  }
}

/**
 * Warns when a file holding a secret can be read or written by any user (POSIX "other"
 * bits; a group the service shares is a usual setup and not warned about). The path is
 * logged, never the content.
 */
function warnIfOpen(path: string, what: string, log: Logger): void {
  let mode: number | null;
  try {
    mode = Deno.statSync(path).mode;
  } catch {
    return; // Reading it says why.
  }
  if (mode === null || (mode & 0o006) === 0) return;
  const octal = (mode & 0o777).toString(8).padStart(4, "0");
  log.warn(`the ${what} "${path}" can be read by any user (mode ${octal}): chmod o-rw it`, {
    event: "file-open",
    path,
  });
}

/**
 * The bearer tokens of a token file: one per line, blank lines and `#` comments skipped.
 *
 * @throws {Error} For a line that cannot be a token (spaces or control characters inside it:
 * no client could send it), naming the line, never its text.
 */
function tokensOf(text: string, path: string): string[] {
  const tokens: string[] = [];
  for (const [i, raw] of text.split("\n").entries()) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    if (/[\s\p{Cc}]/u.test(line)) {
      throw new Error(
        `${path}: line ${i + 1} is not a token (one token per line, without spaces)`,
      );
    }
    tokens.push(line);
  }
  return tokens;
}

/** Whether `given` is one of `tokens`, each compared in constant time. */
function knownToken(tokens: readonly Uint8Array[], given: string): boolean {
  const presented = new TextEncoder().encode(given);
  let found = false;
  for (const token of tokens) {
    if (token.length === presented.length && timingSafeEqual(token, presented)) found = true;
  }
  return found;
}

/** The bearer token of an upgrade: `Authorization: Bearer <t>`, or protocol `bearer.<t>`. */
function bearerOf(request: Request): string | undefined {
  const header = /^Bearer (\S+)$/i.exec(request.headers.get("authorization") ?? "");
  if (header !== null) return header[1];
  const protocols = (request.headers.get("sec-websocket-protocol") ?? "").split(",");
  const offered = protocols.map((p) => p.trim()).find((p) => p.startsWith("bearer."));
  return offered?.slice("bearer.".length);
}

/**
 * Reads every security file `config` names.
 *
 * @throws {Error} If one cannot be read or is malformed (the message names the file).
 */
export function loadSecurity(config: Config, log: Logger): Security {
  const secrets: [string | undefined, string][] = [
    [config.tls?.keyFile, "TLS key"],
    [config.peerSecretFile, "peer secret file"],
    [config.authFile, "auth file"],
    [config.bridgeTokenFile, "bridge token file"],
  ];
  for (const [path, what] of secrets) if (path !== undefined) warnIfOpen(path, what, log);
  const tls = config.tls === undefined ? undefined : {
    cert: pem(config.tls.certFile, "TLS certificate", "--tls-cert", "CERTIFICATE"),
    key: pem(config.tls.keyFile, "TLS key", "--tls-key", "PRIVATE KEY"),
    caCerts: config.tlsCaFile === undefined ? undefined : [read(config.tlsCaFile, "TLS CA")],
  };
  let peerSecret: string | undefined;
  if (config.peerSecretFile !== undefined) {
    try {
      peerSecret = parsePeerSecret(read(config.peerSecretFile, "peer secret file"));
    } catch (error) {
      throw new Error(`${config.peerSecretFile}: ${(error as Error).message}`);
    }
  }
  const authFile = config.authFile === undefined ? undefined : AuthFile.open(config.authFile, log);
  // The in-process bridge talks to this node as a client: it gets a credential of its own,
  // made now and known only to this process.
  const bridgeCredential = authFile === undefined || config.bridge === undefined
    ? undefined
    : { name: "lockd-bridge", secret: randomBytes(32).toString("hex") };
  let cached: { from: Credentials; with: Credentials } | undefined;
  const credentials = authFile === undefined ? undefined : () => {
    const from = authFile.credentials;
    if (bridgeCredential === undefined) return from;
    if (cached?.from !== from) {
      cached = { from, with: from.with(bridgeCredential.name, bridgeCredential.secret, "*") };
    }
    return cached.with;
  };
  let bridgeAuthorize: Security["bridgeAuthorize"];
  let bridgeToken: Security["bridgeToken"];
  if (config.bridgeTokenFile !== undefined) {
    const tokens = tokensOf(
      read(config.bridgeTokenFile, "bridge token file"),
      config.bridgeTokenFile,
    )
      .map((t) => new TextEncoder().encode(t));
    if (tokens.length === 0) throw new Error(`${config.bridgeTokenFile}: no token in it`);
    bridgeToken = (token) => knownToken(tokens, token);
    bridgeAuthorize = (request) => {
      const bearer = bearerOf(request);
      return bearer !== undefined && knownToken(tokens, bearer);
    };
  }
  return {
    tls,
    peerSecret,
    credentials,
    bridgeCredential,
    bridgeAuthorize,
    bridgeToken,
    close: () => authFile?.close(),
  };
}
