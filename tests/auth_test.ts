/**
 * Unit tests of credentials (docs/security.md, "Credentials"): the auth file's format
 * ({@linkcode Credentials.parse}), checking a secret, the failure {@linkcode Throttle},
 * {@linkcode hostOf}, and {@linkcode AuthFile}, which re-reads the file when it changes. No
 * sockets; the auth file is a real temporary file.
 *
 * @module
 */

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { AuthFileError, Credentials, hostOf, Throttle } from "../server/auth.ts";
import { AuthFile } from "../server/auth_file.ts";
import { capturingLogger } from "./_logger.ts";

const SECRET = "a-long-random-secret-of-at-least-20-characters";
const OTHER = "Another+Secret/42!";

function sha256Hex(text: string): string {
  return createHash("sha256").update(text, "utf8").digest("hex");
}

Deno.test("Credentials.parse() reads names, secrets and prefixes", async (t) => {
  await t.step("skips comments and blank lines, and takes CRLF, tabs and padding", () => {
    const text = [
      "\uFEFF# name secret prefix",
      "",
      "   ",
      `billing\t${SECRET}\t billing:\r`,
      "  # indented comment",
      `  reports   ${OTHER}   reports:  \r`,
      "",
    ].join("\n");
    const credentials = Credentials.parse(text);
    assert.equal(credentials.size, 2);
    assert.deepEqual(credentials.verify("billing", SECRET), {
      name: "billing",
      prefix: "billing:",
    });
    assert.deepEqual(credentials.verify("reports", OTHER), { name: "reports", prefix: "reports:" });
  });
  await t.step("an empty file has no credentials", () => {
    assert.equal(Credentials.parse("").size, 0);
    assert.equal(Credentials.parse("# only a comment\n\n").size, 0);
  });
  await t.step("a sha256: entry is checked against the secret, not the digest", () => {
    const credentials = Credentials.parse(`admin sha256:${sha256Hex(SECRET)} *`);
    assert.deepEqual(credentials.verify("admin", SECRET), { name: "admin", prefix: "" });
    assert.equal(credentials.verify("admin", `sha256:${sha256Hex(SECRET)}`), undefined);
    assert.equal(credentials.verify("admin", OTHER), undefined);
  });
  await t.step("the digest in docs/security.md is that of its example secret", () => {
    const digest = "8c6976e5b5410415bde908bd4dee15dfb167a9c873fc4bb8a81f6f2ab448a918";
    assert.equal(sha256Hex("admin"), digest);
    const credentials = Credentials.parse(`billing sha256:${digest} billing:`);
    assert.equal(credentials.verify("billing", "admin")?.prefix, "billing:");
  });
  await t.step("* is any key; any other prefix is kept as is", () => {
    const credentials = Credentials.parse(`a ${SECRET} *\nb ${SECRET} é:\nc ${SECRET} x*`);
    assert.equal(credentials.verify("a", SECRET)?.prefix, "");
    assert.equal(credentials.verify("b", SECRET)?.prefix, "é:");
    assert.equal(credentials.verify("c", SECRET)?.prefix, "x*");
  });
  await t.step("names may use letters, digits, '.', '_', '@' and '-', up to 64", () => {
    const name = `A.b_c@d-9${"n".repeat(55)}`;
    assert.equal(name.length, 64);
    assert.equal(Credentials.parse(`${name} ${SECRET} *`).verify(name, SECRET)?.name, name);
  });
});

