/**
 * Shared table of the command line tests (tests/cli_test.ts, cli_process_test.ts): flags of
 * docs/server.md that take a value, each with its `LOCKD_*` variable, two values and how to
 * check them in a parsed `Config`.
 */

import assert from "node:assert/strict";
import type { Config } from "../server/cli.ts";

/** A flag, its variable, two valid values and a check of the parsed config. */
export interface FlagCase {
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

/** Flags of docs/server.md that take a value, each with its `LOCKD_*` variable. */
export const FLAG_CASES: FlagCase[] = [
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
    flag: "--max-waiters",
    env: "LOCKD_MAX_WAITERS",
    value: "7",
    other: "2000000",
    check: (c, v) => assert.equal(c.maxWaiters, v === "value" ? 7 : 2_000_000),
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
    other: "0.25",
    check: (c, v) => assert.equal(c.failoverTimeoutMs, v === "value" ? 3000 : 250),
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
