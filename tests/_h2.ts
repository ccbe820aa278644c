/**
 * A bare HTTP/2 client for one HEAD request over TLS, reporting the frames of its stream as
 * they arrived. `fetch` and `node:http2` here both forgive a server that sends a body on a
 * HEAD answer; curl (nghttp2) does not ("stream 1 was not closed cleanly: PROTOCOL_ERROR"),
 * and neither does this: it shows exactly what went over the wire.
 *
 * @module
 */

/** One frame of the request's stream (RFC 9113 §4.1). */
export interface H2Frame {
  /** `DATA`, `HEADERS`, `RST_STREAM`, ... (`0xN` for a type not named here). */
  type: string;
  /** Whether END_STREAM is set (DATA and HEADERS). */
  endStream: boolean;
  /** The payload's length in bytes. */
  length: number;
}

/** What {@linkcode h2Head} saw. */
export interface H2HeadResult {
  /** The protocol that ALPN chose (`"h2"` when the server speaks HTTP/2). */
  alpn: string | null;
  /** The frames of stream 1, in order, up to END_STREAM, RST_STREAM or GOAWAY. */
  frames: H2Frame[];
}

const TYPES = ["DATA", "HEADERS", "PRIORITY", "RST_STREAM", "SETTINGS", "PUSH_PROMISE", "PING"]
  .concat(["GOAWAY", "WINDOW_UPDATE", "CONTINUATION"]);

/** An HPACK integer with an `bits`-bit prefix whose high bits are `first` (RFC 7541 §5.1). */
function hpackInt(value: number, bits: number, first: number): number[] {
  const max = (1 << bits) - 1;
  if (value < max) return [first | value];
  const out = [first | max];
  for (value -= max; value >= 128; value >>= 7) out.push((value & 127) | 128);
  return [...out, value];
}

/** A string literal, without Huffman coding. */
function hpackString(text: string): number[] {
  const bytes = [...new TextEncoder().encode(text)];
  return [...hpackInt(bytes.length, 7, 0), ...bytes];
}

function frame(type: number, flags: number, stream: number, payload: number[]): Uint8Array {
  const n = payload.length;
  const head = [n >> 16, (n >> 8) & 255, n & 255, type, flags];
  return new Uint8Array([...head, ...[24, 16, 8, 0].map((s) => (stream >> s) & 255), ...payload]);
}

/**
 * Sends `HEAD path` with `headers` over HTTP/2 to `127.0.0.1:port` (trusting `caPem`) and
 * collects the frames of its stream.
 *
 * @throws {Error} If the stream does not end within 10 seconds.
 */
export async function h2Head(
  port: number,
  options: { path: string; caPem: string; headers?: Record<string, string> },
): Promise<H2HeadResult> {
  const conn = await Deno.connectTls({
    hostname: "127.0.0.1",
    port,
    caCerts: [options.caPem],
    alpnProtocols: ["h2"],
  });
  const timer = setTimeout(() => conn.close(), 10_000);
  try {
    const { alpnProtocol } = await conn.handshake();
    const block = [
      ...hpackInt(2, 4, 0), // :method, literal without indexing
      ...hpackString("HEAD"),
      0x87, // :scheme https
      ...hpackInt(4, 4, 0), // :path
      ...hpackString(options.path),
      ...hpackInt(1, 4, 0), // :authority
      ...hpackString(`127.0.0.1:${port}`),
      ...Object.entries(options.headers ?? {}).flatMap(([name, value]) => [
        0,
        ...hpackString(name.toLowerCase()),
        ...hpackString(value),
      ]),
    ];
    await conn.write(new TextEncoder().encode("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"));
    await conn.write(frame(4, 0, 0, [])); // SETTINGS
    await conn.write(frame(1, 0x5, 1, block)); // HEADERS, END_STREAM | END_HEADERS
    const frames: H2Frame[] = [];
    let buffered = new Uint8Array(0);
    const chunk = new Uint8Array(16384);
    for (;;) {
      while (buffered.length >= 9) {
        const length = (buffered[0] << 16) | (buffered[1] << 8) | buffered[2];
        if (buffered.length < 9 + length) break;
        const [type, flags] = [buffered[3], buffered[4]];
        const stream = new DataView(buffered.buffer, buffered.byteOffset + 5, 4).getUint32(0) &
          0x7fffffff;
        buffered = buffered.slice(9 + length);
        if (type === 4 && (flags & 1) === 0) await conn.write(frame(4, 1, 0, [])); // SETTINGS ACK
        const name = TYPES[type] ?? `0x${type.toString(16)}`;
        if (name === "GOAWAY") frames.push({ type: name, endStream: false, length });
        if (stream !== 1) {
          if (name === "GOAWAY") return { alpn: alpnProtocol, frames };
          continue;
        }
        const endStream = (type === 0 || type === 1) && (flags & 1) === 1;
        frames.push({ type: name, endStream, length });
        if (endStream || name === "RST_STREAM") return { alpn: alpnProtocol, frames };
      }
      const n = await conn.read(chunk);
      if (n === null) throw new Error(`the connection closed first: ${JSON.stringify(frames)}`);
      buffered = new Uint8Array([...buffered, ...chunk.subarray(0, n)]);
    }
  } catch (error) {
    if (error instanceof Deno.errors.BadResource) {
      throw new Error("no end of the HEAD stream within 10 seconds");
    }
    throw error;
  } finally {
    clearTimeout(timer);
    try {
      conn.close();
    } catch {
      // Closed by the timer.
    }
  }
}