Deno.test("Credentials.parse() throws AuthFileError naming the line, never the secret", () => {
  const cases: [string, RegExp][] = [
    [`billing ${SECRET}`, /^line 3: expected <name> <secret> <prefix>$/],
    [`billing ${SECRET} billing: extra`, /^line 3: expected <name> <secret> <prefix>$/],
    [`billing ${SECRET} billing: # a comment`, /^line 3: expected/],
    [`bill/ing ${SECRET} billing:`, /^line 3: a name is 1-64 letters/],
    [`${"n".repeat(65)} ${SECRET} *`, /^line 3: a name is 1-64 letters/],
    [`billing ${SECRET}\u0001 *`, /^line 3: a secret is 1-256 printable characters/],
    [`billing ${SECRET}\x7f *`, /^line 3: a secret is 1-256 printable characters/],
    [`billing ${SECRET}é *`, /^line 3: a secret is 1-256 printable characters/],
    [`billing ${"s".repeat(257)}${SECRET} *`, /^line 3: a secret is 1-256 printable/],
    [`billing ${SECRET} a\u0001b`, /^line 3: the prefix must be \* or the start of a valid key$/],
    [`billing ${SECRET} ${"k".repeat(251)}`, /^line 3: the prefix must be/],
    // A digest cut short (or in capitals) is not a secret that reading the file gives away.
    [`billing sha256:${sha256Hex(SECRET).slice(1)} *`, /^line 3: .*sha256:/],
    [`billing sha256:${sha256Hex(SECRET).toUpperCase()} *`, /^line 3: .*sha256:/],
    [`billing sha256: *`, /^line 3: .*sha256:/],
  ];
  for (const [line, message] of cases) {
    const text = `# header\n\n${line}\r\nok ${OTHER} *\n`;
    assert.throws(() => Credentials.parse(text), (error: unknown) => {
      assert.ok(error instanceof AuthFileError, `${JSON.stringify(line)}: ${error}`);
      assert.equal(error.name, "AuthFileError");
      assert.match(error.message, message, JSON.stringify(line));
      assert.ok(!error.message.includes(SECRET), error.message);
      assert.ok(!error.message.includes(OTHER), error.message);
      assert.ok(!error.message.includes(sha256Hex(SECRET).slice(8, 40)), error.message);
      return true;
    });
  }
});

Deno.test("Credentials.parse() refuses a name given twice, naming the second line", () => {
  const text = `billing ${SECRET} billing:\n# comment\nbilling ${OTHER} *\n`;
  assert.throws(() => Credentials.parse(text), (error: unknown) => {
    assert.ok(error instanceof AuthFileError);
    assert.match(error.message, /^line 3: billing is given twice$/);
    assert.ok(!error.message.includes(OTHER) && !error.message.includes(SECRET));
    return true;
  });
});

Deno.test("Credentials verify() grants only the right secret of a known name", () => {
  const credentials = Credentials.parse(`billing ${SECRET} billing:\nadmin ${OTHER} *\n`);
  assert.deepEqual(credentials.verify("billing", SECRET), { name: "billing", prefix: "billing:" });
  assert.equal(credentials.verify("billing", OTHER), undefined, "another credential's secret");
  assert.equal(credentials.verify("billing", SECRET.slice(0, -1)), undefined, "a prefix of it");
  assert.equal(credentials.verify("billing", `${SECRET}x`), undefined, "longer");
  assert.equal(credentials.verify("billing", ""), undefined);
  assert.equal(credentials.verify("nobody", SECRET), undefined, "an unknown name");
  assert.equal(credentials.verify("Billing", SECRET), undefined, "names are case-sensitive");
  assert.ok(credentials.has("billing"));
  assert.ok(!credentials.has("nobody"));
});

Deno.test("Credentials with() adds or replaces one credential and leaves the original", () => {
  const file = Credentials.parse(`billing ${SECRET} billing:\n`);
  const more = file.with("bridge", OTHER, "*");
  assert.equal(more.size, 2);
  assert.deepEqual(more.verify("bridge", OTHER), { name: "bridge", prefix: "" });
  assert.equal(more.verify("billing", SECRET)?.prefix, "billing:");
  assert.equal(file.size, 1);
  assert.equal(file.verify("bridge", OTHER), undefined, "the original is unchanged");
  const replaced = file.with("billing", OTHER, "b:");
  assert.equal(replaced.size, 1);
  assert.equal(replaced.verify("billing", SECRET), undefined, "the old secret is gone");
  assert.deepEqual(replaced.verify("billing", OTHER), { name: "billing", prefix: "b:" });
});

