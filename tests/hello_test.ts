/**
 * Unit tests of the hello line (docs/protocol.md, "Sessions and authentication"): the codec's
 * {@linkcode parseHello}, {@linkcode helloLine} and {@linkcode helloOkReply}, and the
 * server's {@linkcode answerHello}, with and without credentials, including a seeded fuzz of
 * mutated hello lines. No sockets.
 *
 * @module
 */

import assert from "node:assert/strict";
import {
  AUTH_FAILED,
  clientNameError,
  type Hello,
  HELLO_VERSION,
  helloLine,
  helloOkReply,
  isHello,
  MAX_CLIENT_NAME_BYTES,
  parseHello,
  type RequestError,
} from "../client/codec.ts";
import { Credentials, Throttle } from "../server/auth.ts";
import { answerHello, type HelloContext, type HelloOutcome } from "../server/hello.ts";
import type { Logger } from "../server/log.ts";
import { mulberry32 } from "./_prng.ts";
import { capturingLogger } from "./_logger.ts";

const SESSION = "0123456789abcdef0123456789abcdef";
/** A secret shaped like a credential name, as the one in docs/security.md. */
const SECRET = "a-long-random-secret-of-at-least-20-characters";
/** A secret with characters a credential name may not have. */
const ODD_SECRET = "Pa55+w0rd!~{x}";

function isError(value: Hello | RequestError): value is RequestError {
  return "kind" in value;
}

/** The reply a parse error would be sent as. */
function errorLine(error: RequestError): string {
  return `${error.op} ${error.key} E ${error.message}`;
}

Deno.test("helloLine() and parseHello() round-trip every valid hello", () => {
  const hellos: Hello[] = [
    { session: undefined, name: "worker-1", credential: undefined },
    { session: SESSION, name: "billing-7@host:4242", credential: undefined },
    { session: SESSION, name: "é", credential: { name: "billing", secret: SECRET } },
    { session: undefined, name: "x", credential: { name: "A.b_c@d-9", secret: "!" } },
    {
      session: undefined,
      name: "é".repeat(MAX_CLIENT_NAME_BYTES / 2),
      credential: { name: "n".repeat(64), secret: "~".repeat(256) },
    },
  ];
  for (const hello of hellos) {
    const line = helloLine(hello);
    assert.ok(line.startsWith(`HELLO ${HELLO_VERSION} ${hello.session ?? "-"} `), line);
    assert.deepEqual(parseHello(line), hello, line);
    assert.equal(helloLine(parseHello(line) as Hello), line);
  }
  assert.equal(
    helloLine({ session: undefined, name: "worker-1", credential: undefined }),
    "HELLO 1 - worker-1",
  );
});

Deno.test("helloOkReply() echoes the session, or - without one", () => {
  assert.equal(helloOkReply(undefined), "HELLO - OK");
  assert.equal(helloOkReply(SESSION), `HELLO ${SESSION} OK`);
});

Deno.test("helloLine() throws a TypeError for an invalid hello, never quoting the secret", () => {
  const bad: Hello[] = [
    { session: "ABC", name: "n", credential: undefined },
    { session: `${SESSION}.`, name: "n", credential: undefined },
    { session: undefined, name: "", credential: undefined },
    { session: undefined, name: "a b", credential: undefined },
    { session: undefined, name: "n", credential: { name: "bad name", secret: SECRET } },
    { session: undefined, name: "n", credential: { name: "n", secret: `${SECRET} x` } },
    { session: undefined, name: "n", credential: { name: "n", secret: "" } },
    { session: undefined, name: "n", credential: { name: "n", secret: "x".repeat(257) } },
    // A missing secret (an unset environment variable) is not the string "undefined".
    { session: undefined, name: "n", credential: { name: "n", secret: undefined! } },
    { session: undefined, name: "n", credential: { name: undefined!, secret: SECRET } },
  ];
  for (const hello of bad) {
    assert.throws(() => helloLine(hello), (error: unknown) => {
      assert.ok(error instanceof TypeError);
      assert.ok(!error.message.includes(SECRET), error.message);
      return true;
    }, JSON.stringify(hello));
  }
});

