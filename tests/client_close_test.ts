/**
 * `close()` with acquires queued on the server (docs/client.md, "Held locks"): the
 * connection is half-closed and read to its end, so a grant the server made just before it
 * read the close is seen and released on a fresh connection, instead of staying held until
 * its lease ends.
 */

import assert from "node:assert/strict";
import { LockClient, LockError, LockRejectedError } from "../mod.ts";
import { readLines } from "./_net.ts";
import { waitFor, withServer } from "./_helpers.ts";
import { delay } from "./_fake_server.ts";

const encoder = new TextEncoder();

/** One accepted connection of {@linkcode LateGrantServer}. */
interface Accepted {
  lines: string[];
  /** Whether the client ended its side (a half-close or a close). */
  ended: boolean;
}

/** How {@linkcode LateGrantServer} misbehaves besides its late grant. */
interface LateGrantOptions {
  /** Waits this long after reading a close before it closes the connection (ms). */
  closeDelayMs?: number;
  /** Answers every `A <key>` with this key `E no active node` (the client retries). */
  refuse?: string;
}

/**
 * A fake node that grants `A late ...` only once the client has closed its sending side,
 * as lockd would if a release from elsewhere reached it just before it read the close. It
 * answers the client's latency probe and nothing else.
 */
class LateGrantServer implements AsyncDisposable {
  readonly accepted: Accepted[] = [];
  #listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  #conns = new Set<Deno.Conn>();
  #loop: Promise<void>;
  #options: LateGrantOptions;

  constructor(options: LateGrantOptions = {}) {
    this.#options = options;
    this.#loop = this.#accept();
  }

  get address(): string {
    return `127.0.0.1:${this.#listener.addr.port}`;
  }

  lines(): string[] {
    return this.accepted.flatMap((a) => a.lines);
  }

  async #accept(): Promise<void> {
    const serving: Promise<void>[] = [];
    try {
      for await (const conn of this.#listener) serving.push(this.#serve(conn));
    } catch {
      // Closed.
    }
    await Promise.all(serving);
  }

