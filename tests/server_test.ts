/**
 * Black-box tests of the wire protocol and the lock rules (docs/protocol.md): a real
 * `server/main.ts` process on a free port, spoken to with raw lines over TCP.
 */

import assert from "node:assert/strict";
import { setTimeout as delay } from "node:timers/promises";
import { grantOf, type LineClient, onEachTransport } from "./_helpers.ts";

// ---------------------------------------------------------------------------------------
// Local helpers

/** Sends a probe on `client` and waits for its reply: every earlier line was processed. */
async function sync(client: LineClient): Promise<void> {
  assert.equal(await client.request("R sync-probe 1"), "R sync-probe N");
}

/** Replies grouped by their (op, key) echo, each group in arrival order. */
function groupByOpKey(replies: string[]): Map<string, string[]> {
  const groups = new Map<string, string[]>();
  for (const reply of replies) {
    const [op, key] = reply.split(" ");
    const group = groups.get(`${op} ${key}`) ?? [];
    group.push(reply);
    groups.set(`${op} ${key}`, group);
  }
  return groups;
}

const elapsedSince = (start: number) => performance.now() - start;

// ---------------------------------------------------------------------------------------

// Every test runs on both transports of the port (docs/server.md, "The epoll transport").
onEachTransport((test, serve) => {
  test("server answers the example exchanges of docs/protocol.md", async (t) => {
    await serve({}, async (_server, clients) => {
      const a = await clients.connect();
      const b = await clients.connect();

      await t.step("does acquire and release", async () => {
        const token = grantOf(await a.request("A orders:17 30 5"), "orders:17");
        assert.equal(await a.request(`R orders:17 ${token}`), "R orders:17 R");
      });

      await t.step("does answer T when the wait elapses while another client holds", async () => {
        const held = grantOf(await a.request("A orders:17 30 5"), "orders:17");
        const start = performance.now();
        assert.equal(await b.request("A orders:17 30 0.5"), "A orders:17 T");
        assert.ok(elapsedSince(start) >= 490, `T after ${elapsedSince(start)} ms, not 500`);
        assert.equal(await a.request(`R orders:17 ${held}`), "R orders:17 R");
      });

      await t.step("does reject a negative lease with the documented message", async () => {
        assert.equal(
          await a.request("A orders:17 -1 5"),
          "A orders:17 E lease must be a positive number of seconds",
        );
      });

      await t.step("does extend, and answers N to tokens that do not hold the key", async () => {
        const token = grantOf(await a.request("A ext:1 30 0"), "ext:1");
        assert.equal(await a.request(`X ext:1 ${token} 60`), "X ext:1 X");
        assert.equal(await a.request(`X ext:1 ${token + 1000n} 60`), "X ext:1 N");
        assert.equal(await a.request(`R ext:1 ${token + 1000n}`), "R ext:1 N");
        assert.equal(await b.request(`R ext:1 ${token}`), "R ext:1 R"); // any connection
        assert.equal(await a.request(`R ext:1 ${token}`), "R ext:1 N"); // already released
        assert.equal(await a.request(`X ext:1 ${token} 60`), "X ext:1 N");
        assert.equal(await a.request("R never:granted 1"), "R never:granted N");
        assert.equal(await a.request("X never:granted 1 1"), "X never:granted N");
      });

      await t.step("does grant a free key at once even with a tiny wait (try-lock)", async () => {
        const token = grantOf(await a.request("A try:1 30 0.001"), "try:1");
        assert.equal(await b.request("A try:1 30 0.001"), "A try:1 T");
        assert.equal(await a.request(`R try:1 ${token}`), "R try:1 R");
      });

      await t.step("does issue strictly increasing tokens across keys", async () => {
        let last = 0n;
        for (const key of ["inc:a", "inc:b", "inc:a2", "inc:c", "inc:b2"]) {
          const token = grantOf(await (key.length % 2 ? a : b).request(`A ${key} 30 0`), key);
          assert.ok(token > last, `token ${token} after ${last}`);
          last = token;
        }
      });
    });
  });

  test("server answers malformed lines with E and keeps serving", async (t) => {
    await serve({}, async (_server, clients) => {
      const c = await clients.connect();
      const other = await clients.connect();
      // Another connection's state must survive everything below.
      const otherToken = grantOf(await other.request("A held:1 30 0"), "held:1");

      const cases: [string, string | RegExp][] = [
        ["A", /^A - E \S/],
        ["R", /^R - E \S/],
        ["X", /^X - E \S/],
        [" k 30 5", /^- k E \S/],
        [" ", /^- - E \S/],
        ["  ", /^- - E \S/],
        ["Q k 1", "Q k E unknown op"],
        ["Q", "Q - E unknown op"],
        ["a k 30 5", "a k E unknown op"],
        ["AA k 30 5", "AA k E unknown op"],
        ["A k", /^A k E \S/],
        ["A k 30", /^A k E \S/],
        ["A k 30 5 6", /^A k E \S/],
        ["A k  30 5", /^A k E \S/],
        ["A k 30 5 ", /^A k E \S/],
        ["A k 0 5", "A k E lease must be a positive number of seconds"],
        ["A k 0.0 5", "A k E lease must be a positive number of seconds"],
        ["A k -1 5", "A k E lease must be a positive number of seconds"],
        ["A k 1e3 5", /^A k E \S/],
        ["A k +1 5", /^A k E \S/],
        ["A k 0x10 5", /^A k E \S/],
        ["A k NaN 5", /^A k E \S/],
        ["A k Infinity 5", /^A k E \S/],
        ["A k .5 5", /^A k E \S/],
        ["A k 5. 5", /^A k E \S/],
        ["A k 1,5 5", /^A k E \S/],
        ["A k 86401 5", /^A k E \S/], // above the default --max-lease
        ["A k 30 -1", /^A k E \S/],
        ["A k 30 NaN", /^A k E \S/],
        ["A k 30 1e1", /^A k E \S/],
        ["A k 30 Infinity", /^A k E \S/],
        ["R k 0", /^R k E \S/],
        ["R k 01", /^R k E \S/],
        ["R k -1", /^R k E \S/],
        ["R k +1", /^R k E \S/],
        ["R k 1.0", /^R k E \S/],
        ["R k abc", /^R k E \S/],
        ["R k 18446744073709551616", /^R k E \S/],
        ["R k 1 2", /^R k E \S/],
        ["X k 1", /^X k E \S/],
        ["X k 1 0", /^X k E \S/],
        ["X k 0 5", /^X k E \S/],
        ["X k 1 -5", /^X k E \S/],
        ["X k 1 86401", /^X k E \S/],
        [`A ${"k".repeat(251)} 30 5`, new RegExp(`^A k{251} E \\S`)],
        [`A ${"é".repeat(126)} 30 5`, /^A é{126} E \S/], // 252 bytes
        ["A k\tx 30 5", /^A k\tx E \S/],
        // deno-lint-ignore no-control-regex
        ["A k\u0000 30 5", /^A k\u0000 E \S/],
        ["A k\u007f 30 5", /^A k\u007f E \S/],
        ["A k\u0085 30 5", /^A k\u0085 E \S/],
        ["A k\u00a0x 30 5", /^A k\u00a0x E \S/],
        ["A k\u2028x 30 5", /^A k\u2028x E \S/],
      ];

      const oneByOne: string[] = [];
      await t.step("does answer each malformed line with one E reply", async () => {
        for (const [line, expected] of cases) {
          const reply = await c.request(line, 2000);
          oneByOne.push(reply ?? "<eof>");
          if (typeof expected === "string") assert.equal(reply, expected, `for ${line}`);
          else assert.match(reply ?? "<eof>", expected, `for ${JSON.stringify(line)}`);
        }
      });

      await t.step("does answer all of them, in order, when sent in one write", async () => {
        await c.write(cases.map(([line]) => line + "\n").join(""));
        const replies = await c.readLines(cases.length, 3000);
        // Every reply is an E, and same (op, key) replies keep their order: the set matches.
        // Same replies as one by one; same (op, key) replies keep their relative order.
        assert.deepEqual(groupByOpKey(replies), groupByOpKey(oneByOne));
        assert.ok(await c.silentFor(100), "an extra reply arrived");
      });

      await t.step("does accept valid edge values on the same connection", async () => {
        assert.equal(await c.request("R k 18446744073709551615"), "R k N");
        assert.equal(await c.request("X k 18446744073709551615 1"), "X k N");
        const k250 = "k".repeat(250);
        const t250 = grantOf(await c.request(`A ${k250} 30 0`), k250);
        assert.equal(await c.request(`R ${k250} ${t250}`), `R ${k250} R`);
        const e250 = "é".repeat(125); // 250 bytes
        const te = grantOf(await c.request(`A ${e250} 30 0`), e250);
        assert.equal(await c.request(`R ${e250} ${te}`), `R ${e250} R`);
        const tl = grantOf(await c.request("A lease:max 86400 0"), "lease:max");
        assert.equal(await c.request(`X lease:max ${tl} 86400.000`), "X lease:max X");
        assert.equal(await c.request(`R lease:max ${tl}`), "R lease:max R");
      });

      await t.step("does not change any state because of a malformed line", async () => {
        // None of the bad acquires of "k" took it: a try-lock from elsewhere gets it at once.
        const tk = grantOf(await other.request("A k 30 0.001"), "k");
        assert.equal(await other.request(`R k ${tk}`), "R k R");
        // The other connection's lock is still held, by the same token.
        assert.equal(await c.request("A held:1 30 0.05"), "A held:1 T");
        assert.equal(await other.request(`X held:1 ${otherToken} 30`), "X held:1 X");
        assert.equal(await other.request(`R held:1 ${otherToken}`), "R held:1 R");
      });
    });
  });

  test("server accepts CRLF line endings and ignores empty lines", async () => {
    await serve({}, async (_server, clients) => {
      const c = await clients.connect();
      await c.write("A crlf 30 0\r\n");
      const token = grantOf(await c.readLine(), "crlf");
      await c.write("\n\r\n\n\r\n");
      await c.write(`R crlf ${token}\r\n`);
      // The empty lines got no reply: the next line is the release's.
      assert.equal(await c.readLine(), "R crlf R");
      // Mixed endings and empty lines in one write.
      await c.write("\r\n\nA crlf2 30 0\n\r\nR crlf2 1\r\n\n");
      const replies = (await c.readLines(2)).sort();
      assert.equal(replies.length, 2);
      grantOf(replies[0], "crlf2");
      assert.equal(replies[1], "R crlf2 N");
      assert.ok(await c.silentFor(100), "an empty line was answered");
    });
  });

  test("server answers 1,000 requests pipelined in one write", async () => {
    await serve({}, async (_server, clients) => {
      const c = await clients.connect();
      const n = 200;
      // Phase 0: hold n keys (also pipelined).
      await c.write(Array.from({ length: n }, (_, i) => `A h${i} 30 0\n`).join(""));
      const held = new Map<string, bigint>();
      for (const line of await c.readLines(n)) {
        const key = line.split(" ")[1];
        held.set(key, grantOf(line, key));
      }
      assert.equal(held.size, n);
      const maxHeld = [...held.values()].reduce((a, b) => a > b ? a : b);

      // Phase 1: 1,000 requests in ONE write, per i: release h_i, acquire p_i (granted), release
      // h_i again (N), acquire p_i with a 10 ms wait (T), acquire h_i again (granted).
      const lines: string[] = [];
      for (let i = 0; i < n; i++) {
        const token = held.get(`h${i}`)!;
        lines.push(
          `R h${i} ${token}`,
          `A p${i} 30 0`,
          `R h${i} ${token}`,
          `A p${i} 30 0.01`,
          `A h${i} 30 0`,
        );
      }
      assert.equal(lines.length, 1000);
      const start = performance.now();
      await c.write(lines.join("\n") + "\n");
      const replies = await c.readLines(1000, 5000);
      const took = elapsedSince(start);

      const byOpKey = groupByOpKey(replies);
      const tokens = new Set<bigint>();
      for (let i = 0; i < n; i++) {
        assert.deepEqual(byOpKey.get(`R h${i}`), [`R h${i} R`, `R h${i} N`], `R h${i}`);
        const [grant, timedOut] = byOpKey.get(`A p${i}`) ?? [];
        tokens.add(grantOf(grant, `p${i}`));
        assert.equal(timedOut, `A p${i} T`);
        const again = byOpKey.get(`A h${i}`) ?? [];
        assert.equal(again.length, 1, `A h${i}: ${again}`);
        const token = grantOf(again[0], `h${i}`);
        assert.ok(token > maxHeld, `regrant of h${i} got ${token} <= ${maxHeld}`);
        tokens.add(token);
      }
      assert.equal(tokens.size, 2 * n, "tokens are not unique");
      assert.ok(await c.silentFor(100), "more than 1,000 replies");
      assert.ok(took < 3000, `1,000 pipelined requests took ${took} ms`);
    });
  });

  test("server grants a contended key in FIFO order across 5 connections", async () => {
    await serve({}, async (_server, clients) => {
      const holder = await clients.connect();
      let previous = grantOf(await holder.request("A fifo 30 0"), "fifo");
      const waiters: LineClient[] = [];
      for (let i = 0; i < 5; i++) {
        const w = await clients.connect();
        await w.send("A fifo 30 0");
        await sync(w); // queued before the next one arrives
        waiters.push(w);
      }
      for (const w of waiters) assert.ok(await w.silentFor(0), "a waiter was answered early");
      assert.equal(await holder.request(`R fifo ${previous}`), "R fifo R");
      for (const [i, w] of waiters.entries()) {
        const token = grantOf(await w.readLine(3000), "fifo");
        assert.ok(token > previous, `waiter ${i} got ${token} after ${previous}`);
        previous = token;
        for (const later of waiters.slice(i + 1)) {
          assert.ok(await later.silentFor(0), `a later waiter was granted before waiter ${i}`);
        }
        assert.equal(await w.request(`R fifo ${token}`), "R fifo R");
      }
      // The key is free again.
      const last = grantOf(await holder.request("A fifo 30 0.001"), "fifo");
      assert.ok(last > previous);
      for (const w of waiters) assert.ok(await w.silentFor(20), "an extra reply arrived");
    });
  });

  test("server hands a lock to the waiter when the holder's lease runs out", async () => {
    await serve({}, async (_server, clients) => {
      const holder = await clients.connect();
      const waiter = await clients.connect();
      const start = performance.now();
      const old = grantOf(await holder.request("A lease:1 0.2 0"), "lease:1");
      await waiter.send("A lease:1 30 5");
      const fresh = grantOf(await waiter.readLine(3000), "lease:1");
      const after = elapsedSince(start);
      assert.ok(after >= 195, `granted after ${after} ms, before the 200 ms lease ran out`);
      assert.ok(after < 2000, `granted only after ${after} ms`);
      assert.ok(fresh > old, `token ${fresh} is not above ${old}`);
      // The old token is worthless now; the new one works.
      assert.equal(await holder.request(`R lease:1 ${old}`), "R lease:1 N");
      assert.equal(await holder.request(`X lease:1 ${old} 30`), "X lease:1 N");
      assert.equal(await waiter.request(`X lease:1 ${fresh} 30`), "X lease:1 X");
      assert.equal(await waiter.request(`R lease:1 ${fresh}`), "R lease:1 R");
      assert.ok(await holder.silentFor(50), "the old holder got an extra reply");
    });
  });

  test("server never grants an acquire after its wait limit answered T", async () => {
    await serve({}, async (_server, clients) => {
      const holder = await clients.connect();
      const late = await clients.connect();
      const third = await clients.connect();
      const token = grantOf(await holder.request("A wait:1 30 0"), "wait:1");
      const start = performance.now();
      assert.equal(await late.request("A wait:1 30 0.1"), "A wait:1 T");
      assert.ok(elapsedSince(start) >= 95, `T after only ${elapsedSince(start)} ms`);
      assert.equal(await holder.request(`R wait:1 ${token}`), "R wait:1 R");
      // The timed-out request is gone: no late grant, and the key is free.
      const grant = grantOf(await third.request("A wait:1 30 0.001"), "wait:1");
      assert.ok(grant > token);
      assert.ok(await late.silentFor(200), "the timed-out client got a late reply");
      assert.equal(await third.request(`R wait:1 ${grant}`), "R wait:1 R");
    });
  });

  test("server drops the queued acquires of a closed connection", async (t) => {
    // With --max-connections 3, a new connection being accepted proves the server processed
    // the close of an earlier one (no sleeping on a guess).
    await serve({ args: ["--max-connections", "3"] }, async (_server, clients) => {
      const holder = await clients.connect();
      let w1 = await clients.connect();
      const w2 = await clients.connect();

      await t.step("does grant the next waiter when a queued one disconnected", async () => {
        const token = grantOf(await holder.request("A drop:1 30 0"), "drop:1");
        await w1.send("A drop:1 30 0");
        await sync(w1);
        await w2.send("A drop:1 30 0");
        await sync(w2);
        await w1.close();
        w1 = await clients.connectAccepted();
        assert.equal(await holder.request(`R drop:1 ${token}`), "R drop:1 R");
        const next = grantOf(await w2.readLine(1000), "drop:1");
        assert.ok(next > token);
        assert.equal(await w2.request(`R drop:1 ${next}`), "R drop:1 R");
      });

      await t.step("does free the key when the only waiter disconnected", async () => {
        const token = grantOf(await holder.request("A drop:2 30 0"), "drop:2");
        await w1.send("A drop:2 30 0");
        await sync(w1);
        await w1.close();
        w1 = await clients.connectAccepted();
        assert.equal(await holder.request(`R drop:2 ${token}`), "R drop:2 R");
        const again = grantOf(await w1.request("A drop:2 30 0.001"), "drop:2");
        assert.ok(again > token);
      });

      await t.step("drops a queued acquire whose close came with it", async () => {
        const token = grantOf(await holder.request("A drop:3 30 0"), "drop:3");
        // The acquire and the end of input in one go: the server reads both at once (on the
        // epoll transport, one edge).
        await w1.send("A drop:3 30 0");
        await w1.close();
        w1 = await clients.connectAccepted();
        assert.equal(await holder.request(`R drop:3 ${token}`), "R drop:3 R");
        const again = grantOf(await w1.request("A drop:3 30 0.5"), "drop:3");
        assert.ok(again > token);
      });
    });
  });

  test("server keeps a held lock when its connection closes", async () => {
    await serve({ args: ["--max-connections", "1"] }, async (_server, clients) => {
      const first = await clients.connect();
      const token = grantOf(await first.request("A kept:1 30 0"), "kept:1");
      await first.close();
      const second = await clients.connectAccepted(); // the close was processed
      assert.equal(await second.request("A kept:1 30 0.05"), "A kept:1 T");
      // The grant is still the same one: its token works from another connection.
      assert.equal(await second.request(`X kept:1 ${token} 30`), "X kept:1 X");
      assert.equal(await second.request(`R kept:1 ${token}`), "R kept:1 R");
    });
  });

  test("server keeps a short lease alive past its end when it is extended", async () => {
    await serve({}, async (_server, clients) => {
      const holder = await clients.connect();
      const other = await clients.connect();
      const start = performance.now();
      const token = grantOf(await holder.request("A ext:2 0.4 0"), "ext:2");
      // Extend every 100 ms by 400 ms, until well past the original 400 ms.
      while (elapsedSince(start) < 800) {
        await delay(100);
        assert.equal(await holder.request(`X ext:2 ${token} 0.4`), "X ext:2 X");
      }
      assert.equal(await other.request("A ext:2 30 0.01"), "A ext:2 T");
      assert.equal(await holder.request(`R ext:2 ${token}`), "R ext:2 R");
    });
  });

  test("server answers same (op, key) requests of a connection in request order", async (t) => {
    await serve({}, async (_server, clients) => {
      const holder = await clients.connect();
      const c = await clients.connect();

      await t.step("does not let a quick T overtake an earlier queued acquire", async () => {
        const token = grantOf(await holder.request("A ord:1 30 0"), "ord:1");
        await c.send("A ord:1 30 5");
        await c.send("A ord:1 30 0.05");
        await c.send("A ord:1 -1 5"); // an E for the same (op, key) also waits its turn
        await sync(c); // other (op, key) replies are not held back
        // The 50 ms limit runs out meanwhile, but its T must wait for the first request.
        assert.ok(await c.silentFor(250), "a reply to A ord:1 overtook the first request");
        assert.equal(await holder.request(`R ord:1 ${token}`), "R ord:1 R");
        const [first, second, third] = await c.readLines(3, 3000);
        const granted = grantOf(first, "ord:1");
        assert.ok(granted > token);
        assert.equal(second, "A ord:1 T");
        assert.equal(third, "A ord:1 E lease must be a positive number of seconds");
        assert.equal(await c.request(`R ord:1 ${granted}`), "R ord:1 R");
      });

      await t.step("does keep two queued acquires of one connection in order", async () => {
        const token = grantOf(await holder.request("A ord:2 30 0"), "ord:2");
        await c.write("A ord:2 30 0\nA ord:2 30 0\n");
        await sync(c);
        assert.equal(await holder.request(`R ord:2 ${token}`), "R ord:2 R");
        const first = grantOf(await c.readLine(2000), "ord:2");
        await c.send(`R ord:2 ${first}`);
        // The release reply and the second grant are for different (op, key): any order.
        const lines = await c.readLines(2, 2000);
        assert.ok(lines.includes("R ord:2 R"), `no release reply in ${lines}`);
        const second = grantOf(lines.find((l) => l.startsWith("A ")) ?? null, "ord:2");
        assert.ok(second > first);
        assert.equal(await c.request(`R ord:2 ${second}`), "R ord:2 R");
      });
    });
  });
});
