/**
 * Seconds in the client (docs/protocol.md, "Fields"): `toMs` turns a number that is whole
 * milliseconds as a decimal into exactly those milliseconds (`2.007 * 1000` is
 * 2007.0000000000002, which rounding up made 2008) and rounds only genuine fractions of a
 * millisecond up; every lease and wait the client sends (acquire, `Lock.extend`,
 * `client.extend`, auto-extension) goes on the wire as the decimal given.
 */

import assert from "node:assert/strict";
import { LockClient } from "../mod.ts";
import { formatSeconds, parseSeconds } from "../client/codec.ts";
import { toMs } from "../client/options.ts";
import { FakeServer, lockServer } from "./_fake_server.ts";
import { startServer } from "./_helpers.ts";

Deno.test("toMs() converts every whole millisecond from 0.001 to 100 s exactly", () => {
  const wrong: number[] = [];
  for (let ms = 1; ms <= 100_000; ms++) {
    const seconds = ms / 1000;
    if (toMs(seconds, "lease") !== ms || toMs(seconds, "wait") !== ms) wrong.push(ms);
    else if (formatSeconds(toMs(seconds, "lease")) !== String(seconds)) wrong.push(ms);
  }
  assert.deepEqual(wrong, []);
});

Deno.test("toMs() rounds up only what is a fraction of a millisecond as a decimal", () => {
  const cases: [number, number][] = [
    [2.007, 2007],
    [2.011, 2011],
    [4.001, 4001],
    [4.03, 4030],
    [0.001, 1],
    [30, 30_000],
    [86400, 86_400_000],
    [123456789.123, 123_456_789_123],
    [999999999999.999, 999_999_999_999_999],
    [0.0001, 1],
    [0.0009, 1],
    [1e-7, 1],
    [1.5e-6, 1],
    [Number.MIN_VALUE, 1],
    [2.0071, 2008],
    [2.0070001, 2008],
    [1.0005, 1001],
    [0.9999, 1000],
  ];
  for (const [seconds, ms] of cases) {
    assert.equal(toMs(seconds, "lease"), ms, `lease ${seconds}`);
    assert.equal(toMs(seconds, "wait"), ms, `wait ${seconds}`);
  }
  assert.equal(toMs(0, "wait"), 0);
  assert.equal(toMs(1e12, "wait"), 0, "too long to write: no limit");
  assert.equal(toMs(Infinity, "wait"), 0);
  for (const bad of [0, -1, NaN, 1e12, Infinity]) {
    assert.throws(() => toMs(bad, "lease"), TypeError, `lease ${bad}`);
  }
  assert.throws(() => toMs(-0.001, "wait"), TypeError);
});

Deno.test("LockClient sends leases and waits as the decimals given (acquire, extend, auto-extend)", async () => {
  await using server = await FakeServer.start();
  await using client = new LockClient(server.address);
  const acquiring = client.acquire("k", { lease: 2.007, wait: 4.001 });
  await (await server.take("A k ")).reply("A", 7);
  const lock = await acquiring;
  const [, , lease, wait] = server.lines("A k ")[0].fields;
  assert.equal(lease, "2.007");
  // The wait sent is what is left of it (the connection took a moment): at most 4.001.
  assert.ok(parseSeconds(wait) <= 4001 && parseSeconds(wait) > 3000, wait);
  assert.equal(lock.lease, 2.007);
  const waiting = client.acquire("w", { wait: 4.001 });
  await (await server.take("A w ")).reply("T");
  await assert.rejects(waiting, { name: "LockTimeoutError", message: /within 4\.001 s$/ });

  const extending = lock.extend(4.03);
  await (await server.take("X k ")).reply("X");
  await extending;
  assert.equal(server.lines("X k ")[0].line, "X k 7 4.03");
  const again = lock.extend(); // Its own lease, read back in seconds.
  await (await server.take("X k ")).reply("X");
  await again;
  assert.equal(server.lines("X k ")[1].line, "X k 7 4.03");

  const detached = client.extend("k", 7n, 2.011);
  await (await server.take("X k ")).reply("X");
  assert.equal(await detached, true);
  assert.equal(server.lines("X k ")[2].line, "X k 7 2.011");

  const renewing = client.acquire("r", { lease: 2.007, autoExtend: true });
  await (await server.take("A r ")).reply("A", 8);
  const renewed = await renewing;
  const renewal = await server.take("X r ");
  assert.equal(renewal.line, "X r 8 2.007");
  await renewal.reply("X");
  server.handler = lockServer();
  await Promise.all([lock.release(), renewed.release()]);
});

Deno.test("LockClient: a lease of exactly --max-lease 2.007 is granted and extended", async () => {
  const server = await startServer({ args: ["--max-lease", "2.007"] });
  const client = new LockClient(server.address);
  try {
    const lock = await client.acquire("max:1", { lease: 2.007, wait: 2.007 });
    assert.equal(lock.lease, 2.007);
    await lock.extend(2.007);
    await lock.extend();
    assert.equal(await client.extend("max:1", lock.token, 2.007), true);
    await assert.rejects(lock.extend(2.0071), /at most 2\.007 seconds/);
    await lock.release();
  } finally {
    await client.close();
    await server.stop();
    await Deno.remove(server.dataDir, { recursive: true }).catch(() => {});
  }
});