Deno.test("clientNameError() allows 1-128 UTF-8 bytes without whitespace or controls", () => {
  assert.equal(clientNameError("billing-7@host:4242"), undefined);
  assert.equal(clientNameError("a".repeat(MAX_CLIENT_NAME_BYTES)), undefined);
  assert.equal(clientNameError("é".repeat(64)), undefined, "128 bytes in 64 characters");
  assert.equal(clientNameError(""), "missing client name");
  const tooLong = `client name must be at most ${MAX_CLIENT_NAME_BYTES} bytes`;
  assert.equal(clientNameError("a".repeat(MAX_CLIENT_NAME_BYTES + 1)), tooLong);
  assert.equal(clientNameError("é".repeat(65)), tooLong, "130 bytes in 65 characters");
  assert.equal(clientNameError("€".repeat(43)), tooLong, "129 bytes in 43 characters");
  // Longer than a key may be: the limit named is still the client name's.
  assert.equal(clientNameError("a".repeat(300)), tooLong);
  assert.match(clientNameError("a\tb")!, /^client name must not contain whitespace/);
  assert.match(clientNameError("a\u0001b")!, /^client name must not contain/);
  assert.match(clientNameError("a\ud800")!, /^client name must be valid Unicode/);
});

Deno.test("parseHello() refuses every malformed hello with an E that never holds the secret", () => {
  const base = `HELLO 1 ${SESSION} name`;
  const cases: [string, RegExp][] = [
    ["HELLO", /^usage: /],
    ["HELLO 1", /^usage: /],
    [`HELLO 1 ${SESSION}`, /^usage: /],
    [`HELLO 2 ${SESSION} name billing ${SECRET}`, /^unsupported hello version$/],
    [`HELLO 01 - name billing ${SECRET}`, /^unsupported hello version$/],
    [`HELLO 1 ${SESSION.slice(17)} name billing ${SECRET}`, /^session must be/],
    [`HELLO 1 ${SESSION}${SESSION}0 name billing ${SECRET}`, /^session must be/],
    [`HELLO 1 ${SESSION.slice(1)}.x name billing ${SECRET}`, /^session must be/],
    [`HELLO 1 -- name billing ${SECRET}`, /^session must be/],
    [`HELLO 1  ${SESSION} name billing ${SECRET}`, /^empty field/],
    [`HELLO 1 ${SESSION}  name billing ${SECRET}`, /^empty field/],
    [`${base} billing  ${SECRET}`, /^empty field/],
    [`${base} billing ${SECRET} `, /^empty field/],
    [`${base} billing `, /^empty field/],
    [`${base} `, /^empty field/],
    [`${base} billing`, /^usage: /], // 5 fields
    [`${base} billing ${SECRET} more`, /^usage: /], // 7 fields
    [`${base} bill/ing ${SECRET}`, /^malformed credential$/],
    [`${base} ${"n".repeat(65)} ${SECRET}`, /^malformed credential$/],
    [`${base} billing ${SECRET}\u0001`, /^malformed credential$/],
    [`${base} billing ${SECRET}\x7f`, /^malformed credential$/],
    [`${base} billing ${SECRET}\t`, /^malformed credential$/],
    [`${base} billing ${SECRET}\r`, /^malformed credential$/],
    [`${base} billing ${SECRET}é`, /^malformed credential$/],
    [`${base} billing ${"x".repeat(257)}${SECRET}`, /^malformed credential$/],
    [`HELLO 1 - ${"é".repeat(65)} billing ${SECRET}`, /^client name must be at most 128 bytes$/],
    [`HELLO 1 - ${"a".repeat(129)} billing ${SECRET}`, /^client name must be at most 128 bytes$/],
    [`HELLO 1 - a\u0000b billing ${SECRET}`, /^client name must not contain/],
  ];
  for (const [line, message] of cases) {
    const hello = parseHello(line);
    assert.ok(isError(hello), `${JSON.stringify(line)} must be refused`);
    assert.equal(hello.op, "HELLO");
    assert.equal(hello.kind, "E");
    assert.match(hello.message, message, JSON.stringify(line));
    assert.ok(!errorLine(hello).includes(SECRET), `${JSON.stringify(line)}: ${errorLine(hello)}`);
  }
});

