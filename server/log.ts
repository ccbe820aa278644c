/**
 * The server's log (docs/server.md, "Logs"): one line per event on stderr, each with a
 * timestamp (ISO 8601, UTC, ms) and a level, never a secret. Two formats:
 *
 * - `text` (the default), for people and grep:
 *   `2026-12-01T12:34:56.789Z INFO  127.0.0.1:7001 is active (promoted) event=role role=active`
 * - `json`, one object per line for log shippers:
 *   `{"time":"2026-12-01T12:34:56.789Z","level":"info","msg":"...","event":"role",...}`
 *
 * Control characters (a line break in a message) are escaped, so a log line is always one
 * line. The ready line on stdout is not a log line (see `main.ts`).
 *
 * @module
 */

/** How much is logged: a level and every level above it. */
export type LogLevel = "debug" | "info" | "warn" | "error";

/** Every {@linkcode LogLevel}, from the most verbose. */
export const LOG_LEVELS: readonly LogLevel[] = ["debug", "info", "warn", "error"];

/** How log lines are written: `text` for people, `json` for machines. */
export type LogFormat = "text" | "json";

/** Every {@linkcode LogFormat}. */
export const LOG_FORMATS: readonly LogFormat[] = ["text", "json"];

/** A structured field's value; `undefined` fields are left out. */
export type LogValue = string | number | boolean | bigint | undefined;

/**
 * Structured fields of one event (`event`, `peer`, `remote`, `key`, `reason`...): keys
 * of JSON lines, `key=value` pairs after the message of text lines. `time`, `level` and
 * `msg` are the line's own and cannot be overridden.
 */
export type LogFields = Readonly<Record<string, LogValue>>;

/** Where the server's components report events. */
export interface Logger {
  /** Details for debugging (peer traffic with `LOCKD_TRACE=1`, normal closes). */
  debug(message: string, fields?: LogFields): void;
  /** Normal events: role changes, start, shutdown, reloads. */
  info(message: string, fields?: LogFields): void;
  /** Something went wrong but the server carries on (a dropped connection, a refused peer). */
  warn(message: string, fields?: LogFields): void;
  /** Something the operator must act on (tokens cannot be saved, a fatal stop). */
  error(message: string, fields?: LogFields): void;
}

/** One event, before it is formatted. */
export interface LogRecord {
  /** When, in ms since the epoch. */
  time: number;
  /** How severe. */
  level: LogLevel;
  /** What happened, in words. */
  message: string;
  /** Structured fields. */
  fields?: LogFields;
}

const RESERVED = new Set(["time", "level", "msg"]);
// C0 and C1 controls, DEL, and the Unicode line and paragraph separators.
// deno-lint-ignore no-control-regex
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g;
// JSON.stringify escapes C0 controls itself, but leaves these raw.
const UNSAFE_IN_JSON = /[\u007f-\u009f\u2028\u2029]/g;
/** A field value written bare in text lines; anything else is quoted. */
const BARE = /^[A-Za-z0-9_.,:;\/@+*#%~^[\]()-]+$/;

function escapeChar(char: string): string {
  switch (char) {
    case "\n":
      return "\\n";
    case "\r":
      return "\\r";
    case "\t":
      return "\\t";
    default:
      return `\\u${char.charCodeAt(0).toString(16).padStart(4, "0")}`;
  }
}

/** `text` with every control character and line separator escaped: one line, always. */
export function oneLine(text: string): string {
  return text.replace(UNSAFE, escapeChar);
}

function json(value: unknown): string {
  return JSON.stringify(value).replace(UNSAFE_IN_JSON, escapeChar);
}

/** A field value as JSON: bigints as decimal strings (64-bit tokens exceed doubles). */
function jsonValue(value: Exclude<LogValue, undefined>): string | number | boolean {
  if (typeof value === "bigint") return value.toString();
  if (typeof value === "number" && !Number.isFinite(value)) return String(value);
  return value;
}

function textValue(value: Exclude<LogValue, undefined>): string {
  const text = String(value);
  return BARE.test(text) ? text : json(text);
}

/**
 * Formats one record as one log line (without the line ending).
 *
 * @example A text and a JSON line
 * ```ts
 * import { formatLogLine } from "./log.ts";
 * const record = { time: 0, level: "warn" as const, message: "hi", fields: { event: "x" } };
 * formatLogLine(record, "text"); // '1970-01-01T00:00:00.000Z WARN  hi event=x'
 * formatLogLine(record, "json"); // '{"time":"1970-01-01T00:00:00.000Z","level":"warn","msg":"hi","event":"x"}'
 * ```
 */
export function formatLogLine(record: LogRecord, format: LogFormat): string {
  const time = new Date(record.time).toISOString();
  const fields = Object.entries(record.fields ?? {}).filter(
    (entry): entry is [string, Exclude<LogValue, undefined>] =>
      entry[1] !== undefined && !RESERVED.has(entry[0]),
  );
  if (format === "json") {
    const object: Record<string, string | number | boolean> = {
      time,
      level: record.level,
      msg: record.message,
    };
    for (const [key, value] of fields) object[key] = jsonValue(value);
    return json(object);
  }
  let line = `${time} ${record.level.toUpperCase().padEnd(5)} ${oneLine(record.message)}`;
  for (const [key, value] of fields) {
    line += ` ${key.replace(/[^A-Za-z0-9_.-]/g, "_") || "_"}=${textValue(value)}`;
  }
  return line;
}

/** Options of {@linkcode lineLogger} and {@linkcode stderrLogger}. */
export interface LineLoggerOptions {
  /** Line format. Default `text`. */
  format?: LogFormat;
  /** The least severe level written. Default `info`. */
  level?: LogLevel;
  /** The wall clock, ms since the epoch. Default `Date.now`. */
  now?: () => number;
}

/** A logger that formats each event it keeps into one line and hands it to `write`. */
export function lineLogger(write: (line: string) => void, options: LineLoggerOptions = {}): Logger {
  const format = options.format ?? "text";
  const least = LOG_LEVELS.indexOf(options.level ?? "info");
  const now = options.now ?? Date.now;
  const at = (level: LogLevel) =>
    LOG_LEVELS.indexOf(level) < least
      ? () => {}
      : (message: string, fields?: LogFields) =>
        write(formatLogLine({ time: now(), level, message, fields }, format));
  return { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
}

/** Options of {@linkcode stderrLogger}. */
export type StderrLoggerOptions = LineLoggerOptions;

const encoder = new TextEncoder();

/** Writes `line` and a line break on stderr, whole (a logger never throws). */
function writeStderr(line: string): void {
  const bytes = encoder.encode(line + "\n");
  try {
    for (let done = 0; done < bytes.length;) done += Deno.stderr.writeSync(bytes.subarray(done));
  } catch {
    // stderr is closed: there is nowhere left to report to.
  }
}

/** A logger writing lines on stderr (see {@linkcode formatLogLine}). */
export function stderrLogger(options: StderrLoggerOptions = {}): Logger {
  return lineLogger(writeStderr, options);
}

/** A logger that drops everything (tests, embedders that log elsewhere). */
export const silentLogger: Logger = {
  debug: () => {},
  info: () => {},
  warn: () => {},
  error: () => {},
};
