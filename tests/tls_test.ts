/**
 * TLS on a real lockd process (docs/security.md, "TLS" and "The bridge"): the client port
 * speaks TLS with `--tls-cert`/`--tls-key`, `LockClient` takes `tls://` addresses with
 * `caCerts`, the bridge serves `wss://` with the same certificate, and `--bridge-token-file`
 * makes the bridge require a bearer token. Certificates are made by `openssl` (tests/_tls.ts).
 */

import assert from "node:assert/strict";
import {
  LockClient,
  type LockClientOptions,
  LockRejectedError,
  LockUnavailableError,
} from "../mod.ts";
import {
  LineClient,
  runToExit,
  type ServerProcess,
  withServer as withServerOf,
} from "./_helpers.ts";
import { testPki, tlsArgs } from "./_tls.ts";
import { connectTcp } from "../client/tcp.ts";
import { connectNodeTcp } from "../client/node_tcp.ts";
import { runLockd } from "./_lockd.ts";
import { h2Head } from "./_h2.ts";

/** Starts a server with `args`, runs `fn`, then stops it and removes its data directory. */
function withServer(args: string[], fn: (server: ServerProcess) => Promise<void>): Promise<void> {
  return withServerOf({ args }, (server) => fn(server));
}

/** Acquires with a fresh client of `address` and `options`; checks the unavailable error's text. */
async function refusedWith(
  address: string,
  options: LockClientOptions,
  matches: (message: string) => boolean,
): Promise<void> {
  const client = new LockClient(address, { retryTimeoutMs: 1000, ...options });
  try {
    await assert.rejects(
      client.acquire("tls:refused", { lease: 10 }),
      (e) => e instanceof LockUnavailableError && matches(e.message),
    );
  } finally {
    await client.close();
  }
}

