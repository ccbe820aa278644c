/**
 * Tests of the command line (docs/server.md) in-process: `parseConfig()` with its defaults,
 * every flag and its `LOCKD_*` variable (the flag wins), `--help` and `--version`, and the
 * `UsageError` of a bad command line or variable; and `HELP` listing every flag.
 * The real `server/main.ts` process (`--help`, `--version`, exit codes, the ready line):
 * cli_process_test.ts. The table of flags: tests/_cli.ts.
 */

import assert from "node:assert/strict";
import { type Config, HELP, parseConfig, UsageError } from "../server/cli.ts";
import { FLAG_CASES } from "./_cli.ts";

/** An environment lookup over a plain record. */
function envOf(vars: Record<string, string> = {}): (name: string) => string | undefined {
  return (name) => Object.hasOwn(vars, name) ? vars[name] : undefined;
}

/** Asserts that `parseConfig(args, env)` throws a UsageError; returns its message. */
function usageError(args: string[], vars: Record<string, string> = {}): string {
  let caught: unknown;
  try {
    parseConfig(args, envOf(vars));
  } catch (error) {
    caught = error;
  }
  assert.ok(caught instanceof UsageError, `expected a UsageError for ${JSON.stringify(args)}`);
  assert.equal(caught.name, "UsageError");
  assert.ok(caught.message.length > 0);
  assert.ok(!caught.message.includes("\n"), "a usage error is one line");
  return caught.message;
}

Deno.test("parseConfig() gives the defaults of docs/server.md", () => {
  const config = parseConfig([], envOf());
  const expected: Config = {
    help: false,
    version: false,
    listen: { hostname: "127.0.0.1", port: 7321 },
    advertise: undefined,
    peers: [],
    dataDir: "./lockd-data",
    maxLeaseMs: 86_400_000,
    maxConnections: 10_000,
    maxWaiters: 1_000_000,
    bridge: undefined,
    http: undefined,
    bridgeOrigins: undefined,
    bridgeDemo: false,
    heartbeatMs: 100,
    failoverTimeoutMs: 1000,
    replication: "async",
    authFile: undefined,
    sessionGraceMs: 5000,
    peerSecretFile: undefined,
    tls: undefined,
    tlsCaFile: undefined,
    bridgeTokenFile: undefined,
    logFormat: "text",
    logLevel: "info",
    io: "auto",
  };
  assert.deepEqual(config, expected);
});

Deno.test("parseConfig() reads --replication and LOCKD_REPLICATION", () => {
  assert.equal(parseConfig(["--replication", "sync"], envOf()).replication, "sync");
  assert.equal(parseConfig([], envOf({ LOCKD_REPLICATION: "sync" })).replication, "sync");
  assert.equal(
    parseConfig(["--replication", "async"], envOf({ LOCKD_REPLICATION: "sync" })).replication,
    "async",
  );
});

Deno.test("parseConfig() ignores unrelated environment variables", () => {
  const config = parseConfig([], envOf({ LISTEN: "1.2.3.4:1", LOCKD: "x", PORT: "80" }));
  assert.deepEqual(config.listen, { hostname: "127.0.0.1", port: 7321 });
});

Deno.test("parseConfig() reads every flag and its LOCKD_* variable; the flag wins", async (t) => {
  for (const c of FLAG_CASES) {
    await t.step(`${c.flag} VALUE`, () => {
      c.check(parseConfig([c.flag, c.value], envOf()), "value");
    });
    await t.step(`${c.flag}=VALUE`, () => {
      c.check(parseConfig([`${c.flag}=${c.value}`], envOf()), "value");
    });
    await t.step(`${c.env}`, () => {
      c.check(parseConfig([], envOf({ [c.env]: c.value })), "value");
    });
    await t.step(`${c.flag} wins over ${c.env}`, () => {
      c.check(parseConfig([c.flag, c.value], envOf({ [c.env]: c.other })), "value");
      c.check(parseConfig([c.flag, c.other], envOf({ [c.env]: c.value })), "other");
    });
    await t.step(`${c.flag} wins over a bad ${c.env}`, () => {
      c.check(parseConfig([c.flag, c.value], envOf({ [c.env]: "?? bad ??" })), "value");
    });
    await t.step(`${c.env} leaves the other settings at their defaults`, () => {
      const config = parseConfig([], envOf({ [c.env]: c.value }));
      const defaults = parseConfig([], envOf());
      for (const key of Object.keys(defaults) as (keyof Config)[]) {
        const touched = {
          "--listen": "listen",
          "--peers": "peers",
          "--advertise": "advertise",
          "--data-dir": "dataDir",
          "--max-lease": "maxLeaseMs",
          "--max-connections": "maxConnections",
          "--max-waiters": "maxWaiters",
          "--bridge": "bridge",
          "--http": "http",
          "--heartbeat": "heartbeatMs",
          "--failover-timeout": "failoverTimeoutMs",
          "--log-format": "logFormat",
          "--log-level": "logLevel",
        }[c.flag];
        if (key !== touched) assert.deepEqual(config[key], defaults[key], key);
      }
    });
  }
});

