/**
 * Failed accepts (server/accept.ts, server/accept_errors.ts, docs/server.md "Logs"): a
 * connection its client reset before the server accepted it is skipped at once, with no
 * error line; only running out of resources (file descriptors...) backs off, and is logged
 * as an error at most once every 10 s.
 */

import assert from "node:assert/strict";
import net from "node:net";
import { Acceptor } from "../server/accept.ts";
import { classifyAcceptError } from "../server/accept_errors.ts";
import { Batch } from "../server/batch.ts";
import type { LineSocket } from "../server/line_socket.ts";
import { LineClient, startServer } from "./_helpers.ts";
import { capturingLogger } from "./_logger.ts";

/** An error as Deno's `accept` throws it: a class, an OS message, a `code`. */
function osError(kind: new (message: string) => Error, message: string, code: string): Error {
  return Object.assign(new kind(message), { code });
}

const NOT_CONNECTED = "Transport endpoint is not connected (os error 107)";
const TOO_MANY_FILES = "Too many open files (os error 24)";

Deno.test("classifyAcceptError() tells one connection's failure from resource exhaustion", () => {
  const cases: [unknown, string][] = [
    [osError(Deno.errors.NotConnected, NOT_CONNECTED, "ENOTCONN"), "connection"],
    [
      osError(Deno.errors.ConnectionAborted, "Software caused connection abort", "ECONNABORTED"),
      "connection",
    ],
    [osError(Deno.errors.ConnectionReset, "Connection reset by peer", "ECONNRESET"), "connection"],
    [osError(Error, "Protocol error (os error 71)", "EPROTO"), "connection"],
    [osError(Error, "Operation not permitted (os error 1)", "EPERM"), "connection"],
    [new Deno.errors.NotConnected(NOT_CONNECTED), "connection"], // no code: by its class
    [new Deno.errors.ConnectionAborted("aborted"), "connection"],
    [osError(Error, TOO_MANY_FILES, "EMFILE"), "resources"],
    [osError(Error, "Too many open files in system (os error 23)", "ENFILE"), "resources"],
    [osError(Error, "No buffer space available (os error 105)", "ENOBUFS"), "resources"],
    [osError(Error, "Cannot allocate memory (os error 12)", "ENOMEM"), "resources"],
    [new Error("something else"), "unknown"],
    [new Deno.errors.BadResource("Bad resource ID"), "unknown"],
    ["a string", "unknown"],
    [null, "unknown"],
  ];
  for (const [error, kind] of cases) {
    assert.equal(classifyAcceptError(error), kind, String((error as Error)?.message ?? error));
  }
});

/**
 * A real listener on `127.0.0.1:0` whose `accept` first throws `errors`, one per call, as if
 * that many connections had failed before they were accepted.
 */
function failingListener(errors: unknown[]): { listener: Deno.Listener; port: number } {
  const real = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const pending = [...errors];
  const listener = {
    addr: real.addr,
    accept(): Promise<Deno.Conn> {
      const error = pending.shift();
      return error === undefined ? real.accept() : Promise.reject(error);
    },
    close(): void {
      real.close();
    },
  };
  return { listener: listener as unknown as Deno.Listener, port: real.addr.port };
}

/**
 * Runs an acceptor on `listener` whose clients answer each line with `pong`, and returns how
 * long a fresh client waited for its answer, and the log.
 */
async function timeToServe(
  setup: { listener: Deno.Listener; port: number },
): Promise<{ ms: number; lines: string[] }> {
  const log = capturingLogger();
  const acceptor = new Acceptor(setup.listener, {
    client: (socket: LineSocket) => ({ line: () => socket.send("pong"), closed: () => {} }),
  }, { maxConnections: 10, batch: new Batch(), log });
  const started = performance.now();
  const client = await LineClient.connect(setup.port);
  try {
    assert.equal(await client.request("ping"), "pong");
    return { ms: performance.now() - started, lines: log.lines };
  } finally {
    await client.close();
    const sockets = [...acceptor.clients];
    for (const socket of sockets) socket.close();
    await Promise.all(sockets.map((s) => s.done));
    await acceptor.close();
  }
}

Deno.test("Acceptor skips connections reset before they were accepted at once, logging no error", async () => {
  const resets = Array.from(
    { length: 100 },
    (_, i) =>
      i % 2 === 0 ? osError(Deno.errors.NotConnected, NOT_CONNECTED, "ENOTCONN") : osError(
        Deno.errors.ConnectionAborted,
        "Software caused connection abort",
        "ECONNABORTED",
      ),
  );
  const { ms, lines } = await timeToServe(failingListener(resets));
  // A 50 ms pause per reset would be 5 s.
  assert.ok(ms < 1000, `a fresh connection waited ${ms.toFixed(0)} ms behind 100 resets`);
  assert.deepEqual(lines.filter((l) => !l.startsWith("debug ")), [], "no line above debug");
  assert.equal(lines.filter((l) => l.includes(NOT_CONNECTED)).length, 50);
});

Deno.test("Acceptor backs off when out of file descriptors, with one error line for a run", async () => {
  const emfile = () => osError(Error, TOO_MANY_FILES, "EMFILE");
  const { ms, lines } = await timeToServe(failingListener([emfile(), emfile(), emfile()]));
  assert.ok(ms >= 3 * 45, `three failed accepts paused only ${ms.toFixed(0)} ms`);
  const errors = lines.filter((l) => l.startsWith("error "));
  assert.equal(errors.length, 1, `one error line in 10 s: ${JSON.stringify(lines)}`);
  assert.match(errors[0], /accept failed: Too many open files \(os error 24\); retrying/);
});

/** Opens a connection to `port` and resets it (RST, SO_LINGER 0) as soon as it is open. */
function connectAndReset(port: number): Promise<void> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, "127.0.0.1", () => {
      socket.resetAndDestroy();
      resolve();
    });
    socket.once("error", reject);
  });
}

for (const io of ["portable", "epoll"]) {
  Deno.test(`lockd (--io ${io}) answers a fresh connection at once after 200 connections reset before accept`, async () => {
    const server = await startServer({ env: { LOCKD_LOG_LEVEL: "debug", LOCKD_IO: io } });
    try {
      for (let i = 0; i < 200; i++) await connectAndReset(server.port);
      const started = performance.now();
      const client = await LineClient.connect(server.port);
      try {
        assert.equal(await client.request("R fresh 1"), "R fresh N");
      } finally {
        await client.close();
      }
      const ms = performance.now() - started;
      // A 50 ms pause per reset that failed the accept would be seconds.
      assert.ok(ms < 2000, `answered after ${ms.toFixed(0)} ms`);
    } finally {
      assert.equal(await server.stop(), 0);
      await Deno.remove(server.dataDir, { recursive: true });
    }
    const stderr = server.stderr();
    assert.doesNotMatch(stderr, / ERROR /, "no error line");
    // The runtime's accept fails on a reset connection; epoll's accept takes it, and its
    // first read fails.
    assert.match(
      stderr,
      io === "portable"
        ? /DEBUG a connection failed before it was accepted: /
        : /DEBUG 127\.0\.0\.1:\d+ reset the connection: recv failed: ECONNRESET /,
    );
  });
}