Deno.test("parseHello() never echoes the session field in an error (it may be a secret)", () => {
  const echo = (line: string) => (parseHello(line) as RequestError).key;
  assert.equal(echo(`HELLO 2 ${SESSION} name`), "-");
  assert.equal(echo("HELLO 2 - name"), "-");
  assert.equal(echo("HELLO 1 nothex! name"), "-");
  assert.equal(echo("HELLO 1"), "-");
  assert.equal(echo(`HELLO billing ${SECRET}`), "-");
  assert.equal(echo(`HELLO 2 ${SECRET} name billing x`), "-");
  assert.equal(echo(`HELLO 1 ${SECRET} billing x y z`), "-");
});

Deno.test("parseHello() takes session ids of 16-64 letters, digits, - and _", () => {
  for (const session of [SESSION, crypto.randomUUID(), "A".repeat(16), "a_b-".repeat(16)]) {
    const hello = parseHello(`HELLO 1 ${session} name`);
    assert.ok(!("kind" in hello), session);
    assert.equal(hello.session, session);
  }
  for (const session of ["a".repeat(15), "a".repeat(65), `${SESSION}.`, `${SESSION}é`]) {
    assert.ok("kind" in parseHello(`HELLO 1 ${session} name`), session);
  }
});

Deno.test("isHello() tells a HELLO op from other lines", () => {
  for (const line of ["HELLO", "HELLO ", "HELLO 1 - n", "HELLO x"]) assert.ok(isHello(line), line);
  for (const line of ["HELLOX 1 - n", "hello 1 - n", " HELLO 1 - n", "A HELLO 1 0", "HELL"]) {
    assert.ok(!isHello(line), line);
  }
});

/** A hello context with credentials `billing` (prefix `billing:`) and `admin` (any key). */
function authContext(): HelloContext & { log: Logger & { lines: string[] }; now: number } {
  const credentials = Credentials.parse(`billing ${SECRET} billing:\nadmin ${ODD_SECRET} *\n`);
  const ctx = {
    now: 0,
    credentials: () => credentials,
    throttle: new Throttle(),
    clock: () => ctx.now,
    log: capturingLogger(),
  };
  return ctx;
}

Deno.test("answerHello() without auth", async (t) => {
  const ctx: HelloContext = { clock: () => 0 };
  await t.step("accepts a valid hello, with its session or without", () => {
    assert.deepEqual(answerHello(ctx, `HELLO 1 ${SESSION} w-1`, "10.0.0.1:5", false), {
      kind: "ok",
      identity: { name: "w-1", session: SESSION, prefix: "" },
      reply: `HELLO ${SESSION} OK`,
    });
    assert.deepEqual(answerHello(ctx, "HELLO 1 - w-1", "10.0.0.1:5", false), {
      kind: "ok",
      identity: { name: "w-1", session: undefined, prefix: "" },
      reply: "HELLO - OK",
    });
  });
  await t.step("ignores a credential given anyway", () => {
    const outcome = answerHello(ctx, `HELLO 1 - w-1 whoever ${SECRET}`, "10.0.0.1:5", false);
    assert.equal(outcome.kind, "ok");
    assert.equal(outcome.reply, "HELLO - OK");
  });
  await t.step("refuses a malformed hello and keeps the connection", () => {
    assert.deepEqual(answerHello(ctx, "HELLO 2 - w-1", "10.0.0.1:5", false), {
      kind: "error",
      reply: "HELLO - E unsupported hello version",
    });
  });
  await t.step(
    "refuses a late hello, without echoing its session, and keeps the connection",
    () => {
      assert.deepEqual(answerHello(ctx, "HELLO 1 - w-1", "10.0.0.1:5", true), {
        kind: "error",
        reply: "HELLO - E hello must be the first line",
      });
      assert.deepEqual(answerHello(ctx, `HELLO 1 ${SESSION} w-1`, "10.0.0.1:5", true), {
        kind: "error",
        reply: "HELLO - E hello must be the first line",
      });
    },
  );
});

