/**
 * Unit tests of the `lockd` subcommands' pure parts (docs/cli.md): which command the
 * arguments pick, each command's arguments and connection options, and the exit-status
 * decisions. No processes, no sockets.
 */

import assert from "node:assert/strict";
import { LockRejectedError, LockTimeoutError, LockUnavailableError } from "../mod.ts";
import {
  connectionOf,
  DEFAULT_SERVER,
  defaultClientName,
  type Env,
  parseFlags,
  secondsOf,
} from "../server/cmd/args.ts";
import {
  childExitCode,
  CommandError,
  EXIT,
  exitCodeOf,
  signalNumber,
  spawnFailure,
} from "../server/cmd/exit.ts";
import { commandOf } from "../server/cmd/lockd.ts";
import {
  parseAcquire,
  parseExtend,
  parseLocks,
  parseRelease,
  parseRun,
  parseStatus,
  splitRun,
} from "../server/cmd/parse.ts";
import { HELP_PAGES } from "../server/cmd/help.ts";

/** An environment lookup over a plain record. */
function envOf(vars: Record<string, string> = {}): Env {
  return (name) => Object.hasOwn(vars, name) ? vars[name] : undefined;
}

/** Runs `fn`, expects a CommandError with status 64 and a one-line message; returns it. */
function usage(fn: () => unknown): string {
  let caught: unknown;
  try {
    fn();
  } catch (error) {
    caught = error;
  }
  assert.ok(caught instanceof CommandError, `expected a CommandError, got ${caught}`);
  assert.equal(caught.code, EXIT.usage);
  assert.ok(!caught.message.includes("\n"), "one line");
  return caught.message;
}

Deno.test("commandOf() is serve with no argument, a flag first, or 'serve'", () => {
  assert.deepEqual(commandOf([]), { kind: "serve", args: [] });
  assert.deepEqual(commandOf(["--listen", "127.0.0.1:0"]), {
    kind: "serve",
    args: ["--listen", "127.0.0.1:0"],
  });
  assert.deepEqual(commandOf(["-h"]), { kind: "serve", args: ["-h"] });
  assert.deepEqual(commandOf(["serve", "--data-dir", "d"]), {
    kind: "serve",
    args: ["--data-dir", "d"],
  });
  assert.deepEqual(commandOf(["run", "k", "--", "true"]), {
    kind: "command",
    name: "run",
    args: ["k", "--", "true"],
  });
  for (const name of ["acquire", "release", "extend", "status", "locks"]) {
    assert.equal((commandOf([name]) as { name: string }).name, name);
  }
  assert.deepEqual(commandOf(["help", "run"]), { kind: "help", topic: "run" });
  assert.deepEqual(commandOf(["start"]), { kind: "unknown", name: "start" });
});

Deno.test("connectionOf() takes --servers, then LOCKD_SERVERS, then 127.0.0.1:7321", () => {
  const none = parseFlags([], { servers: { type: "string" } }).values;
  assert.deepEqual(connectionOf(none, envOf()).servers, [DEFAULT_SERVER]);
  assert.deepEqual(
    connectionOf(none, envOf({ LOCKD_SERVERS: "a:1, tls://b:2 ,ws://c/x" })).servers,
    ["a:1", "tls://b:2", "ws://c/x"],
  );
  const given = parseFlags(["--servers", "x:7"], { servers: { type: "string" } }).values;
  assert.deepEqual(connectionOf(given, envOf({ LOCKD_SERVERS: "a:1" })).servers, ["x:7"]);
  assert.deepEqual(connectionOf(none, envOf({ LOCKD_SERVERS: "" })).servers, [DEFAULT_SERVER]);
  assert.match(usage(() => connectionOf({ servers: "a:1,bad host" }, envOf())), /bad host/);
  assert.match(usage(() => connectionOf({ servers: "," }, envOf())), /no server/);
  assert.match(usage(() => connectionOf(none, envOf({ LOCKD_SERVERS: "a:99999" }))), /SERVERS/);
});

