/**
 * Black-box tests of the server's limits and robustness (docs/protocol.md, docs/server.md): line length,
 * `--max-connections`, `--max-waiters`, clients that never read, bad bytes, huge numbers, long leases.
 */

import assert from "node:assert/strict";
import { setTimeout as delay } from "node:timers/promises";
import { onEachTransport, parseGrant, type ServerProcess } from "./_helpers.ts";

// ---------------------------------------------------------------------------------------
// Local helpers

const encoder = new TextEncoder();

/** Asserts that `reply` has status `E` (echo fields and message are the server's). */
function assertE(reply: string | null, what: string): void {
  assert.ok(
    reply !== null && reply.split(" ")[2] === "E" && reply.split(" ").length >= 4,
    `expected an E reply for ${what}, got ${JSON.stringify(reply)?.slice(0, 200)}`,
  );
}

/** Resident memory of a process, in KiB (Linux). */
function rssKiB(pid: number): number {
  const status = Deno.readTextFileSync(`/proc/${pid}/status`);
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? NaN);
}

/** CPU time (user + system) of a process, in clock ticks (Linux, usually 10 ms). */
function cpuTicks(pid: number): number {
  const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return Number(fields[11]) + Number(fields[12]);
}

/** A valid acquire of `key` exactly `bytes` long (wait padded with zeros: still `0`). */
function acquireOfLength(key: string, bytes: number): string {
  const head = `A ${key} 30 `;
  return head + "0".repeat(bytes - encoder.encode(head).length);
}

/** A write running in the background on a raw connection. */
interface BackgroundWrite {
  /** Bytes written so far. */
  written: number;
  /** Why it failed, if it did. */
  error: unknown;
  /** Settles (never rejects) when it finished or failed. */
  done: Promise<void>;
}

/** Writes `data` on a raw connection in the background, tracking progress. */
function backgroundWrite(conn: Deno.Conn, data: Uint8Array): BackgroundWrite {
  const state: BackgroundWrite = { written: 0, error: undefined, done: Promise.resolve() };
  state.done = (async () => {
    try {
      while (state.written < data.length) {
        state.written += await conn.write(data.subarray(state.written));
      }
    } catch (error) {
      state.error = error;
    }
  })();
  return state;
}

/** Waits until a background write has finished, failed, or made no progress for 150 ms. */
async function untilStalled(state: BackgroundWrite, total: number): Promise<void> {
  const until = Date.now() + 10_000;
  let last = -1;
  while (state.written !== last && state.error === undefined && state.written < total) {
    if (Date.now() > until) throw new Error("the writer neither stalled nor finished");
    last = state.written;
    await delay(150);
  }
}

// ---------------------------------------------------------------------------------------

/**
 * One connection sends 150,000 requests for `key` and reads their replies, then stops
 * reading and pipelines ~78 MB more: the server must stop reading it (or drop it).
 */
async function stopsReadingAfterTraffic(server: ServerProcess, key: string): Promise<void> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.port });
  let writing: BackgroundWrite | undefined;
  try {
    // Phase 1: 150,000 requests whose replies are read normally.
    const batch = encoder.encode(
      Array.from({ length: 10_000 }, (_, i) => `R ${key} ${i + 1}\n`).join(""),
    );
    const buf = new Uint8Array(1 << 20);
    for (let round = 0; round < 15; round++) {
      writing = backgroundWrite(conn, batch);
      let lines = 0;
      while (lines < 10_000) {
        const n = await conn.read(buf);
        if (n === null) throw new Error("the server closed the connection");
        for (let i = 0; i < n; i++) if (buf[i] === 10) lines++;
      }
      await writing.done;
      if (writing.error !== undefined) throw writing.error;
    }
    // Phase 2: the same client stops reading and pipelines ~78 MB more: more than the
    // kernel's socket buffers can hold (up to 32 MB each way on some hosts).
    const rssBefore = rssKiB(server.child.pid);
    const payload = encoder.encode(
      Array.from({ length: 300_000 }, (_, i) => `R ${key} ${i + 1}\n`).join(""),
    );
    writing = backgroundWrite(conn, payload);
    await untilStalled(writing, payload.length);
    const growthKiB = rssKiB(server.child.pid) - rssBefore;
    assert.ok(
      writing.error !== undefined || writing.written < payload.length,
      `the server read all ${payload.length} bytes from a client that no longer reads ` +
        `(its memory grew by ${growthKiB} KiB)`,
    );
  } finally {
    conn.close();
    await writing?.done;
  }
}