Deno.test("answerHello() with auth", async (t) => {
  await t.step("accepts the right secret and grants its prefix", () => {
    const ctx = authContext();
    const line = `HELLO 1 ${SESSION} w-1 billing ${SECRET}`;
    const outcome = answerHello(ctx, line, "10.0.0.1:5", false);
    assert.ok(outcome.kind === "ok");
    const { credential, ...identity } = outcome.identity;
    assert.deepEqual(identity, { name: "w-1", session: SESSION, prefix: "billing:" });
    assert.equal(outcome.reply, `HELLO ${SESSION} OK`);
    assert.equal(credential?.grant.name, "billing", "the credential it signed in with");
    const admin = answerHello(ctx, `HELLO 1 - w-2 admin ${ODD_SECRET}`, "10.0.0.1:5", false);
    assert.equal(admin.kind === "ok" && admin.identity.prefix, "", "* is any key");
  });
  await t.step("closes on a wrong secret, an unknown name or no credential, alike", () => {
    const ctx = authContext();
    const lines = [
      `HELLO 1 - w-1 billing ${ODD_SECRET}`,
      `HELLO 1 - w-1 nobody ${SECRET}`,
      "HELLO 1 - w-1",
    ];
    for (const line of lines) {
      const outcome = answerHello(ctx, line, "10.0.0.9:1234", false);
      assert.equal(outcome.kind, "close", line);
      assert.equal(outcome.reply, `HELLO - E ${AUTH_FAILED}`);
    }
    assert.equal(ctx.log.lines.length, 3, "every failure is logged");
    for (const logged of ctx.log.lines) {
      assert.match(logged, /^warn refused a hello from 10\.0\.0\.9:1234: /);
      assert.ok(!logged.includes(SECRET) && !logged.includes(ODD_SECRET), logged);
    }
    assert.match(ctx.log.lines[0], /wrong credential for billing$/);
    assert.match(ctx.log.lines[2], /no credential$/);
  });
  await t.step("does not log an unknown name: it may be a secret in the wrong field", () => {
    const ctx = authContext();
    const swapped = answerHello(ctx, `HELLO 1 - w-1 ${SECRET} billing`, "10.0.0.9:1", false);
    assert.equal(swapped.kind, "close");
    assert.deepEqual(ctx.log.lines, [
      "warn refused a hello from 10.0.0.9:1: unknown credential name",
    ]);
  });
  await t.step("delays failures from one host more each time; a success clears them", () => {
    const ctx = authContext();
    const wrong = `HELLO 1 - w billing wrong`;
    const delay = (line: string, remote: string) => {
      const outcome = answerHello(ctx, line, remote, false);
      return outcome.kind === "close" ? outcome.delayMs : -1;
    };
    assert.equal(delay(wrong, "10.0.0.1:1"), 100);
    assert.equal(delay(wrong, "10.0.0.1:2"), 200, "counted by host, not port");
    assert.equal(delay(wrong, "10.0.0.2:1"), 100, "another host has its own count");
    assert.equal(delay(wrong, "10.0.0.1:3"), 400);
    // Three in a row: until that delay has passed, nothing from the host is even checked.
    ctx.now = 100;
    const locked = answerHello(ctx, `HELLO 1 - w billing ${SECRET}`, "10.0.0.1:4", false);
    assert.deepEqual(locked, {
      kind: "close",
      reply: "HELLO - E authentication failed",
      delayMs: 300,
    });
    assert.match(ctx.log.lines.at(-1)!, /too many failures, not checked/);
    ctx.now = 400;
    assert.equal(answerHello(ctx, `HELLO 1 - w billing ${SECRET}`, "10.0.0.1:4", false).kind, "ok");
    assert.equal(delay(wrong, "10.0.0.1:5"), 100);
  });
  await t.step("refuses a hello with no credential at once, uncounted, even while locked", () => {
    const ctx = authContext();
    const wrong = `HELLO 1 - w billing wrong`;
    for (let i = 0; i < 3; i++) answerHello(ctx, wrong, "10.0.0.1:1", false);
    for (let i = 0; i < 3; i++) {
      assert.deepEqual(answerHello(ctx, "HELLO 1 - w", "10.0.0.1:2", false), {
        kind: "close",
        reply: "HELLO - E authentication failed",
        delayMs: 0,
      });
      assert.match(ctx.log.lines.at(-1)!, /: no credential$/);
    }
    const fresh = answerHello(ctx, wrong, "10.0.0.2:1", false);
    assert.equal(fresh.kind === "close" && fresh.delayMs, 100, "nothing counted for 10.0.0.2");
    answerHello(ctx, "HELLO 1 - w", "10.0.0.2:2", false);
    const next = answerHello(ctx, wrong, "10.0.0.2:3", false);
    assert.equal(
      next.kind === "close" && next.delayMs,
      200,
      "the hello without one was not counted",
    );
  });
  await t.step("closes at once, without a delay, on a malformed hello", () => {
    const ctx = authContext();
    assert.deepEqual(answerHello(ctx, `HELLO 1 - w billing ${SECRET}\u0001`, "h:1", false), {
      kind: "close",
      reply: "HELLO - E malformed credential",
      delayMs: 0,
    });
    // Logged like any refused authentication, quoting none of its fields.
    assert.deepEqual(ctx.log.lines, [
      "warn refused a hello from h:1: malformed hello (malformed credential)",
    ]);
  });
  await t.step("refuses a late hello without closing", () => {
    const ctx = authContext();
    const outcome = answerHello(ctx, `HELLO 1 - w billing ${SECRET}`, "h:1", true);
    assert.deepEqual(outcome, { kind: "error", reply: "HELLO - E hello must be the first line" });
  });
});