Deno.test("connectionOf() reads the credential from a file or LOCKD_AUTH_SECRET, never a flag", () => {
  const flags = (args: string[]) =>
    parseFlags(args, {
      "auth-name": { type: "string" },
      "auth-secret-file": { type: "string" },
      "ca-file": { type: "string" },
      name: { type: "string" },
    }).values;
  assert.deepEqual(
    connectionOf(flags(["--auth-name", "ops", "--auth-secret-file", "/s"]), envOf()).auth,
    { name: "ops", secret: { file: "/s" } },
  );
  assert.deepEqual(
    connectionOf(flags([]), envOf({ LOCKD_AUTH_NAME: "ops", LOCKD_AUTH_SECRET: "pw" })).auth,
    { name: "ops", secret: { value: "pw" } },
  );
  // A file wins over the secret in the environment.
  assert.deepEqual(
    connectionOf(
      flags(["--auth-secret-file", "/f"]),
      envOf({ LOCKD_AUTH_NAME: "ops", LOCKD_AUTH_SECRET: "pw" }),
    ).auth,
    { name: "ops", secret: { file: "/f" } },
  );
  assert.equal(connectionOf(flags([]), envOf()).auth, undefined);
  assert.match(usage(() => connectionOf(flags(["--auth-name", "ops"]), envOf())), /secret/);
  assert.match(usage(() => connectionOf(flags([]), envOf({ LOCKD_AUTH_SECRET: "x" }))), /name/);
  for (const flag of ["--secret", "--auth-secret=pw", "--password"]) {
    assert.match(usage(() => parseAcquire(["k", flag, "pw"], envOf())), /never taken/);
  }
  assert.equal(connectionOf(flags(["--ca-file", "ca.pem"]), envOf()).caFile, "ca.pem");
  assert.equal(connectionOf(flags([]), envOf({ LOCKD_CA_FILE: "c" })).caFile, "c");
  assert.equal(connectionOf(flags(["--name", "job-7"]), envOf()).name, "job-7");
  assert.match(usage(() => connectionOf(flags(["--name", "a b"]), envOf())), /--name/);
});

Deno.test("connectionOf() reads a bridge's bearer token from a file or LOCKD_BEARER, never a flag", () => {
  const flags = (args: string[]) => parseFlags(args, { "bearer-file": { type: "string" } }).values;
  assert.deepEqual(connectionOf(flags(["--bearer-file", "/t"]), envOf()).bearer, { file: "/t" });
  assert.deepEqual(connectionOf(flags([]), envOf({ LOCKD_BEARER_FILE: "/e" })).bearer, {
    file: "/e",
  });
  assert.deepEqual(connectionOf(flags([]), envOf({ LOCKD_BEARER: "tok" })).bearer, {
    value: "tok",
  });
  // A file wins over the token in the environment; an empty variable is unset.
  assert.deepEqual(
    connectionOf(flags(["--bearer-file", "/t"]), envOf({ LOCKD_BEARER: "tok" })).bearer,
    { file: "/t" },
  );
  assert.equal(connectionOf(flags([]), envOf({ LOCKD_BEARER: "" })).bearer, undefined);
  for (const flag of ["--bearer", "--token=abc", "--bridge-token"]) {
    const message = usage(() => parseAcquire(["k", flag, "abc"], envOf()));
    assert.match(message, /never taken .*--bearer-file/);
    assert.ok(!message.includes("abc"), message);
  }
});

Deno.test("defaultClientName() is lockd-<cmd>@<host>:<pid>, always a valid name", () => {
  assert.equal(defaultClientName("run", "db-1", 42), "lockd-run@db-1:42");
  const odd = defaultClientName("status", "my host\u0001" + "x".repeat(300), 7);
  assert.ok(!/\s/.test(odd) && odd.length <= 128, odd);
  assert.equal(defaultClientName("locks", "", 1), "lockd-locks@localhost:1");
});

Deno.test("secondsOf() takes decimal seconds, 0 only where allowed", () => {
  assert.equal(secondsOf("30", "--lease", false), 30);
  assert.equal(secondsOf("0.25", "--wait", true), 0.25);
  assert.equal(secondsOf("0", "--wait", true), 0);
  assert.match(usage(() => secondsOf("0", "--lease", false)), /--lease must be a positive/);
  assert.match(usage(() => secondsOf("-1", "--wait", true)), /--wait.*"-1"/);
  assert.match(usage(() => secondsOf("1e3", "--lease", false)), /1e3/);
  assert.match(usage(() => secondsOf("1000000000000", "--lease", false)), /at most/);
});