Deno.test("parseConfig() takes all flags together", () => {
  const config = parseConfig([
    "--listen",
    "127.0.0.1:0",
    "--peers",
    "127.0.0.1:7001,127.0.0.1:7002",
    "--advertise",
    "127.0.0.1:7001",
    "--data-dir",
    "/tmp/d",
    "--max-lease",
    "10",
    "--max-connections",
    "3",
    "--max-waiters",
    "9",
    "--bridge",
    "127.0.0.1:8080",
    "--http",
    "127.0.0.1:9321",
    "--bridge-origins",
    "https://a.example, https://b.example",
    "--bridge-demo",
    "--heartbeat",
    "0.05",
    "--failover-timeout",
    "0.5",
    "--replication",
    "sync",
    "--auth-file",
    "/etc/lockd/clients.auth",
    "--session-grace",
    "2.5",
    "--peer-secret-file",
    "/etc/lockd/cluster.secret",
    "--tls-cert",
    "/etc/lockd/node.pem",
    "--tls-key",
    "/etc/lockd/node.key",
    "--tls-ca",
    "/etc/lockd/ca.pem",
    "--bridge-token-file",
    "/etc/lockd/bridge.tokens",
    "--log-format",
    "json",
    "--log-level",
    "error",
    "--io",
    "portable",
  ], envOf());
  assert.deepEqual(config, {
    help: false,
    version: false,
    listen: { hostname: "127.0.0.1", port: 0 },
    advertise: { hostname: "127.0.0.1", port: 7001 },
    peers: [{ hostname: "127.0.0.1", port: 7001 }, { hostname: "127.0.0.1", port: 7002 }],
    dataDir: "/tmp/d",
    maxLeaseMs: 10_000,
    maxConnections: 3,
    maxWaiters: 9,
    bridge: { hostname: "127.0.0.1", port: 8080 },
    http: { hostname: "127.0.0.1", port: 9321 },
    bridgeOrigins: ["https://a.example", "https://b.example"],
    bridgeDemo: true,
    heartbeatMs: 50,
    failoverTimeoutMs: 500,
    replication: "sync",
    authFile: "/etc/lockd/clients.auth",
    sessionGraceMs: 2500,
    peerSecretFile: "/etc/lockd/cluster.secret",
    tls: { certFile: "/etc/lockd/node.pem", keyFile: "/etc/lockd/node.key" },
    tlsCaFile: "/etc/lockd/ca.pem",
    bridgeTokenFile: "/etc/lockd/bridge.tokens",
    io: "portable",
    logFormat: "json",
    logLevel: "error",
  });
});

Deno.test("parseConfig() takes --io auto, epoll or portable (LOCKD_IO too) and refuses others", () => {
  assert.equal(parseConfig([], envOf()).io, "auto");
  assert.equal(parseConfig(["--io", "epoll"], envOf()).io, "epoll");
  assert.equal(parseConfig([], envOf({ LOCKD_IO: "portable" })).io, "portable");
  assert.throws(
    () => parseConfig(["--io", "uring"], envOf()),
    (e: Error) => e instanceof UsageError && /--io must be auto, epoll or portable/.test(e.message),
  );
  // The epoll transport would starve peer links and the bridge's relay (docs/server.md).
  for (
    const [flag, value] of [
      ["--peers", "127.0.0.1:7001,127.0.0.1:7002"],
      ["--bridge", "127.0.0.1:8080"],
    ]
  ) {
    const args = ["--io", "epoll", flag, value];
    if (flag === "--peers") args.push("--advertise", "127.0.0.1:7001");
    assert.throws(
      () => parseConfig(args, envOf()),
      (e: Error) => e instanceof UsageError && e.message.includes(`not with ${flag}`),
    );
  }
});

Deno.test("parseConfig() rounds seconds up to whole ms", () => {
  assert.equal(parseConfig(["--max-lease", "0.0001"], envOf()).maxLeaseMs, 1);
  assert.equal(parseConfig(["--max-lease", "1.0011"], envOf()).maxLeaseMs, 1002);
  assert.equal(parseConfig(["--heartbeat", "0.0105"], envOf()).heartbeatMs, 11);
  // Under half of the failover timeout is allowed (half is refused: see below).
  assert.equal(parseConfig(["--heartbeat", "0.4"], envOf()).heartbeatMs, 400);
});