// ---- Fuzz ----

const CREDENTIAL_NAME = /^[A-Za-z0-9._@-]{1,64}$/;
const SECRET_TEXT = /^[\x21-\x7e]{1,256}$/;

/** The spec's rule for a valid hello, written independently of the codec. */
function validHello(line: string): boolean {
  const m = /^HELLO 1 (-|[A-Za-z0-9_-]{16,64}) ([^ ]+)(?: ([^ ]+) ([^ ]+))?$/.exec(line);
  if (m === null) return false;
  const name = m[2];
  if (/[\s\p{Cc}]/u.test(name) || !name.isWellFormed()) return false;
  if (new TextEncoder().encode(name).length > MAX_CLIENT_NAME_BYTES) return false;
  if (m[3] === undefined) return true;
  return CREDENTIAL_NAME.test(m[3]) && SECRET_TEXT.test(m[4]);
}

const ALPHABET = [
  ..."HELLO1 -0123456789abcdefABCDEF xyz.@_:/",
  " ",
  "  ",
  "\t",
  "\r",
  "\u0000",
  "\u007f",
  "é",
  "€",
  "😀",
  "\ud800",
];

/** A random mutation of a valid hello (or sometimes random text). */
function fuzzLine(random: () => number): string {
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)];
  const seeds = [
    `HELLO 1 ${SESSION} w-1 billing ${SECRET}`,
    `HELLO 1 - w-1 admin ${ODD_SECRET}`,
    `HELLO 1 - w-1`,
    `HELLO 1 ${SESSION} ${"é".repeat(64)} billing ${SECRET}`,
  ];
  if (random() < 0.05) {
    return Array.from({ length: Math.floor(random() * 40) }, () => pick(ALPHABET)).join("");
  }
  let line = pick(seeds);
  const rounds = 1 + Math.floor(random() * 3);
  for (let r = 0; r < rounds; r++) {
    const fields = line.split(" ");
    const i = Math.floor(random() * fields.length);
    const j = Math.floor(random() * fields.length);
    const at = Math.floor(random() * (line.length + 1));
    switch (Math.floor(random() * 9)) {
      case 0: // drop a field
        fields.splice(i, 1);
        line = fields.join(" ");
        break;
      case 1: // duplicate a field
        fields.splice(i, 0, fields[i]);
        line = fields.join(" ");
        break;
      case 2: // swap two fields
        [fields[i], fields[j]] = [fields[j], fields[i]];
        line = fields.join(" ");
        break;
      case 3: // insert a character
        line = line.slice(0, at) + pick(ALPHABET) + line.slice(at);
        break;
      case 4: // delete a character
        line = line.slice(0, at) + line.slice(at + 1);
        break;
      case 5: // replace a character
        line = line.slice(0, at) + pick(ALPHABET) + line.slice(at + 1);
        break;
      case 6: // truncate
        line = line.slice(0, at);
        break;
      case 7: // a random field
        fields[i] = Array.from({ length: 1 + Math.floor(random() * 4) }, () => pick(ALPHABET))
          .join("");
        line = fields.join(" ");
        break;
      default: // leave it valid-looking: nothing
        break;
    }
  }
  return line;
}