Deno.test("splitRun() starts the command at '--' or at the second positional", () => {
  assert.deepEqual(splitRun(["k", "--lease", "5", "--", "ls", "--lease", "x"]), {
    own: ["k", "--lease", "5"],
    command: ["ls", "--lease", "x"],
  });
  assert.deepEqual(splitRun(["--wait=2", "k", "make", "-j4"]), {
    own: ["--wait=2", "k"],
    command: ["make", "-j4"],
  });
  assert.deepEqual(splitRun(["k", "--servers", "a:1"]), {
    own: ["k", "--servers", "a:1"],
    command: undefined,
  });
});

Deno.test("parseRun() gives the defaults and reads every option", () => {
  const run = parseRun(["k", "--", "echo", "a;b", "$(id)"], envOf());
  assert.ok(!run.help);
  assert.deepEqual(
    { key: run.key, lease: run.lease, wait: run.wait, grace: run.killGrace, cmd: run.command },
    { key: "k", lease: 30, wait: 0, grace: 5, cmd: ["echo", "a;b", "$(id)"] },
  );
  assert.deepEqual(run.connection, {
    servers: [DEFAULT_SERVER],
    caFile: undefined,
    auth: undefined,
    bearer: undefined,
    name: undefined,
  });
  const full = parseRun(
    [
      "jobs:1",
      "--lease",
      "2.5",
      "--wait",
      "10",
      "--kill-grace",
      "0",
      "--servers",
      "h:1",
      "--",
      "x",
    ],
    envOf(),
  );
  assert.ok(!full.help);
  assert.deepEqual([full.lease, full.wait, full.killGrace], [2.5, 10, 0]);
  assert.deepEqual(full.connection.servers, ["h:1"]);
  // The command's own --help is the command's.
  assert.equal(parseRun(["k", "--", "ls", "--help"], envOf()).help, false);
  assert.equal(parseRun(["k", "--help"], envOf()).help, true);
  assert.equal(parseRun(["-h"], envOf()).help, true);
});

Deno.test("parseRun() refuses a bad command line with one line", () => {
  assert.match(usage(() => parseRun([], envOf())), /missing KEY/);
  assert.match(usage(() => parseRun(["k"], envOf())), /missing the command/);
  assert.match(usage(() => parseRun(["k", "--"], envOf())), /missing the command/);
  assert.match(usage(() => parseRun(["k", "--lease", "0", "--", "x"], envOf())), /--lease/);
  assert.match(usage(() => parseRun(["k", "--lease", "-1", "--", "x"], envOf())), /--lease=/);
  assert.match(usage(() => parseRun(["k", "--kill-grace", "z", "--", "x"], envOf())), /grace/);
  assert.match(usage(() => parseRun(["k", "--bogus", "--", "x"], envOf())), /--bogus/);
  assert.match(usage(() => parseRun(["k", "--lease"], envOf())), /--lease/);
  assert.match(usage(() => parseRun(["bad key", "--", "x"], envOf())), /whitespace/);
  assert.match(usage(() => parseRun(["k", "--", ""], envOf())), /empty/);
});

Deno.test("parseAcquire(), parseRelease() and parseExtend() read their positionals", () => {
  const acquire = parseAcquire(["k", "--lease", "60", "--wait", "1"], envOf());
  assert.ok(!acquire.help);
  assert.deepEqual([acquire.key, acquire.lease, acquire.wait], ["k", 60, 1]);
  const release = parseRelease(["k", "18446744073709551615"], envOf());
  assert.ok(!release.help);
  assert.equal(release.token, 18446744073709551615n);
  const extend = parseExtend(["k", "7", "0.5"], envOf());
  assert.ok(!extend.help);
  assert.deepEqual([extend.key, extend.token, extend.lease], ["k", 7n, 0.5]);
  assert.match(usage(() => parseAcquire([], envOf())), /missing KEY/);
  assert.match(usage(() => parseAcquire(["a", "b"], envOf())), /unexpected argument "b"/);
  assert.match(usage(() => parseRelease(["k"], envOf())), /missing TOKEN/);
  assert.match(usage(() => parseRelease(["k", "0"], envOf())), /TOKEN/);
  assert.match(usage(() => parseRelease(["k", "18446744073709551616"], envOf())), /TOKEN/);
  assert.match(usage(() => parseExtend(["k", "7"], envOf())), /missing S/);
  assert.match(usage(() => parseExtend(["k", "7", "0"], envOf())), /lease/);
  assert.equal(parseExtend(["--help"], envOf()).help, true);
});

