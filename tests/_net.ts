/**
 * Network helpers shared by the tests, the benchmarks and the chaos harness: free ports,
 * sleeping, and a raw line reader that reads a socket without the published client (tests
 * must see the bytes the server sends, `\r` included, not what the client makes of them).
 *
 * @module
 */

/** Resolves after `ms` milliseconds. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** `count` distinct ports that were free a moment ago on 127.0.0.1. */
export function freePorts(count: number): number[] {
  const listeners = Array.from(
    { length: count },
    () => Deno.listen({ hostname: "127.0.0.1", port: 0 }),
  );
  const ports = listeners.map((l) => l.addr.port);
  for (const l of listeners) l.close();
  return ports;
}

/** Options of {@linkcode readLines}. */
export interface ReadLinesOptions {
  /** Drop a `\r` before each `\n`. Default false: lines are given as sent. */
  stripCr?: boolean;
  /** Read buffer size in bytes. Default 64 KiB. */
  bufferBytes?: number;
}

/**
 * Reads `conn` to its end, calling `line` for each line (without its `\n`), decoding UTF-8
 * across reads. Resolves at the end of the stream or when a read fails (closed, reset).
 */
export async function readLines(
  conn: { read(buffer: Uint8Array): Promise<number | null> },
  line: (text: string) => void,
  options: ReadLinesOptions = {},
): Promise<void> {
  // ignoreBOM: a U+FEFF the server echoes at the start of the stream is part of the line.
  const decoder = new TextDecoder("utf-8", { ignoreBOM: true });
  const buf = new Uint8Array(options.bufferBytes ?? 64 * 1024);
  let pending = "";
  try {
    for (;;) {
      const n = await conn.read(buf);
      if (n === null) break;
      pending += decoder.decode(buf.subarray(0, n), { stream: true });
      let start = 0;
      for (let nl = pending.indexOf("\n"); nl >= 0; nl = pending.indexOf("\n", start)) {
        const end = options.stripCr && nl > start && pending.charCodeAt(nl - 1) === 13
          ? nl - 1
          : nl;
        line(pending.slice(start, end));
        start = nl + 1;
      }
      pending = pending.slice(start);
    }
  } catch {
    // Closed by us, or reset by the peer.
  }
}
