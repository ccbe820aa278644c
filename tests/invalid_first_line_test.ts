/**
 * Lines that are not valid UTF-8 and the first-line rules (docs/protocol.md, "Framing" and
 * "Sessions and authentication"; docs/security.md): such a line counts as a line, so a hello
 * cannot follow it, and with `--auth-file` it is refused as a first line (`E authentication
 * required`, then a close); a hello that is not valid UTF-8 is a malformed hello, answered
 * `HELLO - E line is not valid UTF-8` without echoing its fields. Raw bytes over real TCP.
 */

import assert from "node:assert/strict";
import { LineClient, type ServerProcess, startServer } from "./_helpers.ts";

const SECRET = "billing-Secret-0f3a9c71e2";
const NOT_UTF8 = "E line is not valid UTF-8";

/** `text` as UTF-8 with every `\xff` in it replaced by the byte 0xFF (never valid UTF-8). */
function bytes(text: string): Uint8Array {
  const parts = text.split("\xff").map((part) => new TextEncoder().encode(part));
  const out: number[] = [];
  parts.forEach((part, i) => {
    if (i > 0) out.push(0xff);
    out.push(...part);
  });
  return new Uint8Array(out);
}

/** Runs `fn` against a lockd on a free port, with `--auth-file` when `auth`. */
async function withLockd(auth: boolean, fn: (server: ServerProcess) => Promise<void>) {
  const dir = await Deno.makeTempDir({ prefix: "lockd-utf8-" });
  const file = `${dir}/clients.auth`;
  await Deno.writeTextFile(file, `billing ${SECRET} billing:\n`);
  const server = await startServer({ args: auth ? ["--auth-file", file] : [] });
  try {
    await fn(server);
  } finally {
    await server.stop();
    await Deno.remove(server.dataDir, { recursive: true });
    await Deno.remove(dir, { recursive: true });
  }
  assert.ok(!server.stderr().includes(SECRET), "no secret in the log");
}

/** Sends `text` (see {@linkcode bytes}) on a fresh connection; every reply until the close. */
async function closedAfter(port: number, text: string): Promise<string[]> {
  const c = await LineClient.connect(port);
  try {
    await c.write(bytes(text));
    return await c.closedByPeer(5000);
  } finally {
    await c.close();
  }
}

Deno.test("without auth, a first line that is not valid UTF-8 ends the hello window", async () => {
  await withLockd(false, async (server) => {
    const c = await LineClient.connect(server.port);
    try {
      await c.write(bytes("\xff\nHELLO 1 - n\nR u8 1\n"));
      assert.deepEqual(await c.readLines(3), [
        `- - ${NOT_UTF8}`,
        "HELLO - E hello must be the first line",
        "R u8 N",
      ]);
    } finally {
      await c.close();
    }
  });
});

Deno.test("without auth, a hello that is not valid UTF-8 is answered without echoing its fields", async () => {
  await withLockd(false, async (server) => {
    const c = await LineClient.connect(server.port);
    try {
      await c.write(bytes(`HELLO SuperSecret123 n\xff\nHELLO 1 ${SECRET} n\xff\n`));
      assert.deepEqual(await c.readLines(2), [`HELLO - ${NOT_UTF8}`, `HELLO - ${NOT_UTF8}`]);
      // A malformed hello, like any other: the connection stays, and a valid hello may follow.
      assert.equal(await c.request("HELLO 1 - n"), "HELLO - OK");
      assert.equal(await c.request("R u8 1"), "R u8 N");
    } finally {
      await c.close();
    }
  });
});

Deno.test("with --auth-file, a first line that is not valid UTF-8 gets 'E authentication required' and a close", async () => {
  await withLockd(true, async (server) => {
    const hello = `HELLO 1 - n billing ${SECRET}\n`;
    assert.deepEqual(await closedAfter(server.port, `\xff\n${hello}A billing:k 10 0\n`), [
      "- - E authentication required",
    ]);
    assert.deepEqual(await closedAfter(server.port, `A billing:k\xff 10 0\n${hello}`), [
      "A - E authentication required",
    ]);
    // Nothing was taken, and a valid hello first is still accepted.
    const c = await LineClient.connect(server.port);
    try {
      assert.equal(await c.request(hello.trimEnd()), "HELLO - OK");
      assert.match(await c.request("A billing:k 10 0") ?? "", /^A billing:k A \d+$/);
      // After the hello, such a line is answered E and the connection stays.
      await c.write(bytes("A billing:k\xff 10 0\n"));
      assert.equal(await c.readLine(), `A - ${NOT_UTF8}`);
      assert.equal(await c.request("R billing:u8 1"), "R billing:u8 N");
    } finally {
      await c.close();
    }
  });
});

Deno.test("with --auth-file, a hello that is not valid UTF-8 gets E, no echo, and a close", async () => {
  await withLockd(true, async (server) => {
    for (const hello of [`HELLO ${SECRET} n\xff`, `HELLO 1 - n\xff billing ${SECRET}`]) {
      const rest = await closedAfter(server.port, `${hello}\nHELLO 1 - n billing ${SECRET}\n`);
      assert.deepEqual(rest, [`HELLO - ${NOT_UTF8}`], JSON.stringify(hello));
    }
  });
});
