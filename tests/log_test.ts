/**
 * Tests of the log lines (docs/server.md, "Logs"), without a server: the text and JSON
 * formats, level filtering, structured fields, and messages that would break a line.
 */

import assert from "node:assert/strict";
import {
  formatLogLine,
  lineLogger,
  type LogFields,
  type Logger,
  type LogLevel,
  oneLine,
} from "../server/log.ts";

const TIME = Date.UTC(2026, 11, 1, 12, 34, 56, 789);
const STAMP = "2026-12-01T12:34:56.789Z";
/** What could end or split a line in a terminal, a pager or a log shipper. */
// deno-lint-ignore no-control-regex
const BREAKS = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/;

/** A logger at `level` in `format` whose lines are kept, on a fixed clock. */
function recorder(
  options: { format?: "text" | "json"; level?: LogLevel } = {},
): { log: Logger; lines: string[] } {
  const lines: string[] = [];
  return { log: lineLogger((line) => lines.push(line), { ...options, now: () => TIME }), lines };
}

function emitAll(log: Logger, fields?: LogFields): void {
  log.debug("d", fields);
  log.info("i", fields);
  log.warn("w", fields);
  log.error("e", fields);
}

Deno.test("formatLogLine() text: ISO time, a padded upper-case level, the message as is", () => {
  const line = (level: LogLevel, message: string) =>
    formatLogLine({ time: TIME, level, message }, "text");
  assert.equal(
    line("info", "127.0.0.1:7001 is active (promoted)"),
    `${STAMP} INFO  127.0.0.1:7001 is active (promoted)`,
  );
  assert.equal(line("warn", "w"), `${STAMP} WARN  w`);
  assert.equal(line("error", "e"), `${STAMP} ERROR e`);
  assert.equal(
    line("debug", "127.0.0.1:7002 > H k 5 30000"),
    `${STAMP} DEBUG 127.0.0.1:7002 > H k 5 30000`,
  );
  // The message starts at the same column whatever the level.
  const columns = (["debug", "info", "warn", "error"] as const).map((l) =>
    line(l, "m").indexOf("m")
  );
  assert.deepEqual(new Set(columns).size, 1);
  assert.equal(
    formatLogLine({ time: 0, level: "info", message: "" }, "text"),
    "1970-01-01T00:00:00.000Z INFO  ",
  );
});

Deno.test("formatLogLine() text: fields follow as key=value, quoted when needed", () => {
  const fields: LogFields = {
    event: "drop",
    remote: "[::1]:5555",
    reason: "line-too-long",
    count: 3,
    ok: true,
    mark: 18446744073709551615n,
    gone: undefined,
    spaced: "two words",
    quoted: 'say "hi"',
    empty: "",
    eq: "a=b",
  };
  assert.equal(
    formatLogLine({ time: TIME, level: "warn", message: "dropping [::1]:5555", fields }, "text"),
    `${STAMP} WARN  dropping [::1]:5555 event=drop remote=[::1]:5555 reason=line-too-long ` +
      `count=3 ok=true mark=18446744073709551615 spaced="two words" quoted="say \\"hi\\"" ` +
      `empty="" eq="a=b"`,
  );
});

Deno.test("formatLogLine() json: time, level, msg, then the fields", () => {
  const line = formatLogLine({
    time: TIME,
    level: "warn",
    message: "refused a hello from 10.0.0.1:4000: no credential",
    fields: {
      event: "auth-refused",
      remote: "10.0.0.1:4000",
      n: 2,
      mark: 2n ** 64n - 1n,
      x: undefined,
    },
  }, "json");
  assert.equal(
    line,
    `{"time":"${STAMP}","level":"warn","msg":"refused a hello from 10.0.0.1:4000: no credential",` +
      `"event":"auth-refused","remote":"10.0.0.1:4000","n":2,"mark":"18446744073709551615"}`,
  );
  const parsed = JSON.parse(line);
  assert.deepEqual(Object.keys(parsed), ["time", "level", "msg", "event", "remote", "n", "mark"]);
  assert.equal(parsed.mark, "18446744073709551615", "64-bit tokens survive as strings");
});