Deno.test("Throttle delays failures 100, 200, 400 ms ... up to 5 s", () => {
  const throttle = new Throttle();
  const delays = Array.from({ length: 9 }, (_, i) => throttle.failed("10.0.0.1", i * 1000));
  assert.deepEqual(delays, [100, 200, 400, 800, 1600, 3200, 5000, 5000, 5000]);
  for (let i = 0; i < 100; i++) throttle.failed("10.0.0.1", 9000 + i);
  assert.equal(throttle.failed("10.0.0.1", 10_000), 5000, "no overflow after many failures");
  assert.equal(throttle.failed("10.0.0.2", 10_000), 100, "each address has its own count");
});

Deno.test("Throttle forgets an address after a quiet minute", () => {
  const throttle = new Throttle();
  assert.equal(throttle.failed("h", 0), 100);
  assert.equal(throttle.failed("h", 59_999), 200, "a minute counts from the last failure");
  assert.equal(throttle.failed("h", 119_998), 400);
  assert.equal(throttle.failed("h", 179_998), 100, "a full minute without failures: clean");
});

Deno.test("Throttle succeeded() clears the record of its address only", () => {
  const throttle = new Throttle();
  throttle.failed("a", 0);
  throttle.failed("a", 1);
  throttle.failed("b", 1);
  throttle.succeeded("a");
  assert.equal(throttle.failed("a", 2), 100);
  assert.equal(throttle.failed("b", 2), 200);
  throttle.succeeded("never-failed"); // nothing to clear
});

Deno.test("Throttle keeps at most maxAddresses, forgetting the longest quiet first", () => {
  const throttle = new Throttle({ maxAddresses: 2 });
  throttle.failed("a", 0);
  throttle.failed("b", 1);
  throttle.failed("a", 2); // a is now the most recent
  throttle.failed("c", 3); // b goes
  assert.equal(throttle.failed("a", 4), 400, "a kept its count");
  assert.equal(throttle.failed("b", 5), 100, "b was forgotten"); // c goes
  assert.equal(throttle.failed("c", 6), 100, "c was forgotten");
});

Deno.test("Throttle lockedFor(): after three failures, no hello is checked until the last delay passed", () => {
  const throttle = new Throttle();
  throttle.failed("h", 0); // 100
  throttle.failed("h", 100); // 200
  assert.equal(throttle.lockedFor("h", 150), 0, "two failures lock nothing");
  assert.equal(throttle.failed("h", 300), 400);
  assert.equal(throttle.lockedFor("h", 300), 400);
  assert.equal(throttle.lockedFor("h", 650), 50);
  assert.equal(throttle.lockedFor("h", 700), 0, "the delay passed: the next hello is checked");
  assert.equal(throttle.lockedFor("other", 300), 0, "per address");
  // Being locked changes nothing: the record stays as it was.
  assert.equal(throttle.failed("h", 700), 800);
  assert.equal(throttle.lockedFor("h", 1000), 500);
  throttle.succeeded("h");
  assert.equal(throttle.lockedFor("h", 1000), 0, "a success clears the lock");
  throttle.failed("q", 0);
  throttle.failed("q", 1);
  throttle.failed("q", 2);
  assert.equal(throttle.lockedFor("q", 60_002), 0, "a quiet minute clears it too");
});

Deno.test("Throttle takes its delays and limits from options", () => {
  const throttle = new Throttle({ baseMs: 10, maxMs: 35, forgetMs: 1000 });
  assert.deepEqual([0, 1, 2, 3].map((t) => throttle.failed("h", t)), [10, 20, 35, 35]);
  assert.equal(throttle.failed("h", 1003), 10);
});

Deno.test("hostOf() drops the port of an IPv4, bracketed IPv6 or bare IPv6 address", () => {
  assert.equal(hostOf("10.0.0.1:7321"), "10.0.0.1");
  assert.equal(hostOf("[::1]:7321"), "[::1]");
  assert.equal(hostOf("[2001:db8::5]:40000"), "[2001:db8::5]");
  assert.equal(hostOf("::1:7321"), "::1", "Deno's NetAddr hostname is not bracketed");
  assert.equal(hostOf("localhost:1"), "localhost");
  assert.equal(hostOf("-"), "-", "no port: the address as is");
});