/** Waits until the server's stderr matches `pattern` (it is read as it comes). */
async function logged(server: ServerProcess, pattern: RegExp, timeoutMs = 5000): Promise<void> {
  const until = performance.now() + timeoutMs;
  while (!pattern.test(server.stderr())) {
    if (performance.now() > until) assert.fail(`no ${pattern} in:\n${server.stderr()}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

function bridgeUrl(ready: string, scheme: "ws" | "wss"): string {
  const match = new RegExp(`, bridge on ${scheme}://127\\.0\\.0\\.1:(\\d+)/$`).exec(ready);
  assert.ok(match, `ready line without a ${scheme} bridge: ${ready}`);
  return `${scheme}://127.0.0.1:${match[1]}/`;
}

Deno.test("with --tls-cert and --tls-key the client port speaks TLS: raw lines and a hello", async () => {
  const pki = await testPki();
  await withServer(tlsArgs(pki), async (server) => {
    const c = await LineClient.connectTls(server.port, [pki.caPem]);
    assert.equal(
      await c.request("HELLO 1 0123456789abcdef0123456789abcdef tls-test"),
      "HELLO 0123456789abcdef0123456789abcdef OK",
    );
    const grant = /^A tls:raw A (\d+)$/.exec((await c.request("A tls:raw 10 0"))!);
    assert.ok(grant);
    assert.equal(await c.request(`R tls:raw ${grant[1]}`), "R tls:raw R");
    await c.close();
    // A connection without a hello works as over plain TCP.
    const bare = await LineClient.connectTls(server.port, [pki.caPem]);
    assert.match((await bare.request("A tls:bare 10 0"))!, /^A tls:bare A \d+$/);
    await bare.close();
  });
});

Deno.test("a TLS port gives nothing to a plain-TCP client and keeps serving TLS ones", async () => {
  const pki = await testPki();
  await withServer(tlsArgs(pki), async (server) => {
    const plain = await LineClient.connect(server.port);
    await plain.send("A tls:plain 10 0");
    const seen = await plain.closedByPeer(10_000).catch(() => ["(still open)"]);
    await plain.close();
    assert.ok(!seen.some((l) => l.startsWith("A tls:plain A")), "plain text was not served");
    // The operator is told (a warning, not a debug line).
    await logged(server, /WARN +TLS handshake with 127\.0\.0\.1:\d+ failed: .*InvalidContentType/);
    const c = await LineClient.connectTls(server.port, [pki.caPem]);
    assert.match((await c.request("A tls:plain 10 0"))!, /^A tls:plain A \d+$/);
    await c.close();
  });
});

Deno.test("LockClient takes tls:// addresses with caCerts, and refuses a server its CA did not sign", async () => {
  const pki = await testPki();
  await withServer(tlsArgs(pki), async (server) => {
    const client = new LockClient(`tls://127.0.0.1:${server.port}`, { caCerts: [pki.caPem] });
    try {
      const lock = await client.acquire("tls:client", { lease: 10 });
      assert.equal(typeof lock.token, "bigint");
      await lock.release();
      // status() names the node as it was given, scheme included.
      const [report] = await client.status();
      assert.equal(report.address, `tls://127.0.0.1:${server.port}`);
      assert.equal(report.status?.role, "active");
    } finally {
      await client.close();
    }
    // The handshake's reason, not just "lost".
    await refusedWith(
      `tls://127.0.0.1:${server.port}`,
      { caCerts: [pki.otherCaPem], connectTimeoutMs: 2000 },
      (m) => /TLS handshake failed: .*UnknownIssuer/.test(m),
    );
    await logged(server, /WARN +TLS handshake with .* failed: received fatal alert/);
  });
});

Deno.test("a plain-TCP LockClient against a TLS port is told to use tls://, over both transports", async () => {
  const pki = await testPki();
  await withServer(tlsArgs(pki), async (server) => {
    for (const connect of [connectTcp, connectNodeTcp]) {
      await refusedWith(
        `127.0.0.1:${server.port}`,
        { connect },
        (m) =>
          m.includes(`(127.0.0.1:${server.port})`) &&
          m.includes("the node answered in TLS: use a tls:// address"),
      );
    }
    // lockd status asks each node directly, and says why too.
    const status = await runLockd(["status", "--servers", `tls://127.0.0.1:${server.port}`]);
    assert.equal(status.code, 69, status.stderr);
    assert.match(
      status.stderr,
      new RegExp(
        `No usable connection to tls://127\\.0\\.0\\.1:${server.port}: TLS handshake failed: .*UnknownIssuer`,
      ),
    );
    // Over node:tls an untrusted certificate says so too.
    await refusedWith(
      `tls://127.0.0.1:${server.port}`,
      { connect: connectNodeTcp, caCerts: [pki.otherCaPem] },
      (m) => m.includes(`(tls://127.0.0.1:${server.port})`) && /certificate/.test(m),
    );
  });
});

Deno.test("a tls:// LockClient against a plain node is told it may not speak TLS, over both transports", async () => {
  await withServer([], async (server) => {
    for (const connect of [connectTcp, connectNodeTcp]) {
      await refusedWith(
        `tls://127.0.0.1:${server.port}`,
        { connect },
        (m) => m.includes("the node may not speak TLS (use host:port)"),
      );
    }
  });
});

Deno.test("an abort during a TLS handshake that never ends rejects at once, over both transports", async () => {
  // A listener that accepts and never answers: the handshake hangs until the abort.
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const accepted: Deno.Conn[] = [];
  const accepting = (async () => {
    for await (const conn of listener) accepted.push(conn);
  })();
  try {
    for (const connect of [connectTcp, connectNodeTcp]) {
      const attempt = new AbortController();
      const timer = setTimeout(() => attempt.abort(new Error("connect timed out")), 150);
      const started = performance.now();
      await assert.rejects(
        connect(
          { scheme: "tls", hostname: "127.0.0.1", port: listener.addr.port, key: "x" },
          { line() {}, closed() {} },
          attempt.signal,
        ),
        /connect timed out/,
      );
      clearTimeout(timer);
      const ms = performance.now() - started;
      assert.ok(ms < 1000, `${connect.name} rejected after ${ms} ms`);
    }
  } finally {
    listener.close();
    await accepting.catch(() => {});
    for (const conn of accepted) conn.close();
  }
});

Deno.test("TLS with --auth-file: LockClient over tls:// with its credential", async () => {
  const pki = await testPki();
  const file = `${pki.dir}/tls.auth`;
  await Deno.writeTextFile(file, "ops tls-Secret-a1b2c3d4e5 ops:\n");
  await withServer([...tlsArgs(pki), "--auth-file", file], async (server) => {
    const address = `tls://127.0.0.1:${server.port}`;
    const client = new LockClient(address, {
      caCerts: [pki.caPem],
      auth: { name: "ops", secret: "tls-Secret-a1b2c3d4e5" },
    });
    const wrong = new LockClient(address, {
      caCerts: [pki.caPem],
      auth: { name: "ops", secret: "not-the-secret" },
    });
    try {
      const lock = await client.acquire("ops:deploy", { lease: 10, session: true });
      await lock.release();
      await assert.rejects(wrong.acquire("ops:deploy", { lease: 10 }), LockRejectedError);
    } finally {
      await Promise.all([client.close(), wrong.close()]);
    }
  });
});

Deno.test("--bridge-token-file: the bridge requires a bearer token, sent as a protocol or a header", async () => {
  const dir = await Deno.makeTempDir({ prefix: "lockd-bridge-" });
  await Deno.writeTextFile(`${dir}/tokens`, "# bridge tokens\ntoken-one-1234567890\ntoken-two\n");
  try {
    await withServer(
      ["--bridge", "127.0.0.1:0", "--bridge-token-file", `${dir}/tokens`],
      async (server) => {
        const url = bridgeUrl(server.ready, "ws");
        const http = url.replace("ws://", "http://");
        const tries: Record<string, string>[] = [
          {},
          { authorization: "Bearer wrong" },
          { authorization: "x" },
        ];
        for (const headers of tries) {
          const response = await fetch(http, {
            headers: { upgrade: "websocket", connection: "upgrade", ...headers },
          });
          await response.body?.cancel();
          assert.equal(response.status, 401, JSON.stringify(headers));
        }
        // The header form, for callers that can set headers (not browsers): a raw upgrade.
        const raw = await LineClient.connect(Number(new URL(http).port));
        await raw.write(
          "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
            "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
            "Authorization: Bearer token-one-1234567890\r\n\r\n",
        );
        assert.match((await raw.readLine())!, /^HTTP\/1\.1 101 /);
        await raw.close();
        const client = new LockClient(url, { bearer: "token-two" });
        const lock = await client.acquire("bridge:bearer", { lease: 10 });
        await lock.release();
        await client.close();
        const refused = new LockClient(url, {
          bearer: "token-three",
          connectTimeoutMs: 1000,
          retryTimeoutMs: 500,
        });
        await assert.rejects(
          refused.acquire("bridge:bearer", { lease: 10 }),
          // The runtime's reason is kept (Deno: "... Invalid status code: 401"), never the token.
          (e) =>
            e instanceof LockUnavailableError && /401/.test(e.message) &&
            !e.message.includes("token-three"),
        );
        await refused.close();
        // The lockd subcommands present it with LOCKD_BEARER or --bearer-file; CMD never
        // sees it.
        const run = await runLockd([
          "run",
          "bridge:cli",
          "--servers",
          url,
          "--",
          "sh",
          "-c",
          'echo "${LOCKD_BEARER-none} $LOCKD_KEY"',
        ], { LOCKD_BEARER: "token-two" });
        assert.equal(run.code, 0, run.stderr);
        assert.equal(run.stdout, "none bridge:cli\n");
        await Deno.writeTextFile(`${dir}/mine`, "token-one-1234567890\n");
        const viaFile = await runLockd(
          ["run", "bridge:cli", "--servers", url, "--bearer-file", `${dir}/mine`, "--", "true"],
        );
        assert.equal(viaFile.code, 0, viaFile.stderr);
        await Deno.writeTextFile(`${dir}/wrong`, "token-three\n");
        const wrong = await runLockd(
          ["run", "bridge:cli", "--servers", url, "--bearer-file", `${dir}/wrong`, "--", "true"],
        );
        // 69: a bridge's refusal reaches the client as a failed connection (docs/client.md).
        assert.equal(wrong.code, 69, wrong.stderr);
        assert.ok(!wrong.stderr.includes("token-three"), wrong.stderr);
      },
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("--bridge with --auth-file: the bridge presents its own credential to the node", async () => {
  const dir = await Deno.makeTempDir({ prefix: "lockd-bridge-" });
  await Deno.writeTextFile(`${dir}/clients.auth`, "app app-Secret-0123456789 app:\n");
  await Deno.writeTextFile(`${dir}/tokens`, "bridge-token-abcdef\n");
  try {
    await withServer(
      [
        "--bridge",
        "127.0.0.1:0",
        "--auth-file",
        `${dir}/clients.auth`,
        "--bridge-token-file",
        `${dir}/tokens`,
      ],
      async (server) => {
        const client = new LockClient(bridgeUrl(server.ready, "ws"), {
          bearer: "bridge-token-abcdef",
        });
        try {
          const lock = await client.acquire("page:k", { lease: 10 });
          await lock.release();
        } finally {
          await client.close();
        }
        // The bridge's credential is its own: the node's port still wants one from others.
        const raw = await LineClient.connect(server.port);
        assert.deepEqual(await raw.request("A page:k 10 0"), "A page:k E authentication required");
        await raw.close();
      },
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("with TLS the bridge serves wss:// with the same certificate", async () => {
  const pki = await testPki();
  await withServer([...tlsArgs(pki), "--bridge", "127.0.0.1:0"], async (server) => {
    const url = bridgeUrl(server.ready, "wss");
    // Deno's WebSocket trusts the CA given with --cert; a child process takes it.
    const script = `
      import { LockClient } from ${JSON.stringify(new URL("../mod.ts", import.meta.url).href)};
      const client = new LockClient(${JSON.stringify(url)});
      const lock = await client.acquire("wss:k", { lease: 10 });
      console.log("granted " + lock.token);
      await lock.release();
      await client.close();
    `;
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["eval", "--cert", pki.caFile, script],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const stdout = new TextDecoder().decode(out.stdout);
    assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
    assert.match(stdout, /^granted \d+$/m);
  });
});

Deno.test("with TLS the bridge answers HEAD over HTTP/2 without a body, on every path", async () => {
  const pki = await testPki();
  const args = [...tlsArgs(pki), "--bridge", "127.0.0.1:0", "--bridge-demo"];
  await withServer(args, async (server) => {
    const port = Number(new URL(bridgeUrl(server.ready, "wss")).port);
    for (const path of ["/", "/client.js", "/nope"]) {
      const wire = await h2Head(port, { path, caPem: pki.caPem });
      assert.equal(wire.alpn, "h2", path);
      assert.equal(wire.frames.length, 1, `${path}: ${JSON.stringify(wire.frames)}`);
      assert.deepEqual(wire.frames[0], {
        type: "HEADERS",
        endStream: true,
        length: wire.frames[0].length,
      }, path);
    }
  });
});

Deno.test("a TLS node with a bridge but no --tls-ca warns that the bridge checks its certificate", async () => {
  const pki = await testPki();
  const args = ["--tls-cert", pki.certFile, "--tls-key", pki.keyFile, "--bridge", "127.0.0.1:0"];
  await withServer(args, async (server) => {
    await logged(server, /WARN +the bridge reaches this node over TLS .*give --tls-ca/);
  });
  await withServer([...tlsArgs(pki), "--bridge", "127.0.0.1:0"], (server) => {
    assert.doesNotMatch(server.stderr(), /give --tls-ca/, "with --tls-ca: no warning");
    return Promise.resolve();
  });
});

Deno.test("a certificate and key given the wrong way round are named with their flag", async () => {
  const pki = await testPki();
  const dir = await Deno.makeTempDir({ prefix: "lockd-tls-swap-" });
  try {
    const run = await runToExit([
      ...["--data-dir", dir, "--listen", "127.0.0.1:0"],
      ...["--tls-cert", pki.keyFile, "--tls-key", pki.certFile],
    ]);
    assert.equal(run.code, 1, run.stderr);
    assert.match(
      run.stderr,
      new RegExp(`--tls-cert "${pki.keyFile}" holds no PEM CERTIFICATE block .*swapped`),
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a TLS socket with no handshake within 10 s gives its place back; one that did it may stay quiet", async () => {
  const pki = await testPki();
  await withServer([...tlsArgs(pki), "--max-connections", "3"], async (server) => {
    const quiet = await LineClient.connectTls(server.port, [pki.caPem]);
    // Plain TCP on the TLS port, never starting TLS: the other two places.
    const silent = [await LineClient.connect(server.port), await LineClient.connect(server.port)];
    try {
      // One line for both (one every 10 s); the two timers end within moments of each other.
      await logged(server, /closed 127\.0\.0\.1:\d+: no TLS handshake within 10 s/, 15_000);
      // Their places are free again (Deno keeps such a socket itself until its peer closes).
      let reply: string | null = null;
      for (let i = 0; i < 20 && reply === null; i++) {
        const next = await LineClient.connectTls(server.port, [pki.caPem]);
        reply = await next.request("A tls:next 10 0", 1000).catch(() => null);
        await next.close();
        if (reply === null) await new Promise((resolve) => setTimeout(resolve, 100));
      }
      assert.match(reply ?? "(refused)", /^A tls:next A \d+$/);
      // Without auth a connection may wait before its first line (SPEC §7: as in §2).
      assert.match((await quiet.request("A tls:quiet 10 0"))!, /^A tls:quiet A \d+$/);
    } finally {
      for (const socket of silent) await socket.close();
      await quiet.close();
    }
  });
});