Deno.test("parseStatus() and parseLocks() read --json, --prefix and --limit", () => {
  const status = parseStatus(["--json"], envOf());
  assert.ok(!status.help && status.json);
  const locks = parseLocks(["--prefix", "orders:", "--limit", "5", "--json"], envOf());
  assert.ok(!locks.help);
  assert.deepEqual([locks.prefix, locks.limit, locks.json], ["orders:", 5, true]);
  const plain = parseLocks([], envOf());
  assert.ok(!plain.help);
  assert.deepEqual([plain.prefix, plain.limit, plain.json], [undefined, 1000, false]);
  assert.match(usage(() => parseStatus(["extra"], envOf())), /unexpected argument/);
  assert.match(usage(() => parseLocks(["--limit", "0"], envOf())), /--limit/);
  assert.match(usage(() => parseLocks(["--prefix", "a b"], envOf())), /--prefix/);
  assert.match(usage(() => parseLocks(["--prefix"], envOf())), /--prefix/);
});

Deno.test("exitCodeOf() maps the client's errors to sysexits", () => {
  assert.equal(exitCodeOf(new LockTimeoutError("k", 1)), 75);
  assert.equal(exitCodeOf(new LockUnavailableError("none")), 69);
  assert.equal(exitCodeOf(new LockRejectedError("A", "k", "authentication failed")), 77);
  assert.equal(exitCodeOf(new LockRejectedError("A", "k", "authentication required")), 77);
  assert.equal(
    exitCodeOf(new LockRejectedError("A", "k", "key outside this credential's prefix")),
    77,
  );
  assert.equal(
    exitCodeOf(new LockRejectedError("A", "k", "lease must be at most 10 seconds")),
    64,
  );
  assert.equal(exitCodeOf(new CommandError("x", 66)), 66);
  assert.equal(exitCodeOf(new TypeError("bad")), 64);
  assert.equal(exitCodeOf(new Error("bug")), 70);
});

Deno.test("childExitCode() passes a code on, and 128+N for a death by signal N", () => {
  assert.equal(childExitCode({ code: 0, signal: null }, "linux"), 0);
  assert.equal(childExitCode({ code: 3, signal: null }, "linux"), 3);
  assert.equal(childExitCode({ code: 143, signal: "SIGTERM" }, "linux"), 143);
  assert.equal(childExitCode({ code: 137, signal: "SIGKILL" }, "linux"), 137);
  assert.equal(childExitCode({ code: 1, signal: "SIGUSR1" }, "linux"), 138);
  assert.equal(childExitCode({ code: 1, signal: "SIGUSR1" }, "darwin"), 158);
  assert.equal(childExitCode({ code: 150, signal: "SIGWHATEVER" }, "linux"), 150);
  assert.equal(signalNumber("SIGHUP", "linux"), 1);
  assert.equal(signalNumber("SIGINT", "darwin"), 2);
});

Deno.test("spawnFailure() is 127 for a missing command, 126 for one that cannot run", () => {
  assert.deepEqual(spawnFailure("nope", "NotFound", "entity not found"), {
    code: 127,
    message: '"nope": command not found',
  });
  assert.equal(spawnFailure("/tmp", "PermissionDenied", "os error 13").code, 126);
  assert.match(spawnFailure("/bin/x", "Error", "Exec format error\nmore").message, /format/);
});

Deno.test("every subcommand's help page names its synopsis, options and exit statuses", () => {
  for (const [name, page] of Object.entries(HELP_PAGES)) {
    for (const section of ["NAME", "SYNOPSIS", "DESCRIPTION", "EXIT STATUS", "EXAMPLES"]) {
      assert.match(page, new RegExp(`^${section}$`, "m"), `${name}: ${section}`);
    }
    assert.match(page, new RegExp(`lockd ${name} `), name);
    for (const flag of ["--servers", "--ca-file", "--auth-name", "--auth-secret-file", "--name"]) {
      assert.ok(page.includes(flag), `${name} documents ${flag}`);
    }
    assert.match(page, /^ {4}64 /m, `${name} documents exit 64`);
    for (const line of page.split("\n")) assert.ok(line.length <= 80, `${name}: ${line}`);
  }
  assert.match(HELP_PAGES.run, /^ {4}70 /m);
  assert.match(HELP_PAGES.run, /^ {4}75 /m);
  assert.match(HELP_PAGES.run, /^ {4}127 /m);
});