/** Waits until `ready()` holds, checking every 20 ms, for at most `ms`. */
async function until(ready: () => boolean, what: string, ms = 5000): Promise<void> {
  const deadline = performance.now() + ms;
  while (!ready()) {
    if (performance.now() > deadline) throw new Error(`Timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

// The file is written synchronously: an async write lets the poll see it half written.
Deno.test("AuthFile re-reads its file when it changes and keeps the old one when bad", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "lockd-auth-" });
  const path = `${dir}/clients.auth`;
  const log = capturingLogger();
  Deno.writeTextFileSync(path, `billing ${SECRET} billing:\n`);
  const file = AuthFile.open(path, log);
  try {
    await t.step("open() reads it and says how many credentials it has", () => {
      assert.equal(file.credentials.verify("billing", SECRET)?.prefix, "billing:");
      assert.deepEqual(log.lines, [`info auth: 1 credential(s) from ${path}`]);
    });
    await t.step("a changed file is in force within the poll, with no call", async () => {
      log.lines.length = 0;
      Deno.writeTextFileSync(path, `billing ${SECRET} b:\nadmin ${OTHER} *\n`);
      await until(() => file.credentials.verify("admin", OTHER) !== undefined, "the reload");
      assert.equal(file.credentials.verify("billing", SECRET)?.prefix, "b:");
      assert.deepEqual(log.lines, [`info auth: reloaded 2 credential(s) from ${path}`]);
    });
    await t.step(
      "a bad new file is logged without its text; the old credentials stay",
      async () => {
        log.lines.length = 0;
        const bad = `# new\nadmin ${OTHER} *\nbilling ${SECRET}\n`;
        Deno.writeTextFileSync(path, bad);
        await until(() => log.lines.length > 0, "the log line of the bad file");
        assert.deepEqual(log.lines, [
          `error auth file ${path} not reloaded: line 3: expected <name> <secret> <prefix>; ` +
          "the credentials in force stay",
        ]);
        assert.equal(file.credentials.verify("admin", OTHER)?.prefix, "");
        assert.equal(file.credentials.verify("billing", SECRET)?.prefix, "b:");
        file.reload();
        assert.equal(log.lines.length, 1, "an unchanged bad file is reported once");
      },
    );
    await t.step("reload() reads a changed file at once", () => {
      log.lines.length = 0;
      Deno.writeTextFileSync(path, `reports ${OTHER} reports:\n`);
      file.reload();
      assert.equal(file.credentials.size, 1);
      assert.equal(file.credentials.verify("reports", OTHER)?.prefix, "reports:");
      assert.equal(file.credentials.verify("billing", SECRET), undefined);
    });
    await t.step(
      "a removed file is logged once; the credentials stay until it is back",
      async () => {
        log.lines.length = 0;
        await Deno.remove(path);
        file.reload();
        file.reload();
        assert.deepEqual(log.lines, [
          `error auth file ${path}: no such file; the credentials in force stay`,
        ]);
        assert.equal(file.credentials.verify("reports", OTHER)?.prefix, "reports:");
        Deno.writeTextFileSync(path, `billing ${SECRET} *\n`);
        await until(() => file.credentials.verify("billing", SECRET) !== undefined, "the reload");
        assert.equal(file.credentials.verify("reports", OTHER), undefined);
      },
    );
    for (const line of log.lines) {
      assert.ok(!line.includes(SECRET) && !line.includes(OTHER), line);
    }
  } finally {
    file.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("AuthFile.open() throws for a missing or malformed file, never quoting it", async () => {
  const dir = await Deno.makeTempDir({ prefix: "lockd-auth-" });
  try {
    const log = capturingLogger();
    assert.throws(
      () => AuthFile.open(`${dir}/missing`, log),
      new Error(`Cannot use the auth file "${dir}/missing": no such file`),
    );
    const path = `${dir}/bad.auth`;
    Deno.writeTextFileSync(path, `ok ${OTHER} *\nbad\u0001name ${SECRET} *\n`);
    assert.throws(() => AuthFile.open(path, log), (error: unknown) => {
      assert.ok(error instanceof Error);
      assert.match(error.message, /^Cannot use the auth file ".*": line 2: a name is/);
      assert.ok(!error.message.includes(SECRET) && !error.message.includes(OTHER));
      return true;
    });
    assert.deepEqual(log.lines, [], "nothing is logged and nothing is left watching");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