// Every test runs on both transports of the port (docs/server.md, "The epoll transport").
onEachTransport((test, serve) => {
  test("server answers lines over 4096 bytes with line too long and closes", async (t) => {
    await serve({}, async (_server, clients) => {
      const bystander = await clients.connect();
      const bystanderToken = parseGrant(await bystander.request("A by:1 30 0"), "by:1");

      await t.step("does serve a line of exactly 4096 bytes", async () => {
        const c = await clients.connect();
        const line = acquireOfLength("len:4096", 4096);
        assert.equal(encoder.encode(line).length, 4096);
        parseGrant(await c.request(line), "len:4096");
        // With CRLF: 4096 bytes plus the line ending.
        const crlf = acquireOfLength("len:4096crlf", 4096);
        await c.write(crlf + "\r\n");
        parseGrant(await c.readLine(), "len:4096crlf");
        // Sent in pieces, the line ending in a later write (4096 bytes + CR wait in the buffer).
        const split = acquireOfLength("len:4096split", 4096);
        await c.write(split.slice(0, 3000));
        await c.write(split.slice(3000) + "\r");
        assert.ok(await c.silentFor(50), "an incomplete line was answered");
        await c.write("\n");
        parseGrant(await c.readLine(), "len:4096split");
        // 4096 bytes of multi-byte text is not too long either (an E for the key, but open).
        const multi = "A " + "é".repeat(2047);
        assert.equal(encoder.encode(multi).length, 4096);
        assertE(await c.request(multi), "a 4096-byte line with a 4094-byte key");
        assert.equal(await c.request("R still:open 1"), "R still:open N");
      });

      await t.step("does close on a 4097-byte line, while others keep working", async () => {
        const c = await clients.connect();
        const line = acquireOfLength("len:4097", 4097);
        assert.equal(await c.request(line), "- - E line too long");
        assert.deepEqual(await c.closedByPeer(2000), [], "the connection stayed open");
        assert.equal(await bystander.request(`X by:1 ${bystanderToken} 30`), "X by:1 X");
      });

      await t.step("does close on a 4097-byte line ending in CRLF", async () => {
        const c = await clients.connect();
        await c.write(acquireOfLength("len:4097crlf", 4097) + "\r\n");
        assert.deepEqual(await c.closedByPeer(2000), ["- - E line too long"]);
      });

      await t.step("does count bytes, not characters (4098 bytes, 2050 chars)", async () => {
        const c = await clients.connect();
        const line = "X " + "é".repeat(2048);
        assert.equal(encoder.encode(line).length, 4098);
        await c.send(line);
        assert.deepEqual(await c.closedByPeer(2000), ["- - E line too long"]);
      });

      await t.step("does close on 5000 bytes without a newline", async () => {
        const c = await clients.connect();
        await c.write("A " + "x".repeat(4998));
        assert.deepEqual(await c.closedByPeer(2000), ["- - E line too long"]);
      });

      await t.step("does close on 1 MB without a newline (answered first)", async () => {
        const c = await clients.connect();
        // The server may close before it has read it all: the write may fail, that is fine.
        await c.write("A " + "x".repeat(1 << 20)).catch(() => {});
        assert.deepEqual(await c.closedByPeer(2000), ["- - E line too long"]);
      });

      await t.step("does answer the lines before the long one, and none after", async () => {
        const c = await clients.connect();
        await c.write(`R pre:1 1\n${"R " + "y".repeat(5000)}\nR post:1 1\n`);
        assert.deepEqual(await c.closedByPeer(2000), ["R pre:1 N", "- - E line too long"]);
      });

      await t.step("does keep serving the bystander and new connections", async () => {
        assert.equal(await bystander.request(`R by:1 ${bystanderToken}`), "R by:1 R");
        const fresh = await clients.connect();
        parseGrant(await fresh.request("A by:1 30 0.001"), "by:1");
      });

      await t.step("does count each line too long as a limits rejection", async () => {
        const c = await clients.connect();
        const reply = (await c.request("S -"))!;
        assert.ok(reply.startsWith("S - S "), reply);
        const status = JSON.parse(reply.slice("S - S ".length));
        assert.equal(status.counts.rejections.limits, 6, "six connections sent a line too long");
      });
    });
  });

  test("server refuses connections beyond --max-connections", async () => {
    await serve({ args: ["--max-connections", "3"] }, async (_server, clients) => {
      const first = await clients.connectAccepted();
      const second = await clients.connectAccepted();
      const third = await clients.connectAccepted();
      const token = parseGrant(await first.request("A mc:1 30 0"), "mc:1");

      const fourth = await clients.connect();
      assert.deepEqual(await fourth.closedByPeer(2000), ["- - E too many connections"]);

      await first.close();
      const fifth = await clients.connectAccepted(); // a slot is free again
      assert.equal(await fifth.request("A mc:1 30 0.01"), "A mc:1 T"); // still held
      assert.equal(await second.request(`R mc:1 ${token}`), "R mc:1 R");
      parseGrant(await third.request("A mc:1 30 0"), "mc:1");

      const sixth = await clients.connect();
      assert.deepEqual(await sixth.closedByPeer(2000), ["- - E too many connections"]);
    });
  });

  test("server refuses acquires that would queue beyond LOCKD_MAX_WAITERS", async () => {
    await serve({ env: { LOCKD_MAX_WAITERS: "2" } }, async (_server, clients) => {
      const [a, b, c, d] = await Promise.all([1, 2, 3, 4].map(() => clients.connect()));
      const token = parseGrant(await a.request("A mw:1 30 0"), "mw:1");
      for (const waiter of [b, c]) {
        await waiter.send("A mw:1 30 0");
        assert.equal(await waiter.request("R mw:probe 1"), "R mw:probe N"); // the acquire is queued
      }
      assert.equal(
        await d.request("A mw:1 30 0"),
        "A mw:1 E too many queued acquires on this server",
      );
      parseGrant(await d.request("A mw:2 30 0"), "mw:2"); // a free key is granted all the same
      assert.equal(await a.request(`R mw:1 ${token}`), "R mw:1 R");
      parseGrant(await b.readLine(), "mw:1"); // the queue went on in order
      assert.equal(await d.request("A mw:1 30 0.2"), "A mw:1 T"); // room again: it queued
    });
  });

  test("server does not let a client that never reads stall others", async () => {
    await serve({ args: ["--max-connections", "2"] }, async (server, clients) => {
      const other = await clients.connectAccepted();
      parseGrant(await other.request("A slow:other 30 0"), "slow:other");
      const rssBefore = rssKiB(server.child.pid);

      // ~100k pipelined requests (~25 MB), replies never read.
      const key = "s".repeat(240);
      const payload = encoder.encode(
        Array.from({ length: 100_000 }, (_, i) => `R ${key}${i % 10} 1\n`).join(""),
      );
      const slow = await Deno.connect({ hostname: "127.0.0.1", port: server.port });
      const writing = backgroundWrite(slow, payload);
      try {
        await untilStalled(writing, payload.length);
        // Either the server stopped reading (the write stalls) or it dropped the connection.
        assert.ok(
          writing.error !== undefined || writing.written < payload.length,
          "the server read all 25 MB from a client that never reads its replies",
        );
        const start = performance.now();
        parseGrant(await other.request("A slow:2 30 0", 1000), "slow:2");
        const took = performance.now() - start;
        assert.ok(took < 500, `another client waited ${took} ms`);
        const growthKiB = rssKiB(server.child.pid) - rssBefore;
        assert.ok(growthKiB < 64 * 1024, `server memory grew by ${growthKiB} KiB`);
      } finally {
        slow.close();
        await writing.done;
      }
      // Its slot is freed once it is gone (max 2: `other` is still open), and all is served.
      const next = await clients.connectAccepted();
      parseGrant(await next.request("A slow:3 30 0"), "slow:3");
      parseGrant(await other.request("A slow:4 30 0"), "slow:4");
    });
  });

  test("server keeps back-pressure on a client that stops reading", async (t) => {
    await serve({}, async (server) => {
      await t.step("does so after ASCII replies", async () => {
        await stopsReadingAfterTraffic(server, "s".repeat(249));
      });
      // An 83-character key of three-byte characters: each reply is 255 bytes, 89 UTF-16 units.
      await t.step("does so after multi-byte replies", async () => {
        await stopsReadingAfterTraffic(server, "€".repeat(83));
      });
    });
  });

  test("server survives bad bytes and huge numbers", async (t) => {
    await serve({}, async (_server, clients) => {
      const c = await clients.connect();
      const bystander = await clients.connect();
      const bystanderToken = parseGrant(await bystander.request("A bad:by 30 0"), "bad:by");

      await t.step("does answer invalid UTF-8 with E and keep the connection", async () => {
        const bad: number[][] = [
          [0xff],
          [0xfe, 0xff],
          [0x41, 0x20, 0x6b, 0xff, 0x20, 0x33, 0x30, 0x20, 0x35], // "A k\xff 30 5"
          [0x41, 0x20, 0xc0, 0xaf, 0x20, 0x31, 0x20, 0x30], // overlong "/"
          [0x41, 0x20, 0xed, 0xa0, 0x80, 0x20, 0x31, 0x20, 0x30], // encoded surrogate
          [0x41, 0x20, 0xf4, 0x90, 0x80, 0x80, 0x20, 0x31, 0x20, 0x30], // above U+10FFFF
          [0x41, 0x20, 0x6b, 0xc3], // truncated sequence at the end of the line
          [0x80, 0x0d], // lone continuation byte, then CR
        ];
        for (const bytes of bad) {
          await c.write(new Uint8Array([...bytes, 0x0a]));
          assertE(await c.readLine(2000), `bytes ${bytes}`);
        }
        assert.equal(await c.request("R utf8:ok 1"), "R utf8:ok N");
      });

      await t.step("does answer valid lines around an invalid one in the same write", async () => {
        const data = new Uint8Array([
          ...encoder.encode("A utf8:1 30 0\n"),
          0xff,
          0xfe,
          0x0a,
          ...encoder.encode("A utf8:2 30 0\r\n"),
        ]);
        await c.write(data);
        const replies = await c.readLines(3, 2000);
        const errors = replies.filter((r) => r.split(" ")[2] === "E");
        assert.equal(errors.length, 1, `replies: ${replies}`);
        parseGrant(replies.find((r) => r.startsWith("A utf8:1 ")) ?? null, "utf8:1");
        parseGrant(replies.find((r) => r.startsWith("A utf8:2 ")) ?? null, "utf8:2");
      });

      await t.step("does answer NUL bytes with E", async () => {
        for (
          const line of [
            "\0",
            "\0 k 30 5",
            "A \0 30 5",
            "A nul\0 30 5",
            "A nul 30\0 5",
            "A nul 30 5\0",
            "R nul 1\0",
            "X nul 1 1\0",
            "\0".repeat(4096),
          ]
        ) {
          assertE(await c.request(line, 2000), JSON.stringify(line).slice(0, 40));
        }
        // None of them took the key.
        const token = parseGrant(await bystander.request("A nul 30 0.001"), "nul");
        assert.equal(await bystander.request(`R nul ${token}`), "R nul R");
      });

      await t.step("does handle huge numbers without crashing", async () => {
        const nines = "9".repeat(1000);
        assertE(await c.request("A huge:1 99999999999999999999999999 5"), "a huge lease");
        assertE(await c.request(`A huge:1 ${nines} 5`), "a 1000-digit lease");
        assertE(await c.request(`A huge:1 ${nines}.${nines} 5`), "a 2001-char lease");
        assertE(await c.request(`R huge:1 ${nines}`), "a 1000-digit token");
        assertE(await c.request("R huge:1 99999999999999999999"), "a 20-digit token above 2^64-1");
        assertE(await c.request(`X huge:1 1 ${nines}`), "a 1000-digit extend lease");
        assert.equal(await c.request("X huge:1 18446744073709551615 1"), "X huge:1 N");
        // A huge wait only bounds queueing: a free key is granted at once.
        const token = parseGrant(await c.request(`A huge:2 30 ${nines}`), "huge:2");
        // Queued with a huge wait, then granted when released.
        await bystander.send(`A huge:2 30 ${nines}.5`);
        assert.equal(await bystander.request("R huge:probe 1"), "R huge:probe N");
        assert.equal(await c.request(`R huge:2 ${token}`), "R huge:2 R");
        const next = parseGrant(await bystander.readLine(2000), "huge:2");
        assert.ok(next > token);
        // A tiny lease rounds up to 1 ms: valid.
        parseGrant(await c.request("A huge:3 0.000000000000000000000001 0"), "huge:3");
      });

      await t.step("does keep serving everyone afterwards", async () => {
        assert.equal(await c.request("R after:bad 1"), "R after:bad N");
        assert.equal(await bystander.request(`X bad:by ${bystanderToken} 30`), "X bad:by X");
        const fresh = await clients.connect();
        parseGrant(await fresh.request("A after:bad 30 0"), "after:bad");
      });
    });
  });

  test("server treats a byte-order mark as part of the line wherever it falls", async (t) => {
    await serve({}, async (_server, clients) => {
      const c = await clients.connect();
      const other = await clients.connect();

      await t.step("does answer a BOM-prefixed line that starts a read with E", async () => {
        // Written alone, so the line starts the server's read chunk.
        await c.write("\uFEFFA bom:1 30 0\n");
        assert.equal(await c.readLine(), "\uFEFFA bom:1 E unknown op");
        // Bad input changes no state: bom:1 is free.
        const token = parseGrant(await other.request("A bom:1 30 0.001"), "bom:1");
        assert.equal(await other.request(`R bom:1 ${token}`), "R bom:1 R");
      });

      await t.step("does answer a BOM-prefixed line inside a read with E", async () => {
        await c.write("R bom:probe 1\n\uFEFFA bom:2 30 0\n");
        const replies = (await c.readLines(2)).sort();
        assert.deepEqual(replies, ["R bom:probe N", "\uFEFFA bom:2 E unknown op"].sort());
        const token = parseGrant(await other.request("A bom:2 30 0.001"), "bom:2");
        assert.equal(await other.request(`R bom:2 ${token}`), "R bom:2 R");
      });
    });
  });

  test("server stays idle while it holds a lease longer than 24.8 days", async () => {
    // 3,000,000 s is above 2^31-1 ms, the longest delay setTimeout can take.
    await serve({ args: ["--max-lease", "3000000"] }, async (server, clients) => {
      const c = await clients.connect();
      const other = await clients.connect();
      const token = parseGrant(await c.request("A long:1 3000000 0"), "long:1");
      const before = cpuTicks(server.child.pid);
      await delay(300);
      const used = cpuTicks(server.child.pid) - before;
      const warnings = server.stderr().match(/TimeoutOverflowWarning/g)?.length ?? 0;
      assert.equal(
        warnings,
        0,
        `the idle server logged ${warnings} TimeoutOverflowWarning lines in 300 ms`,
      );
      assert.ok(used <= 3, `the idle server used ${used} CPU ticks in 300 ms`);
      // And the lease is of course still held.
      assert.equal(await other.request("A long:1 30 0.01"), "A long:1 T");
      assert.equal(await c.request(`R long:1 ${token}`), "R long:1 R");
    });
  });

  test("server bounds the replies it holds behind a queued acquire", async () => {
    await serve({}, async (server, clients) => {
      const holder = await clients.connect();
      parseGrant(await holder.request("A held:1 86400 0"), "held:1");
      // A queued acquire, then ~80 MB of same-key requests whose E replies must wait behind
      // it (docs/protocol.md ordering): the server must stop reading rather than hold them all.
      const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.port });
      const bad = `A held:1 -1 5.${"0".repeat(3990)}\n`;
      const payload = encoder.encode("A held:1 30 0\n" + bad.repeat(20_000));
      const writing = backgroundWrite(conn, payload);
      try {
        await untilStalled(writing, payload.length);
        assert.ok(
          writing.error !== undefined || writing.written < payload.length,
          "the server read every request of a connection whose replies it must hold",
        );
        // Everyone else is still served.
        const bystander = await clients.connect();
        parseGrant(await bystander.request("A other:1 30 0"), "other:1");
      } finally {
        conn.close();
        await writing.done;
      }
    });
  });

  test("server closes on a line over 4096 bytes even when it is not valid UTF-8", async () => {
    await serve({}, async (_server, clients) => {
      const c = await clients.connect();
      const line = new Uint8Array([...encoder.encode("A " + "x".repeat(5000)), 0xff, 10]);
      await c.write(new Uint8Array([...line, ...encoder.encode("A after:1 30 0\n")]));
      assert.deepEqual(await c.closedByPeer(), ["- - E line too long"]);
    });
  });

  test("server echoes the intact fields of a line that is not valid UTF-8", async () => {
    await serve({}, async (_server, clients) => {
      const c = await clients.connect();
      await c.write(new Uint8Array([...encoder.encode("A utf:1 30 0"), 0xff, 10]));
      assert.equal(await c.readLine(), "A utf:1 E line is not valid UTF-8");
      await c.write(new Uint8Array([...encoder.encode("A "), 0xc3, ...encoder.encode(" 30 0\n")]));
      assert.equal(await c.readLine(), "A - E line is not valid UTF-8");
      // Nothing was taken, and the connection still works.
      parseGrant(await c.request("A utf:1 30 0"), "utf:1");
    });
  });
});
