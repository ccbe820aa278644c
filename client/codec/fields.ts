/**
 * The fields of protocol lines (docs/protocol.md, "Fields"): limits, keys, decimal seconds
 * and fencing tokens, parsed and formatted. Part of the codec (`@lockd/client/codec`).
 *
 * @module
 */

/** Largest fencing token: 2^64 - 1 (tokens are u64, docs/protocol.md, "Semantics"). */
export const MAX_TOKEN = 18446744073709551615n;

/** Longest key, in UTF-8 bytes (docs/protocol.md). */
export const MAX_KEY_BYTES = 250;

/** Longest line, in bytes, without its line ending (docs/protocol.md). */
export const MAX_LINE_BYTES = 4096;

/** Default `--max-lease` of the server, in milliseconds (86400 s, docs/server.md). */
export const DEFAULT_MAX_LEASE_MS = 86_400_000;

const SECONDS = /^[0-9]+(?:\.[0-9]+)?$/;
const TOKEN = /^[1-9][0-9]{0,19}$/;
// Whitespace (Unicode-aware) or a control character (C0, DEL, C1).
const BAD_KEY_CHAR = /[\s\p{Cc}]/u;

/**
 * Number of bytes of `text` in UTF-8, without allocating.
 *
 * @example Counting bytes
 * ```ts
 * import { utf8Length } from "@lockd/client/codec";
 * utf8Length("é"); // 2
 * ```
 */
export function utf8Length(text: string): number {
  let bytes = text.length;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x80) continue;
    if (c < 0x800) bytes += 1;
    else if (c < 0xd800 || c > 0xdfff) bytes += 2;
    else {
      // A surrogate pair (2 units) is 4 bytes; a lone surrogate is sent as U+FFFD (3 bytes).
      bytes += 2;
      const d = text.charCodeAt(i + 1);
      if (c <= 0xdbff && d >= 0xdc00 && d <= 0xdfff) i++;
    }
  }
  return bytes;
}

/**
 * Why `key` is not a valid key (docs/protocol.md: 1–250 bytes of UTF-8, no whitespace or control
 * characters), or `undefined` when it is valid.
 *
 * @example Checking a key
 * ```ts
 * import { keyError } from "@lockd/client/codec";
 * keyError("orders:17"); // undefined
 * keyError("a\tb"); // "key must not contain whitespace or control characters"
 * ```
 */
export function keyError(key: string): string | undefined {
  if (key.length === 0) return "missing key";
  if (
    key.length > MAX_KEY_BYTES ||
    (key.length * 3 > MAX_KEY_BYTES && utf8Length(key) > MAX_KEY_BYTES)
  ) {
    return `key must be at most ${MAX_KEY_BYTES} bytes`;
  }
  if (BAD_KEY_CHAR.test(key)) return "key must not contain whitespace or control characters";
  if (!key.isWellFormed()) return "key must be valid Unicode (no lone surrogates)";
  return undefined;
}

/**
 * Parses decimal seconds (`[0-9]+(\.[0-9]+)?`) into whole milliseconds, rounding up.
 * Returns `NaN` for text of any other form, and `Infinity` for 10^12 seconds (about 31,700
 * years) or more, which cannot be counted in milliseconds exactly.
 *
 * @example Seconds to milliseconds
 * ```ts
 * import { parseSeconds } from "@lockd/client/codec";
 * parseSeconds("0.25"); // 250
 * parseSeconds("0.0001"); // 1 (rounded up)
 * parseSeconds("1e3"); // NaN
 * ```
 */
export function parseSeconds(text: string): number {
  if (!SECONDS.test(text)) return NaN;
  const dot = text.indexOf(".");
  const whole = dot < 0 ? text : text.slice(0, dot);
  const fraction = dot < 0 ? "" : text.slice(dot + 1);
  // Up to 12 digits of seconds the milliseconds stay exact in a double (below 2^53).
  const digits = whole.replace(/^0+/, "");
  if (digits.length > 12) return Infinity;
  let ms = Number(digits || "0") * 1000;
  if (fraction.length > 0) {
    ms += Number((fraction + "00").slice(0, 3));
    if (/[1-9]/.test(fraction.slice(3))) ms += 1;
  }
  return ms;
}

/**
 * Parses a fencing token: decimal, 1 to 2^64-1, no sign, no leading zeros. Returns
 * `undefined` for anything else.
 *
 * @example Parsing a token
 * ```ts
 * import { parseToken } from "@lockd/client/codec";
 * parseToken("1042"); // 1042n
 * parseToken("01"); // undefined
 * ```
 */
export function parseToken(text: string): bigint | undefined {
  if (!TOKEN.test(text)) return undefined;
  const token = BigInt(text);
  return token <= MAX_TOKEN ? token : undefined;
}

/**
 * Formats milliseconds as the shortest decimal seconds that parse back to the same
 * milliseconds (`250` → `"0.25"`).
 *
 * @throws {RangeError} For a negative or non-finite number.
 *
 * @example Milliseconds to seconds
 * ```ts
 * import { formatSeconds } from "@lockd/client/codec";
 * formatSeconds(30000); // "30"
 * formatSeconds(1); // "0.001"
 * ```
 */
export function formatSeconds(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) throw new RangeError(`Cannot send ${ms} ms as seconds`);
  const whole = Math.floor(ms / 1000);
  const rest = Math.ceil(ms - whole * 1000);
  // String() prints every digit of a whole number below 2^53 (and needs no BigInt); BigInt
  // does above, where String() would switch to exponent form from 10^21.
  if (whole < 2 ** 53) {
    if (rest === 0) return String(whole);
    if (rest === 1000) return String(whole + 1);
    const fraction = rest < 10 ? `00${rest}` : rest < 100 ? `0${rest}` : String(rest);
    return `${whole}.${fraction.replace(/0+$/, "")}`;
  }
  if (rest === 0) return BigInt(whole).toString();
  if (rest === 1000) return (BigInt(whole) + 1n).toString();
  return `${BigInt(whole)}.${String(rest).padStart(3, "0").replace(/0+$/, "")}`;
}

/**
 * Milliseconds of plain decimal seconds in `text[from, to)`, rounding up: the fast path of
 * {@linkcode parseSeconds} for up to 12 integer digits. `NaN` for anything else (the caller
 * then takes the thorough path, which also explains the error).
 */
export function scanSeconds(text: string, from: number, to: number): number {
  let i = from;
  let ms = 0;
  let c = 0;
  while (i < to && (c = text.charCodeAt(i)) >= 48 && c <= 57) {
    ms = ms * 10 + (c - 48);
    i++;
  }
  if (i === from || i - from > 12) return NaN;
  ms *= 1000;
  if (i === to) return ms;
  if (c !== 46) return NaN; // "."
  const start = ++i;
  let fraction = 0;
  let scale = 100;
  let rest = false;
  while (i < to && (c = text.charCodeAt(i)) >= 48 && c <= 57) {
    if (scale >= 1) fraction += (c - 48) * scale;
    else if (c !== 48) rest = true;
    scale /= 10;
    i++;
  }
  if (i === start || i !== to) return NaN;
  return ms + fraction + (rest ? 1 : 0);
}

/** A token of 1 to 19 digits in `text[from, to)` (always below 2^64), else `undefined`. */
export function scanToken(text: string, from: number, to: number): bigint | undefined {
  if (to - from > 19 || to === from || text.charCodeAt(from) === 48) return undefined;
  for (let i = from; i < to; i++) {
    const c = text.charCodeAt(i);
    if (c < 48 || c > 57) return undefined;
  }
  return BigInt(text.slice(from, to));
}
