/**
 * Tests of the command line (docs/server.md): `parseConfig()` in-process, then the real
 * `server/main.ts` process for `--help`, `--version`, exit codes and the ready line.
 */

import assert from "node:assert/strict";
import denoJson from "../deno.json" with { type: "json" };
import { type Config, HELP, parseConfig, UsageError } from "../server/cli.ts";
import { LineClient, runMain, runToExit, spawnMain, startServer } from "./_helpers.ts";

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

interface FlagCase {
  flag: string;
  env: string;
  value: string;
  other: string;
  check: (config: Config, value: "value" | "other") => void;
}

/** A {@linkcode FlagCase} check: `config[field]` deep-equals `value` or `other`, as asked. */
function deepCheck<K extends keyof Config>(
  field: K,
  value: Config[K],
  other: Config[K],
): FlagCase["check"] {
  return (c, v) => assert.deepEqual(c[field], v === "value" ? value : other);
}

const FLAG_CASES: FlagCase[] = [
  {
    flag: "--listen",
    env: "LOCKD_LISTEN",
    value: "0.0.0.0:7000",
    other: "127.0.0.2:0",
    check: deepCheck(
      "listen",
      { hostname: "0.0.0.0", port: 7000 },
      { hostname: "127.0.0.2", port: 0 },
    ),
  },
  {
    flag: "--peers",
    env: "LOCKD_PEERS",
    value: "10.0.0.1:7321,10.0.0.2:7321,[::1]:7000",
    other: "a:1",
    check: deepCheck(
      "peers",
      [
        { hostname: "10.0.0.1", port: 7321 },
        { hostname: "10.0.0.2", port: 7321 },
        { hostname: "::1", port: 7000 },
      ],
      [{ hostname: "a", port: 1 }],
    ),
  },
  {
    flag: "--advertise",
    env: "LOCKD_ADVERTISE",
    value: "node-a.example:7321",
    other: "10.0.0.9:1",
    check: deepCheck(
      "advertise",
      { hostname: "node-a.example", port: 7321 },
      { hostname: "10.0.0.9", port: 1 },
    ),
  },
  {
    flag: "--data-dir",
    env: "LOCKD_DATA_DIR",
    value: "/var/lib/lockd",
    other: "relative/dir",
    check: (c, v) => assert.equal(c.dataDir, v === "value" ? "/var/lib/lockd" : "relative/dir"),
  },
  {
    flag: "--max-lease",
    env: "LOCKD_MAX_LEASE",
    value: "60",
    other: "0.5",
    check: (c, v) => assert.equal(c.maxLeaseMs, v === "value" ? 60_000 : 500),
  },
  {
    flag: "--max-connections",
    env: "LOCKD_MAX_CONNECTIONS",
    value: "5",
    other: "999999999",
    check: (c, v) => assert.equal(c.maxConnections, v === "value" ? 5 : 999_999_999),
  },
  {
    flag: "--bridge",
    env: "LOCKD_BRIDGE",
    value: "127.0.0.1:8080",
    other: "[::]:9",
    check: deepCheck("bridge", { hostname: "127.0.0.1", port: 8080 }, { hostname: "::", port: 9 }),
  },
  {
    flag: "--http",
    env: "LOCKD_HTTP",
    value: "10.0.0.1:9321",
    other: "[::1]:0",
    check: deepCheck("http", { hostname: "10.0.0.1", port: 9321 }, { hostname: "::1", port: 0 }),
  },
  {
    flag: "--heartbeat",
    env: "LOCKD_HEARTBEAT",
    value: "0.25",
    other: "0.001",
    check: (c, v) => assert.equal(c.heartbeatMs, v === "value" ? 250 : 1),
  },
  {
    flag: "--failover-timeout",
    env: "LOCKD_FAILOVER_TIMEOUT",
    value: "3",
    other: "0.2",
    check: (c, v) => assert.equal(c.failoverTimeoutMs, v === "value" ? 3000 : 200),
  },
  {
    flag: "--log-format",
    env: "LOCKD_LOG_FORMAT",
    value: "json",
    other: "text",
    check: (c, v) => assert.equal(c.logFormat, v === "value" ? "json" : "text"),
  },
  {
    flag: "--log-level",
    env: "LOCKD_LOG_LEVEL",
    value: "warn",
    other: "debug",
    check: (c, v) => assert.equal(c.logLevel, v === "value" ? "warn" : "debug"),
  },
];

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
    logFormat: "json",
    logLevel: "error",
  });
});