/** Every reply and log line of `outcome` must not hold either secret. */
function assertNoSecret(line: string, texts: string[]): void {
  for (const text of texts) {
    for (const secret of [SECRET, ODD_SECRET]) {
      assert.ok(!text.includes(secret), `${JSON.stringify(line)} leaked a secret: ${text}`);
    }
  }
}

function fuzzOutcome(ctx: HelloContext, line: string): HelloOutcome {
  return answerHello(ctx, line, "10.1.2.3:4444", false);
}

Deno.test("fuzz: parseHello() never throws and accepts exactly the valid hellos", () => {
  const seed = 0x5eed_1e11;
  const random = mulberry32(seed);
  const ctx: HelloContext = { clock: () => 0 };
  let valid = 0;
  for (let n = 0; n < 20_000; n++) {
    const line = fuzzLine(random);
    const where = `seed ${seed}, case ${n}: ${JSON.stringify(line)}`;
    let hello: Hello | RequestError;
    try {
      hello = parseHello(line);
    } catch (error) {
      throw new Error(`parseHello threw on ${where}`, { cause: error });
    }
    const expected = validHello(line);
    assert.equal(!isError(hello), expected, where);
    const outcome = fuzzOutcome(ctx, line);
    assert.equal(outcome.kind === "ok", expected, where);
    if (outcome.kind === "ok") {
      valid++;
      assert.equal(helloLine(hello as Hello), line, where);
    } else {
      assert.equal(outcome.kind, "error", "without auth a hello never closes");
      assertNoSecret(line, [outcome.reply]);
    }
  }
  assert.ok(valid > 100, `enough valid hellos were tried (${valid})`);
});

Deno.test("fuzz: with auth, a hello is accepted only with the right secret, which is never shown", () => {
  const seed = 0xa17_0001;
  const random = mulberry32(seed);
  const ctx = authContext();
  const right = new Map([["billing", SECRET], ["admin", ODD_SECRET]]);
  let accepted = 0;
  for (let n = 0; n < 20_000; n++) {
    const line = fuzzLine(random);
    const where = `seed ${seed}, case ${n}: ${JSON.stringify(line)}`;
    ctx.log.lines.length = 0;
    ctx.now += 61_000; // each failure on its own: the delays stay short
    const outcome = fuzzOutcome(ctx, line);
    const f = line.split(" ");
    const shouldPass = validHello(line) && f.length === 6 && right.get(f[4]) === f[5];
    assert.equal(outcome.kind === "ok", shouldPass, where);
    if (outcome.kind === "ok") accepted++;
    else {
      assert.equal(outcome.kind, "close", `with auth a refused first hello closes: ${where}`);
      assertNoSecret(line, [outcome.reply, ...ctx.log.lines]);
    }
  }
  assert.ok(accepted > 100, `enough hellos were accepted (${accepted})`);
});