Deno.test("parseConfig() accepts the edges of addresses", () => {
  assert.deepEqual(parseConfig(["--listen", "127.0.0.1:0"], envOf()).listen, {
    hostname: "127.0.0.1",
    port: 0,
  });
  assert.deepEqual(parseConfig(["--listen", "127.0.0.1:65535"], envOf()).listen, {
    hostname: "127.0.0.1",
    port: 65535,
  });
  assert.deepEqual(parseConfig(["--listen", "localhost:7321"], envOf()).listen, {
    hostname: "localhost",
    port: 7321,
  });
  assert.deepEqual(parseConfig(["--listen", "[::1]:7321"], envOf()).listen, {
    hostname: "::1",
    port: 7321,
  });
  assert.deepEqual(parseConfig(["--listen", "[::]:1"], envOf()).listen, {
    hostname: "::",
    port: 1,
  });
});

Deno.test("parseConfig() handles --help and --version", async (t) => {
  await t.step("--help", () => {
    const config = parseConfig(["--help"], envOf());
    assert.equal(config.help, true);
    assert.equal(config.version, false);
  });
  await t.step("-h", () => {
    assert.equal(parseConfig(["-h"], envOf()).help, true);
  });
  await t.step("--version", () => {
    const config = parseConfig(["--version"], envOf());
    assert.equal(config.version, true);
    assert.equal(config.help, false);
  });
  await t.step("-V", () => {
    assert.equal(parseConfig(["-V"], envOf()).version, true);
  });
  await t.step("--help works even with a bad environment", () => {
    const config = parseConfig(
      ["--help"],
      envOf({ LOCKD_MAX_LEASE: "abc", LOCKD_LISTEN: "nope", LOCKD_MAX_CONNECTIONS: "0" }),
    );
    assert.equal(config.help, true);
  });
  await t.step("--version works even with a bad environment", () => {
    assert.equal(parseConfig(["--version"], envOf({ LOCKD_HEARTBEAT: "-1" })).version, true);
  });
  await t.step("--help does not take a value", () => {
    usageError(["--help=yes"]);
  });
});

Deno.test("parseConfig() throws UsageError for a bad command line", async (t) => {
  const cases: [string[], RegExp][] = [
    [["--bogus"], /--bogus/],
    [["-x"], /-x/],
    [["--listen"], /--listen/],
    [["--data-dir"], /--data-dir/],
    [["serve"], /serve/],
    [["--listen", "127.0.0.1:0", "extra"], /extra/],
    [["--listen", ""], /--listen/],
    [["--listen", "127.0.0.1"], /--listen.*127\.0\.0\.1/],
    [["--listen", "7321"], /--listen/],
    [["--listen", ":7321"], /--listen/],
    [["--listen", "127.0.0.1:"], /--listen/],
    [["--listen", "127.0.0.1:65536"], /--listen.*65536/],
    [["--listen", "127.0.0.1:99999"], /--listen/],
    [["--listen", "127.0.0.1:-1"], /--listen/],
    [["--listen", "127.0.0.1:http"], /--listen/],
    [["--listen", "::1:7321"], /--listen/],
    [["--listen", "a b:1"], /--listen/],
    [["--advertise", "nope"], /--advertise/],
    [["--bridge", "nope"], /--bridge/],
    [["--bridge", "127.0.0.1:70000"], /--bridge/],
    [["--http", "nope"], /^--http must be HOST:PORT \(e\.g\. 127\.0\.0\.1:7321\), got "nope"$/],
    [["--http", "127.0.0.1:65536"], /--http/],
    [["--http", ""], /--http/],
    [
      ["--http", "127.0.0.1:8080", "--bridge", "127.0.0.1:8080", "--bridge-demo"],
      /^--http shares the bridge's address, where \/ is the status page: --bridge-demo needs a --bridge of its own$/,
    ],
    [["--peers", "a:1,,b:2"], /--peers/],
    [["--peers", "a:1,b"], /--peers/],
    [["--peers", ","], /--peers/],
    [["--peers", ""], /--peers/],
    [["--data-dir", ""], /--data-dir/],
    [["--max-lease", "0"], /--max-lease/],
    [["--max-lease", "0.0"], /--max-lease/],
    [["--max-lease", "-1"], /--max-lease got a value starting with "-": write it as --max-lease=/],
    [["--max-lease=-1"], /--max-lease must be a positive number of seconds, got "-1"/],
    [["--max-lease", "1000000000000"], /--max-lease must be at most 999999999999 seconds/],
    [["--max-lease", "abc"], /--max-lease.*abc/],
    [["--max-lease", "1e3"], /--max-lease/],
    [["--max-lease", "NaN"], /--max-lease/],
    [["--max-lease", "Infinity"], /--max-lease/],
    [["--max-lease", "99999999999999999999999"], /--max-lease/],
    [["--max-lease", ""], /--max-lease/],
    [["--max-connections", "0"], /--max-connections/],
    [["--max-connections", "-1"], /--max-connections/],
    [["--max-connections", "01"], /--max-connections/],
    [["--max-connections", "1.5"], /--max-connections/],
    [["--max-connections", "1000000000"], /--max-connections/],
    [["--max-connections", "many"], /--max-connections/],
    [["--max-waiters", "0"], /--max-waiters must be a whole number from 1 to 999999999, got "0"/],
    [["--max-waiters", "1e6"], /--max-waiters/],
    [["--max-waiters", "1000000000"], /--max-waiters/],
    [["--heartbeat", "0"], /--heartbeat/],
    [["--heartbeat", "-0.1"], /--heartbeat/],
    [["--failover-timeout", "0"], /--failover-timeout/],
    [["--failover-timeout", "x"], /--failover-timeout/],
    [["--heartbeat", "1"], /--heartbeat.*--failover-timeout/],
    [["--heartbeat", "2", "--failover-timeout", "1"], /--heartbeat.*--failover-timeout/],
    [["--failover-timeout", "0.1"], /--heartbeat.*--failover-timeout/],
    [["--heartbeat", "0.5", "--failover-timeout", "1"], /--heartbeat must be under half/],
    [["--replication", "quorum"], /--replication must be async or sync/],
    [["--replication", "SYNC"], /--replication must be async or sync/],
    [["--log-format", "xml"], /--log-format must be text or json, got "xml"/],
    [["--log-format", "JSON"], /--log-format must be text or json/],
    [["--log-level", "verbose"], /--log-level must be debug, info, warn or error, got "verbose"/],
    [["--log-level", "trace"], /--log-level must be debug, info, warn or error/],
  ];
  for (const [args, message] of cases) {
    await t.step(JSON.stringify(args), () => {
      assert.match(usageError(args), message);
    });
  }
});