Deno.test("parseConfig() rounds seconds up to whole ms", () => {
  assert.equal(parseConfig(["--max-lease", "0.0001"], envOf()).maxLeaseMs, 1);
  assert.equal(parseConfig(["--max-lease", "1.0011"], envOf()).maxLeaseMs, 1002);
  assert.equal(parseConfig(["--heartbeat", "0.0105"], envOf()).heartbeatMs, 11);
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
    [["--heartbeat", "0"], /--heartbeat/],
    [["--heartbeat", "-0.1"], /--heartbeat/],
    [["--failover-timeout", "0"], /--failover-timeout/],
    [["--failover-timeout", "x"], /--failover-timeout/],
    [["--heartbeat", "1"], /--heartbeat.*--failover-timeout/],
    [["--heartbeat", "2", "--failover-timeout", "1"], /--heartbeat.*--failover-timeout/],
    [["--failover-timeout", "0.1"], /--heartbeat.*--failover-timeout/],
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

Deno.test("main --help exits 0 with a man page on stdout", async () => {
  const { code, stdout, stderr } = await runMain(["--help"]);
  assert.equal(code, 0);
  assert.equal(stderr, "");
  for (const section of ["NAME", "SYNOPSIS", "OPTIONS", "EXIT STATUS"]) {
    assert.match(stdout, new RegExp(`^${section}$`, "m"), `section ${section}`);
  }
  assert.ok(
    stdout.indexOf("NAME") < stdout.indexOf("SYNOPSIS") &&
      stdout.indexOf("SYNOPSIS") < stdout.indexOf("OPTIONS") &&
      stdout.indexOf("OPTIONS") < stdout.indexOf("EXIT STATUS"),
    "sections in man-page order",
  );
  assert.match(stdout, /^NAME\n {4}lockd - /);
  for (const c of FLAG_CASES) {
    assert.ok(stdout.includes(c.flag), c.flag);
    assert.ok(stdout.includes(c.env), c.env);
  }
  assert.match(stdout, /--help/);
  assert.match(stdout, /--version/);
  // The exit codes 0, 1 and 2 are documented.
  const exitStatus = stdout.slice(stdout.indexOf("EXIT STATUS"));
  assert.match(exitStatus, /^\s+0\s/m);
  assert.match(exitStatus, /^\s+1\s/m);
  assert.match(exitStatus, /^\s+2\s/m);
  // The defaults of docs/server.md are shown.
  assert.match(stdout, /127\.0\.0\.1:7321/);
  assert.match(stdout, /86400/);
  assert.match(stdout, /lockd-data/);
});

Deno.test("main -h prints the same page as --help", async () => {
  const long = await runMain(["--help"]);
  const short = await runMain(["-h"]);
  assert.equal(short.code, 0);
  assert.equal(short.stdout, long.stdout);
});

Deno.test("main --help fits in 80 columns like a man page", async () => {
  const { stdout } = await runMain(["--help"]);
  const wide = stdout.split("\n").filter((line) => line.length > 80);
  assert.deepEqual(wide, [], "lines wider than 80 columns");
  assert.ok(!stdout.includes("\t"), "no tabs");
});

Deno.test("main --version prints `lockd <version>` from deno.json", async () => {
  const { code, stdout, stderr } = await runMain(["--version"]);
  assert.equal(code, 0);
  assert.equal(stdout, `lockd ${denoJson.version}\n`);
  assert.equal(stderr, "");
  assert.match(denoJson.version, /^\d+\.\d+\.\d+/);
  const short = await runMain(["-V"]);
  assert.equal(short.code, 0);
  assert.equal(short.stdout, `lockd ${denoJson.version}\n`);
});

Deno.test("main exits 2 on a bad command line, with a clear message on stderr only", async (t) => {
  const cases: [string, string[], Record<string, string> | undefined, RegExp][] = [
    ["unknown flag", ["--bogus"], undefined, /--bogus/],
    ["unknown short flag", ["-x"], undefined, /-x/],
    ["missing value", ["--listen"], undefined, /--listen/],
    ["bad address", ["--listen", "localhost"], undefined, /--listen.*localhost/],
    ["port out of range", ["--listen", "127.0.0.1:70000"], undefined, /--listen.*70000/],
    ["bad max lease", ["--max-lease", "abc"], undefined, /--max-lease.*abc/],
    ["zero max lease", ["--max-lease", "0"], undefined, /--max-lease/],
    ["bad max connections", ["--max-connections", "0"], undefined, /--max-connections/],
    ["stray positional", ["start"], undefined, /start/],
    ["stray positional after flags", ["--listen", "127.0.0.1:0", "x"], undefined, /'x'|"x"/],
    ["bad environment variable", [], { LOCKD_MAX_LEASE: "-1" }, /max-lease|MAX_LEASE/],
    ["bad LOCKD_LISTEN", [], { LOCKD_LISTEN: "nope" }, /listen|LISTEN/i],
  ];
  for (const [name, args, env, message] of cases) {
    await t.step(name, async () => {
      const { code, stdout, stderr } = await runMain(args, env);
      assert.equal(code, 2, stderr);
      assert.equal(stdout, "");
      assert.match(stderr, /^lockd: /);
      assert.match(stderr, message);
      assert.match(stderr, /--help/, "points to --help");
      assert.ok(!/^\s+at /m.test(stderr), "no stack trace");
    });
  }
});

Deno.test("main --listen 127.0.0.1:0 prints the real port and stops with exit 0 on SIGTERM", async () => {
  const server = await startServer({ listen: "127.0.0.1:0" });
  try {
    assert.match(server.ready, /^listening on 127\.0\.0\.1:\d+\b/);
    assert.ok(server.port > 0 && server.port < 65536, `port ${server.port}`);
    assert.ok(server.ready.includes(`127.0.0.1:${server.port}`));
    assert.match(server.ready, /\bactive\b/, "the ready line names the role");
    // The port shown is the one actually listened on.
    const client = await LineClient.connect(server.port);
    try {
      assert.match((await client.request("A cli:k 5 0"))!, /^A cli:k A [1-9][0-9]*$/);
    } finally {
      await client.close();
    }
  } finally {
    const code = await server.stop("SIGTERM");
    await Deno.remove(server.dataDir, { recursive: true });
    assert.equal(code, 0, server.stderr());
  }
});

Deno.test("main prints exactly one line on stdout and exits 0 on SIGINT", async () => {
  const dataDir = await Deno.makeTempDir({ prefix: "lockd-cli-" });
  try {
    // Every setting from the environment: LOCKD_LISTEN and LOCKD_DATA_DIR take effect.
    const child = spawnMain([], { LOCKD_LISTEN: "127.0.0.1:0", LOCKD_DATA_DIR: dataDir });
    const stderr = new Response(child.stderr).text();
    const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
    let out = "";
    while (!out.includes("\n")) {
      const { value, done } = await reader.read();
      if (done) break;
      out += value;
    }
    const ready = out.slice(0, out.indexOf("\n"));
    const match = /^listening on 127\.0\.0\.1:(\d+) /.exec(ready);
    let port = 0;
    if (match) port = Number(match[1]);
    if (port > 0) {
      const client = await LineClient.connect(port);
      try {
        assert.match((await client.request("A k 5 0"))!, /^A k A \d+$/);
      } finally {
        await client.close();
      }
    }
    child.kill("SIGINT");
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      out += value;
    }
    const status = await child.status;
    const errText = await stderr;
    assert.ok(match, `ready line: ${JSON.stringify(ready)}`);
    assert.notEqual(port, 0, "a real port, not 0");
    assert.equal(out, ready + "\n", "stdout holds the ready line only");
    assert.equal(status.code, 0, errText);
    // The data directory came from LOCKD_DATA_DIR.
    const mark = BigInt((await Deno.readTextFile(`${dataDir}/tokens`)).trim());
    assert.ok(mark >= 1n, "the token mark was written to LOCKD_DATA_DIR");
  } finally {
    await Deno.remove(dataDir, { recursive: true });
  }
});

Deno.test("main exits 1 when the address is already in use", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const dataDir = await Deno.makeTempDir({ prefix: "lockd-cli-" });
  try {
    const { port } = listener.addr;
    const result = await runToExit(["--listen", `127.0.0.1:${port}`, "--data-dir", dataDir]);
    assert.equal(result.timedOut, false, "lockd must not start on a taken address");
    assert.equal(result.code, 1, result.stderr);
    assert.equal(result.stdout, "");
    assert.match(result.stderr, new RegExp(`127\\.0\\.0\\.1:${port}`));
    assert.match(result.stderr, /in use/);
    assert.ok(!/^\s+at /m.test(result.stderr), "no stack trace");
  } finally {
    listener.close();
    await Deno.remove(dataDir, { recursive: true });
  }
});

