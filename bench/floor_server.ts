/**
 * The Deno floor: a line server that answers lockd's acquire and release requests without
 * any lock logic, so that `deno task bench` can show what Deno's per-request I/O costs on
 * its own. Every `A <key> ...` line is answered `A <key> A <n>` (a counter as the token),
 * every `R <key> ...` line `R <key> R`; nothing is stored, checked, queued or timed.
 *
 * Same I/O pattern as lockd's server: one 16 KiB read buffer per connection, Nagle off,
 * complete lines answered from each chunk with a single write. Lines are handled as bytes
 * (no text decoding), so this is a lower bound for any Deno server speaking the protocol.
 *
 * Usage: `deno run -A bench/floor_server.ts [--port N]`; prints
 * `listening on 127.0.0.1:PORT as floor` once it accepts connections, and stops on SIGTERM.
 *
 * @module
 */

const READ_SIZE = 16 * 1024;
const SPACE = 32, NEWLINE = 10, RETURN = 13;
const GRANTED = new TextEncoder().encode(" A ");
const RELEASED = new TextEncoder().encode(" R\n");

let tokens = 0;

/** Writes the replies to the complete lines of `input` into `out`; returns their length. */
export function answer(input: Uint8Array, out: Uint8Array): number {
  let at = 0, start = 0;
  for (;;) {
    const nl = input.indexOf(NEWLINE, start);
    if (nl < 0) return at;
    let end = nl;
    if (end > start && input[end - 1] === RETURN) end--;
    // "<op> <key> ...": the key ends at the next space (or the end of the line).
    const keyEnd = end > start + 2 ? input.indexOf(SPACE, start + 2) : -1;
    const fieldEnd = keyEnd < 0 || keyEnd > end ? end : keyEnd;
    const op = input[start];
    if (end > start && (op === 65 || op === 82)) { // "A" or "R"
      out.set(input.subarray(start, fieldEnd), at);
      at += fieldEnd - start;
      if (op === 65) {
        out.set(GRANTED, at);
        at += GRANTED.length;
        at += writeDecimal(out, at, ++tokens);
        out[at++] = NEWLINE;
      } else {
        out.set(RELEASED, at);
        at += RELEASED.length;
      }
    }
    start = nl + 1;
  }
}

/** Writes `n` (a positive integer) in decimal at `at`; returns the number of digits. */
function writeDecimal(out: Uint8Array, at: number, n: number): number {
  let digits = 1;
  for (let x = n; x >= 10; x = Math.floor(x / 10)) digits++;
  for (let i = at + digits - 1; i >= at; i--) {
    out[i] = 48 + (n % 10);
    n = Math.floor(n / 10);
  }
  return digits;
}

async function serve(conn: Deno.TcpConn): Promise<void> {
  conn.setNoDelay(true);
  const buf = new Uint8Array(READ_SIZE);
  // A reply is its request's first two fields plus at most 19 bytes: even a chunk of
  // two-byte lines ("A\n") fits 12 times the read size.
  const out = new Uint8Array(12 * READ_SIZE);
  let kept = 0; // bytes of an unfinished line at the start of buf
  try {
    for (;;) {
      const n = await conn.read(kept === 0 ? buf : buf.subarray(kept));
      if (n === null) break;
      const end = kept + n;
      const last = buf.lastIndexOf(NEWLINE, end - 1);
      if (last < 0) {
        kept = end === READ_SIZE ? 0 : end; // a line longer than the buffer is dropped
        continue;
      }
      const length = answer(buf.subarray(0, last + 1), out);
      kept = end - last - 1;
      if (kept > 0) buf.copyWithin(0, last + 1, end);
      let written = 0;
      while (written < length) written += await conn.write(out.subarray(written, length));
    }
  } catch {
    // Reset by the peer.
  } finally {
    try {
      conn.close();
    } catch {
      // Already closed.
    }
  }
}

if (import.meta.main) {
  const at = Deno.args.indexOf("--port");
  const port = at >= 0 ? Number(Deno.args[at + 1]) : 0;
  const listener = Deno.listen({ hostname: "127.0.0.1", port });
  Deno.addSignalListener("SIGTERM", () => Deno.exit(0));
  console.log(`listening on 127.0.0.1:${listener.addr.port} as floor`);
  for await (const conn of listener) serve(conn);
}
