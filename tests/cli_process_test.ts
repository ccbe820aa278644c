/**
 * Tests of the command line (docs/server.md) on the real `server/main.ts` process: `--help`
 * and `-h` (a man page in 80 columns), `--version`, exit 2 on a bad command line, the ready
 * line with the real port, exit 0 on SIGTERM and SIGINT, exit 1 on an address in use, and
 * `LOCKD_MAX_LEASE` against `--max-lease`.
 * `parseConfig()` in-process: cli_test.ts. The table of flags: tests/_cli.ts.
 */

import assert from "node:assert/strict";
import denoJson from "../deno.json" with { type: "json" };
import { LineClient, runMain, runToExit, spawnMain, startServer } from "./_helpers.ts";
import { FLAG_CASES } from "./_cli.ts";

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