Deno.test("main applies LOCKD_MAX_LEASE from the environment", async () => {
  const server = await startServer({ env: { LOCKD_MAX_LEASE: "1" } });
  try {
    const client = await LineClient.connect(server.port);
    try {
      assert.match((await client.request("A k 2 0"))!, /^A k E .*1 second/);
      assert.match((await client.request("X k 1 1.001"))!, /^X k E /);
      assert.match((await client.request("A k 1 0"))!, /^A k A [1-9][0-9]*$/);
    } finally {
      await client.close();
    }
  } finally {
    const code = await server.stop();
    await Deno.remove(server.dataDir, { recursive: true });
    assert.equal(code, 0, server.stderr());
  }
});

Deno.test("main lets --max-lease win over LOCKD_MAX_LEASE", async () => {
  const server = await startServer({ args: ["--max-lease", "3"], env: { LOCKD_MAX_LEASE: "1" } });
  try {
    const client = await LineClient.connect(server.port);
    try {
      assert.match((await client.request("A k 2 0"))!, /^A k A [1-9][0-9]*$/);
      assert.match((await client.request("A j 3.001 0"))!, /^A j E .*3 second/);
    } finally {
      await client.close();
    }
  } finally {
    const code = await server.stop();
    await Deno.remove(server.dataDir, { recursive: true });
    assert.equal(code, 0, server.stderr());
  }
});