Deno.test("formatLogLine() fields cannot override time, level or msg", () => {
  const record = {
    time: TIME,
    level: "info" as const,
    message: "m",
    fields: { time: "x", level: "error", msg: "forged", ok: 1 },
  };
  assert.deepEqual(JSON.parse(formatLogLine(record, "json")), {
    time: STAMP,
    level: "info",
    msg: "m",
    ok: 1,
  });
  assert.equal(formatLogLine(record, "text"), `${STAMP} INFO  m ok=1`);
});

Deno.test("formatLogLine() keeps every line one line, in both formats", async (t) => {
  const nasty = [
    "a\nb",
    "a\r\nb",
    "tab\there",
    'quote " and backslash \\',
    "nul \u0000 esc \u001b[31m del \u007f c1 \u0085",
    "line sep \u2028 para sep \u2029",
    "lone surrogate \ud800 end",
    "\n",
  ];
  for (const message of nasty) {
    await t.step(JSON.stringify(message), () => {
      for (const format of ["text", "json"] as const) {
        const line = formatLogLine({
          time: TIME,
          level: "error",
          message,
          fields: { event: message, [`k${message}`]: message },
        }, format);
        assert.doesNotMatch(line, BREAKS, `${format}: ${line}`);
        if (format === "json") {
          const parsed = JSON.parse(line);
          assert.equal(parsed.msg, message, "JSON keeps the message exactly");
          assert.equal(parsed.event, message);
        }
      }
    });
  }
  await t.step("text escapes are readable", () => {
    assert.equal(oneLine("a\nb\r\tc\u0000\u2028"), "a\\nb\\r\\tc\\u0000\\u2028");
    assert.equal(oneLine('plain: "quotes" and \\ stay'), 'plain: "quotes" and \\ stay');
    assert.equal(
      formatLogLine(
        { time: TIME, level: "info", message: "x", fields: { "a key\n": "v\nw" } },
        "text",
      ),
      `${STAMP} INFO  x a_key_="v\\nw"`,
    );
  });
});

Deno.test("lineLogger() writes the levels at and above its level", async (t) => {
  const cases: [LogLevel | undefined, string[]][] = [
    ["debug", ["DEBUG d", "INFO  i", "WARN  w", "ERROR e"]],
    [undefined, ["INFO  i", "WARN  w", "ERROR e"]],
    ["info", ["INFO  i", "WARN  w", "ERROR e"]],
    ["warn", ["WARN  w", "ERROR e"]],
    ["error", ["ERROR e"]],
  ];
  for (const [level, expected] of cases) {
    await t.step(`level ${level ?? "(default)"}`, () => {
      const { log, lines } = recorder({ level });
      emitAll(log);
      assert.deepEqual(lines, expected.map((rest) => `${STAMP} ${rest}`));
    });
  }
});

Deno.test("lineLogger() json: one parseable object per event, with its fields", () => {
  const { log, lines } = recorder({ format: "json", level: "debug" });
  emitAll(log, { event: "e1", peer: "127.0.0.1:7002" });
  log.info("no fields");
  assert.equal(lines.length, 5);
  const parsed = lines.map((line) => JSON.parse(line));
  assert.deepEqual(parsed.map((p) => p.level), ["debug", "info", "warn", "error", "info"]);
  assert.deepEqual(parsed[1], {
    time: STAMP,
    level: "info",
    msg: "i",
    event: "e1",
    peer: "127.0.0.1:7002",
  });
  assert.deepEqual(parsed[4], { time: STAMP, level: "info", msg: "no fields" });
});

Deno.test("lineLogger() reads the clock for every line", () => {
  let now = TIME;
  const lines: string[] = [];
  const log = lineLogger((line) => lines.push(line), { now: () => now });
  log.info("one");
  now += 1001;
  log.info("two");
  assert.deepEqual(lines, [`${STAMP} INFO  one`, "2026-12-01T12:34:57.790Z INFO  two"]);
});

Deno.test("a Logger written without fields still satisfies the interface", () => {
  // Test doubles and embedders' loggers that take only the message keep working.
  const seen: string[] = [];
  const plain: Logger = {
    debug: (m) => seen.push(m),
    info: (m) => seen.push(m),
    warn: (m) => seen.push(m),
    error: (m) => seen.push(m),
  };
  plain.warn("dropping x", { event: "drop" });
  assert.deepEqual(seen, ["dropping x"]);
});
