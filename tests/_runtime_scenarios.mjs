// The client's black-box scenarios, as one plain JavaScript script that runs unchanged in
// Deno, Node.js and Bun (tests/runtimes_test.ts runs it in each): it imports the client from
// the module URL it is given (`mod.ts`, or a bundle of it for Node), talks to the real
// servers the test started, and prints what it saw as JSON lines on stdout: `{"event": ...}`
// while it runs, and `{"result": {...}}` at the end. Only Web APIs, `process.stdin` (present in
// all three) and the client's public API are used.
//
// Arguments: <client module URL> <scenario> <JSON parameters>

const args = globalThis.Deno?.args ?? globalThis.process.argv.slice(2);
const [moduleUrl, scenario, paramsJson] = args;
const params = JSON.parse(paramsJson ?? "{}");
if (scenario === "no-tcp") {
  // What a browser or an edge worker looks like to the client: neither Deno nor Node.
  delete globalThis.Deno;
  delete globalThis.process;
}
const lockd = await import(moduleUrl);
const { LockAbortedError, LockClient, LockRejectedError, LockTimeoutError } = lockd;
const { LockUnavailableError } = lockd;

/** Prints one JSON line (bigints as strings). */
function emit(value) {
  console.log(JSON.stringify(value, (_, v) => typeof v === "bigint" ? String(v) : v));
}

/** The name of what `promise` rejected with, or `"resolved"`. */
async function outcome(promise) {
  try {
    await promise;
    return "resolved";
  } catch (error) {
    return error?.name ?? String(error);
  }
}