  async #serve(conn: Deno.Conn): Promise<void> {
    this.#conns.add(conn);
    const accepted: Accepted = { lines: [], ended: false };
    this.accepted.push(accepted);
    const send = (line: string) => conn.write(encoder.encode(line + "\n")).catch(() => 0);
    await readLines(conn, (line) => {
      const [op, key] = line.split(" ");
      if (op === "?") void send("? - E unknown op");
      else if (op === "HELLO") void send(`HELLO ${key} OK`);
      else {
        accepted.lines.push(line);
        if (op === "R") void send(`R ${key} R`);
        if (op === "A" && key === this.#options.refuse) void send(`A ${key} E no active node`);
      }
    });
    accepted.ended = true;
    if (this.#options.closeDelayMs) await delay(this.#options.closeDelayMs);
    // The close was read: had a release granted the queued acquire just before, its grant
    // would go out now, then the connection closes.
    if (accepted.lines.some((l) => l.startsWith("A late "))) await send("A late A 7");
    this.#conns.delete(conn);
    try {
      conn.close();
    } catch {
      // Reset by the client.
    }
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.#listener.close();
    for (const conn of this.#conns) {
      try {
        conn.close();
      } catch {
        // Already closed.
      }
    }
    await this.#loop;
  }
}

Deno.test("close() releases a grant made while it closed a connection with an acquire queued", async () => {
  await using server = new LateGrantServer();
  const client = new LockClient(server.address, { connectionsPerAddress: 1 });
  const acquiring = client.acquire("late", { wait: 10 });
  await waitFor(() => Promise.resolve(server.lines().some((l) => l.startsWith("A late "))), "A");
  const accepted = server.accepted.length;
  // As a script would: the pending acquire is handled only after close() (no unhandled
  // rejection meanwhile, though the close waited for the server and a fresh connection).
  await client.close();
  await assert.rejects(acquiring, LockError);
  // The grant that came after the half-close was released, on a fresh connection.
  assert.equal(server.accepted.length, accepted + 1, "one fresh connection for the release");
  assert.deepEqual(server.accepted.at(-1)!.lines, ["R late 7"]);
  assert.ok(server.accepted[accepted - 1].ended, "the first connection was half-closed");
});

Deno.test("close() with acquires queued on both connections fails them all after the drains", async () => {
  await using server = new LateGrantServer();
  const client = new LockClient(server.address);
  await waitFor(() => Promise.resolve(client.connected === 2), "both connections");
  // Round-robin: one acquire on each connection; only "late" is granted at the close.
  const late = client.acquire("late", { wait: 10 });
  const quiet = client.acquire("quiet", { wait: 10 });
  await waitFor(() => Promise.resolve(server.lines().length === 2), "both acquires sent");
  assert.equal(server.accepted.filter((a) => a.lines.length === 1).length, 2, "one on each");
  await client.close();
  await assert.rejects(late, LockError);
  await assert.rejects(quiet, LockError);
  assert.deepEqual(server.accepted.at(-1)!.lines, ["R late 7"]);
});

Deno.test("close() draining a slow node: a wait that runs out meanwhile fails with the rest", async () => {
  await using server = new LateGrantServer({ closeDelayMs: 400 });
  const client = new LockClient(server.address, { connectionsPerAddress: 1 });
  const acquiring = client.acquire("quiet", { wait: 0.1 });
  await waitFor(() => Promise.resolve(server.lines().length === 1), "the acquire sent");
  const started = performance.now();
  await client.close(); // The 0.1 s wait ends during the drain: no rejection before this.
  assert.ok(performance.now() - started >= 300, "the close waited for the node");
  await assert.rejects(acquiring, LockError);
});

Deno.test("close() sends nothing more while it drains: a request waiting to retry fails", async () => {
  await using server = new LateGrantServer({ closeDelayMs: 300, refuse: "again" });
  const client = new LockClient(server.address);
  await waitFor(() => Promise.resolve(client.connected === 2), "both connections");
  const late = client.acquire("late", { wait: 10 });
  const again = client.acquire("again", { wait: 10 }); // Refused: retried every few ms.
  const tries = () => server.lines().filter((l) => l.startsWith("A again ")).length;
  await waitFor(() => Promise.resolve(tries() >= 2), "a retry");
  const triedBefore = tries();
  await client.close(); // A 300 ms drain: no retry goes out meanwhile.
  assert.equal(tries(), triedBefore, "no retry while the client closed");
  await assert.rejects(late, LockError);
  await assert.rejects(again, LockError);
  assert.deepEqual(server.accepted.at(-1)!.lines, ["R late 7"]);
});

Deno.test("close() with an acquire queued on lockd drops it there and ends promptly", async () => {
  await withServer({}, async (server, clients) => {
    const raw = await clients.connect();
    assert.match((await raw.request("A busy 30 0"))!, /^A busy A \d+$/);
    const client = new LockClient(`127.0.0.1:${server.port}`);
    const acquiring = client.acquire("busy", { wait: 10 });
    await waitFor(
      async () => (await raw.request("I busy"))?.split(" ")[5] === "1",
      "the client's acquire to queue",
    );
    const started = performance.now();
    await client.close();
    assert.ok(performance.now() - started < 900, "lockd closed the half-closed connection");
    await assert.rejects(acquiring, LockError);
    assert.equal((await raw.request("I busy"))?.split(" ")[5], "0", "the queued acquire is gone");
  });
});

Deno.test("close() passing its own lock to its own queued acquires rejects them only at the end", async () => {
  await withServer({}, async (server, clients) => {
    const raw = await clients.connect();
    const client = new LockClient(`127.0.0.1:${server.port}`);
    await client.acquire("own", { lease: 30 });
    const queued = [client.acquire("own", { wait: 10 }), client.acquire("own", { wait: 10 })];
    await waitFor(
      async () => (await raw.request("I own"))?.split(" ")[5] === "2",
      "both acquires to queue behind the client's own lock",
    );
    // close() releases the lock: lockd grants it to the first queued acquire at once.
    await client.close();
    for (const pending of queued) await assert.rejects(pending, LockError);
    await waitFor(async () => (await raw.request("I own")) === "I own F", "own to be free");
  });
});

Deno.test("close(): an extend answered E or N while it closes rejects only at the end", async () => {
  await withServer({}, async (server, clients) => {
    const raw = await clients.connect();
    const client = new LockClient(`127.0.0.1:${server.port}`);
    const lock = await client.acquire("ext", { lease: 30 });
    const queued = client.acquire("ext", { wait: 10 }); // A connection to drain.
    await waitFor(async () => (await raw.request("I ext"))?.split(" ")[5] === "1", "queued");
    const pending = [
      client.extend("ext", lock.token, 100_000_000), // Over --max-lease: E.
      lock.extend(100_000_000),
      client.extend("other", 1n, 10), // Not held: N, then false.
    ];
    await client.close();
    // Every handler at once, right after close() (a later one would come too late anyway).
    const [e1, e2, n, q] = await Promise.allSettled([...pending, queued]);
    assert.ok(e1.status === "rejected" && e1.reason instanceof LockRejectedError, String(e1));
    assert.ok(e2.status === "rejected" && e2.reason instanceof LockRejectedError, String(e2));
    assert.deepEqual(n, { status: "fulfilled", value: false });
    assert.ok(q.status === "rejected" && q.reason instanceof LockError, String(q));
  });
});

Deno.test("close() racing a release of the key it waits for leaves the key free", async () => {
  await withServer({}, async (server, clients) => {
    const raw = await clients.connect();
    for (let i = 0; i < 20; i++) {
      const key = `race:${i}`;
      const token = (await raw.request(`A ${key} 30 0`))!.split(" ")[3];
      const client = new LockClient(`127.0.0.1:${server.port}`);
      const acquiring = client.acquire(key, { wait: 10 });
      await waitFor(
        async () => (await raw.request(`I ${key}`))?.split(" ")[5] === "1",
        "the client's acquire to queue",
      );
      // The release and the close in the same turn: lockd may grant the closing client.
      const released = raw.request(`R ${key} ${token}`);
      await client.close();
      assert.equal(await released, `R ${key} R`);
      await acquiring.catch(() => {});
      await waitFor(
        async () => (await raw.request(`I ${key}`)) === `I ${key} F`,
        `${key} to be free`,
      );
    }
  });
});