Deno.test("parseConfig() throws UsageError for a bad LOCKD_* variable", async (t) => {
  const cases: [string, string][] = [
    ["LOCKD_LISTEN", "nope"],
    ["LOCKD_LISTEN", "127.0.0.1:65536"],
    ["LOCKD_PEERS", "a:1,,b:2"],
    ["LOCKD_ADVERTISE", "x"],
    ["LOCKD_BRIDGE", "x:y"],
    ["LOCKD_HTTP", "9321"],
    ["LOCKD_MAX_LEASE", "0"],
    ["LOCKD_MAX_LEASE", "-5"],
    ["LOCKD_MAX_CONNECTIONS", "0"],
    ["LOCKD_HEARTBEAT", "abc"],
    ["LOCKD_FAILOVER_TIMEOUT", "0"],
    ["LOCKD_LOG_FORMAT", "logfmt"],
    ["LOCKD_LOG_LEVEL", "warning"],
  ];
  for (const [name, value] of cases) {
    await t.step(`${name}=${value}`, () => {
      const message = usageError([], { [name]: value });
      const flag = "--" + name.slice("LOCKD_".length).toLowerCase().replaceAll("_", "-");
      assert.ok(message.includes(flag) || message.includes(name), message);
    });
  }
});

Deno.test("HELP lists every flag and its environment variable", () => {
  for (const c of FLAG_CASES) {
    assert.ok(HELP.includes(c.flag), c.flag);
    assert.ok(HELP.includes(c.env), c.env);
  }
  assert.ok(HELP.includes("--help"));
  assert.ok(HELP.includes("--version"));
});

Deno.test("parseConfig() reads LOCKD_BRIDGE_DEMO as 1/true or 0/false, and refuses anything else", () => {
  for (const [value, on] of [["1", true], ["true", true], ["TRUE", true], ["0", false]] as const) {
    const config = parseConfig(["--bridge", "127.0.0.1:0"], envOf({ LOCKD_BRIDGE_DEMO: value }));
    assert.equal(config.bridgeDemo, on, value);
  }
  assert.equal(parseConfig([], envOf({ LOCKD_BRIDGE_DEMO: "false" })).bridgeDemo, false);
  assert.equal(
    usageError([], { LOCKD_BRIDGE_DEMO: "yes" }),
    'LOCKD_BRIDGE_DEMO must be 1, true, 0 or false, got "yes"',
  );
});
