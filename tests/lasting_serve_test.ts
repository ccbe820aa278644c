/**
 * serveLasting (client/bridge/deno.ts) with a fake server: after a failed accept stops the
 * server, it listens again, retrying while it cannot (the port taken, descriptors still
 * short) with a doubling wait, tells each stop and its end, and shuts every server down.
 */

import assert from "node:assert/strict";
import { type ServedLike, serveLasting } from "../client/bridge/deno.ts";
import { waitFor } from "./_helpers.ts";

/** A fake server: `fail()` stops it as a failed accept does. */
class FakeServed implements ServedLike {
  readonly addr: Deno.NetAddr = { transport: "tcp", hostname: "127.0.0.1", port: 8321 };
  readonly finished: Promise<void>;
  shutdowns = 0;
  fail!: (error: Error) => void;
  constructor() {
    this.finished = new Promise((_, reject) => this.fail = reject);
    this.finished.catch(() => {});
  }
  shutdown(): Promise<void> {
    this.shutdowns++;
    return Promise.resolve();
  }
}

Deno.test("serveLasting listens again after a stop, retrying a port taken meanwhile", async () => {
  const servers: FakeServed[] = [];
  const ports: number[] = [];
  const reports: string[] = [];
  let busy = 1; // The next listens that find the port taken.
  const lasting = serveLasting({
    hostname: "127.0.0.1",
    port: 0,
    report: (message, recovered) => reports.push(`${recovered ? "ok" : "trouble"}: ${message}`),
    serve(port) {
      ports.push(port);
      if (servers.length > 0 && busy-- > 0) throw new Deno.errors.AddrInUse("address in use");
      const served = new FakeServed();
      servers.push(served);
      return served;
    },
  }, () => new Response());
  try {
    assert.deepEqual(lasting.addr, { hostname: "127.0.0.1", port: 8321 });
    servers[0].fail(new Error("Too many open files (os error 24)"));
    // 1 s: the port is taken (told within the same 10 s: only counted); 2 s later: back.
    await waitFor(() => servers.length === 2, "a second listen", 5000, 20);
    assert.deepEqual(ports, [0, 8321, 8321], "the same port, asked again");
    assert.deepEqual(reports, [
      "trouble: stopped accepting connections: Too many open files (os error 24); listening again",
      "ok: listening again",
    ]);
  } finally {
    await lasting.shutdown();
  }
  assert.deepEqual(servers.map((s) => s.shutdowns), [1, 1], "the stopped one's connections too");
});

Deno.test("serveLasting answers 500 to a request whose handler throws, told once per 10 s with a count", async () => {
  const failures: string[] = [];
  const lasting = serveLasting({
    hostname: "127.0.0.1",
    port: 0,
    report: () => {},
    failed: (message) => failures.push(message),
  }, () => {
    throw new TypeError("boom\n    at somewhere (file.ts:1:1)");
  });
  try {
    const url = `http://127.0.0.1:${lasting.addr.port}/`;
    for (let i = 0; i < 3; i++) {
      const response = await fetch(url);
      assert.equal(response.status, 500);
      assert.equal(await response.text(), "Internal server error\n");
    }
    assert.deepEqual(failures, ["a request failed: boom"], "one line, without the stack");
  } finally {
    await lasting.shutdown();
  }
});