/** Resolves after `ms`. */
function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** The next line on stdin (the test's go-ahead). */
function nextLine() {
  const stdin = globalThis.process.stdin;
  return new Promise((resolve) => {
    let text = "";
    const onData = (chunk) => {
      text += String(chunk);
      const nl = text.indexOf("\n");
      if (nl < 0) return;
      stdin.removeListener("data", onData);
      // Done with stdin: a readable stdin would keep the process alive.
      stdin.destroy();
      resolve(text.slice(0, nl));
    };
    stdin.on("data", onData);
    stdin.resume();
  });
}

/** What `_runtime_using.mjs` does, with `Symbol.asyncDispose` called by hand. */
async function disposedByHand(client, address, prefix) {
  const r = {};
  const lock = await client.acquire(`${prefix}:c`, { lease: 30 });
  r.heldInBlock = (await client.tryAcquire(`${prefix}:c`, { lease: 5 })) === null &&
    lock.key === `${prefix}:c`;
  await lock[Symbol.asyncDispose]();
  const free = await client.tryAcquire(`${prefix}:c`, { lease: 5 });
  r.freeAfterBlock = free !== null;
  await free?.release();
  const other = new LockClient(address);
  await other.acquire(`${prefix}:d`, { lease: 30 });
  await other[Symbol.asyncDispose]();
  r.freeAfterClientBlock = (await client.inspect(`${prefix}:d`)).held === false;
  return r;
}

const scenarios = {
  /** Acquire, extend, release, contention, a wait that runs out, abort, `await using`. */
  async basic({ address, prefix }) {
    const r = {};
    const client = new LockClient(address, { name: `${prefix}-client` });
    const lock = await client.acquire(`${prefix}:a`, { lease: 30, wait: 5 });
    r.tokenType = typeof lock.token;
    r.key = lock.key;
    await lock.extend(20);
    r.leaseAfterExtend = lock.lease;
    r.inspectHeld = (await client.inspect(`${prefix}:a`)).held;
    await lock.release();
    r.inspectAfterRelease = (await client.inspect(`${prefix}:a`)).held;
    r.extendReleased = await client.extend(`${prefix}:a`, lock.token, 10);
    r.signalAfterRelease = lock.signal.aborted;

    const held = await client.acquire(`${prefix}:b`, { lease: 30 });
    r.tokensGrow = held.token > lock.token;
    r.tryWhileHeld = (await client.tryAcquire(`${prefix}:b`, { lease: 5 })) === null;
    const waitStarted = performance.now();
    r.waitRunsOut = await outcome(client.acquire(`${prefix}:b`, { lease: 5, wait: 0.3 }));
    r.waitMs = Math.round(performance.now() - waitStarted);
    try {
      await client.acquire(`${prefix}:b`, { lease: 5, wait: 0.3 });
    } catch (error) {
      r.timeoutClass = error instanceof LockTimeoutError;
    }
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error("caller gave up")), 100);
    const abortStarted = performance.now();
    try {
      await client.acquire(`${prefix}:b`, { lease: 5, signal: controller.signal });
      r.abort = "granted";
    } catch (error) {
      r.abort = error.name;
      r.abortClass = error instanceof LockAbortedError;
      r.abortCause = error.cause?.message;
    }
    r.abortMs = Math.round(performance.now() - abortStarted);
    r.abortedBefore = await outcome(
      client.acquire(`${prefix}:b`, { lease: 5, signal: AbortSignal.abort() }),
    );
    await held.release();
    // The aborted acquires left nothing queued or held behind.
    const after = await client.tryAcquire(`${prefix}:b`, { lease: 5 });
    r.freeAfterAbort = after !== null;
    await after?.release();

    r.asyncDispose = typeof lock[Symbol.asyncDispose] === "function" &&
      typeof client[Symbol.asyncDispose] === "function";
    let usingModule;
    try {
      usingModule = await import(new URL("./_runtime_using.mjs", import.meta.url).href);
    } catch (error) {
      if (!(error instanceof SyntaxError)) throw error;
    }
    r.awaitUsingSyntax = usingModule !== undefined;
    Object.assign(
      r,
      usingModule !== undefined
        ? await usingModule.scoped(client, LockClient, address, prefix)
        : await disposedByHand(client, address, prefix),
    );
    // close() with an acquire queued ends once lockd dropped it: nothing waits there after.
    const blocker = await client.acquire(`${prefix}:c`, { lease: 30 });
    const other = new LockClient(address);
    const queued = outcome(other.acquire(`${prefix}:c`, { lease: 30, wait: 10 }));
    while ((await client.inspect(`${prefix}:c`)).waiters === 0) await sleep(10);
    await other.close();
    r.queuedOnClose = await queued;
    r.waitersAfterClose = (await client.inspect(`${prefix}:c`)).waiters;
    await blocker.release();
    await client.close();
    emit({ result: r });
  },

  /** TLS with caCerts (by IP and by name) and a credential; a wrong CA; a wrong credential. */
  async secure({ port, ca, otherCa, name, secret, keyPrefix, prefix }) {
    const r = {};
    const auth = { name, secret };
    for (const host of ["127.0.0.1", "localhost"]) {
      const client = new LockClient(`tls://${host}:${port}`, { caCerts: [ca], auth });
      const lock = await client.acquire(`${keyPrefix}${prefix}-${host}`, { lease: 10 });
      r[`tls-${host}`] = typeof lock.token;
      await lock.release();
      await client.close();
    }
    const stranger = new LockClient(`tls://127.0.0.1:${port}`, {
      caCerts: [otherCa],
      auth,
      connectTimeoutMs: 2000,
      retryTimeoutMs: 1000,
    });
    r.otherCa = await outcome(stranger.acquire(`${keyPrefix}stranger`, { lease: 10 }));
    try {
      await stranger.acquire(`${keyPrefix}stranger`, { lease: 10 });
    } catch (error) {
      r.otherCaClass = error instanceof LockUnavailableError;
    }
    await stranger.close();
    // Last: refused hellos slow down every hello from this address for a while.
    const wrong = new LockClient(`tls://127.0.0.1:${port}`, {
      caCerts: [ca],
      auth: { name, secret: "not-the-secret" },
    });
    try {
      await wrong.acquire(`${keyPrefix}wrong`, { lease: 10 });
      r.wrongSecret = "granted";
    } catch (error) {
      r.wrongSecret = error.name;
      r.wrongSecretClass = error instanceof LockRejectedError;
      r.wrongSecretMessage = error.serverMessage;
    }
    await wrong.close();
    emit({ result: r });
  },

  /** Queues for `key`, says when it is granted, holds it briefly and releases it. */
  async waiter({ address, key, holdMs }) {
    const client = new LockClient(address);
    const lock = await client.acquire(key, { lease: 30, wait: 20 });
    emit({ event: "granted", token: lock.token });
    await new Promise((resolve) => setTimeout(resolve, holdMs));
    await lock.release();
    await client.close();
    emit({ result: { token: lock.token } });
  },

  /** Holds `key` on a cluster; after the go-ahead (the active was killed), extends it. */
  async failover({ addresses, key }) {
    const client = new LockClient(addresses);
    const lock = await client.acquire(key, { lease: 30 });
    emit({ event: "held", token: lock.token });
    await nextLine();
    const started = performance.now();
    const r = { token: lock.token };
    r.extend = await outcome(lock.extend(30));
    const next = await client.acquire(`${key}:after`, { lease: 30, wait: 5 });
    r.ms = Math.round(performance.now() - started);
    r.nextToken = next.token;
    r.signalAborted = lock.signal.aborted;
    await next.release();
    await lock.release();
    await client.close();
    emit({ result: r });
  },

  /**
   * Uses a client and never closes it, and another one whose server is down (it keeps
   * reconnecting in the background): the process must exit by itself all the same.
   */
  async exit({ address, downAddress, prefix }) {
    const client = new LockClient(address);
    const lock = await client.acquire(`${prefix}:exit`, { lease: 30 });
    await lock.release();
    const again = await client.tryAcquire(`${prefix}:exit`, { lease: 30 });
    await again?.release();
    const down = new LockClient(downAddress, { retryTimeoutMs: 200 });
    const unavailable = await outcome(down.acquire(`${prefix}:down`, { lease: 5 }));
    emit({ result: { done: true, unavailable } });
  },

  /** Run with neither `Deno` nor `process`: a TCP address fails with a clear message. */
  async "no-tcp"({ address }) {
    const r = {};
    try {
      await lockd.connectTransport(lockd.parseAddress(address), {
        line() {},
        closed() {},
      }, new AbortController().signal);
      r.connect = "connected";
    } catch (error) {
      r.connect = error.message;
    }
    const client = new LockClient(address, { retryTimeoutMs: 200 });
    try {
      await client.acquire("no-tcp", { lease: 5 });
      r.acquire = "granted";
    } catch (error) {
      r.acquire = error.name;
      r.acquireMessage = error.message;
    }
    await client.close();
    emit({ result: r });
  },
};

const run = scenarios[scenario];
if (run === undefined) throw new Error(`unknown scenario ${JSON.stringify(scenario)}`);
await run(params);
