/**
 * A script that uses `LockClient` and forgets `client.close()` still exits (docs/client.md,
 * "Connections"): idle connections and background reconnects never keep the process alive;
 * outstanding requests and held locks do.
 */

import assert from "node:assert/strict";
import { startServer } from "./_helpers.ts";
import { FakeServer, lockServer } from "./_fake_server.ts";

const MOD = new URL("../mod.ts", import.meta.url).href;

/** Runs `body` as a script with `LockClient` imported; resolves with its exit and output. */
async function runScript(body: string, timeoutMs = 15_000) {
  const script = `import { LockClient } from ${JSON.stringify(MOD)};\n${body}`;
  const child = new Deno.Command(Deno.execPath(), {
    args: ["eval", "--ext=ts", script],
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const started = performance.now();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const killed = new Promise<void>((resolve) => {
    timer = setTimeout(() => {
      child.kill("SIGKILL");
      resolve();
    }, timeoutMs);
  });
  const output = child.output();
  await Promise.race([output, killed]);
  clearTimeout(timer);
  const out = await output;
  return {
    code: out.code,
    ms: performance.now() - started,
    stdout: new TextDecoder().decode(out.stdout),
    stderr: new TextDecoder().decode(out.stderr),
  };
}

/** Script lines defining `connect`: the default transport wrapped, passing on no `ref`. */
const WITHOUT_REF = `
  const { connectTransport } = await import(${JSON.stringify(MOD)});
  const connect = async (address, handlers, signal) => {
    const inner = await connectTransport(address, handlers, signal);
    return { send: (line) => inner.send(line), close: () => inner.close() };
  };`;

Deno.test("a script that acquires, releases and never closes its client exits by itself", async (t) => {
  const server = await startServer();
  try {
    // A connection with requests outstanding is watched every third of staleConnectionMs
    // (here 20 s): that watch must not outlive them, on a transport with ref (a weak timer)
    // or without (a strong one, cancelled once nothing is outstanding).
    for (
      const [name, prelude, connect] of [
        ["the default transport", "", ""],
        ["a custom transport without ref", WITHOUT_REF, "connect, "],
      ]
    ) {
      await t.step(name, async () => {
        const run = await runScript(`
          ${prelude}
          const options = { ${connect}staleConnectionMs: 60_000 };
          const client = new LockClient(${JSON.stringify(server.address)}, options);
          const unused = new LockClient(${JSON.stringify(server.address)}, options);
          const lock = await client.acquire("exit:k", { lease: 30 });
          await lock.release();
          const again = await client.tryAcquire("exit:k", { lease: 30 });
          await again?.release();
          console.log("done");
        `);
        assert.equal(run.code, 0, run.stderr);
        assert.equal(run.stdout.trim(), "done");
        assert.ok(run.ms < 10_000, `exited after ${run.ms} ms`);
      });
    }
  } finally {
    await server.stop();
    await Deno.remove(server.dataDir, { recursive: true });
  }
});

Deno.test("the client's runtime timer outlives a release only briefly, and a held lock keeps it", async (t) => {
  const server = await startServer();
  try {
    // The runtime timer behind the client's timers, armed up to 1 s ahead, outlives the last
    // entry by a few microtasks only: the script ends at once after its last release.
    await t.step("the script ends at once after its last release", async () => {
      const run = await runScript(`
        const client = new LockClient(${JSON.stringify(server.address)});
        const lock = await client.acquire("exit:t", { lease: 30 });
        await lock.release();
        const done = performance.now();
        globalThis.addEventListener("unload", () => {
          console.log(Math.round(performance.now() - done));
        });
      `);
      assert.equal(run.code, 0, run.stderr);
      const after = Number(run.stdout.trim());
      assert.ok(after < 600, `the script ended ${after} ms after its release`);
    });
    // ... and a lock taken next arms it again: its lease warning keeps the script alive.
    await t.step("a lock taken next keeps the script alive until its signal fires", async () => {
      const run = await runScript(`
        const client = new LockClient(${JSON.stringify(server.address)});
        const first = await client.acquire("exit:t", { lease: 30 });
        await first.release();
        const held = await client.acquire("exit:u", { lease: 1.5 });
        held.signal.addEventListener("abort", () => console.log("signal"));
      `);
      assert.equal(run.code, 0, run.stderr);
      assert.equal(run.stdout.trim(), "signal");
    });
  } finally {
    await server.stop();
    await Deno.remove(server.dataDir, { recursive: true });
  }
});

Deno.test("a client whose server is down does not keep the script alive with reconnects", async () => {
  const run = await runScript(`
    const client = new LockClient("127.0.0.1:1", { retryTimeoutMs: 200 });
    await client.acquire("k", { lease: 5 }).catch((e) => console.log(e.name));
  `);
  assert.equal(run.code, 0, run.stderr);
  assert.equal(run.stdout.trim(), "LockUnavailableError");
  assert.ok(run.ms < 10_000, `exited after ${run.ms} ms`);
});

Deno.test("a queued acquire keeps the script alive until it is answered", async () => {
  const server = await startServer();
  try {
    const { LineClient } = await import("./_helpers.ts");
    const holder = await LineClient.connect(server.port);
    assert.match((await holder.request("A exit:q 30 0"))!, /^A exit:q A \d+$/);
    // Nothing but the queued acquire could keep the script alive for its 2 s wait.
    const run = await runScript(`
      const client = new LockClient(${JSON.stringify(server.address)});
      const started = performance.now();
      await client.acquire("exit:q", { lease: 30, wait: 2 }).catch((e) => console.log(e.name));
      console.log(Math.round(performance.now() - started));
    `);
    await holder.close();
    assert.equal(run.code, 0, run.stderr);
    const [name, waited] = run.stdout.trim().split("\n");
    assert.equal(name, "LockTimeoutError");
    assert.ok(Number(waited) >= 1900, `the acquire was answered after ${waited} ms`);
  } finally {
    await server.stop();
    await Deno.remove(server.dataDir, { recursive: true });
  }
});

Deno.test("a queued acquire over a custom transport without ref keeps the script alive", async () => {
  const server = await startServer();
  try {
    const { LineClient } = await import("./_helpers.ts");
    const holder = await LineClient.connect(server.port);
    const token = (await holder.request("A exit:c 30 0"))!.split(" ")[3];
    // A wrapper that passes on send and close only; a wait of 0 has no deadline timer, and
    // no top-level await holds the script: only the client can keep it alive.
    const run = runScript(`
      ${WITHOUT_REF}
      const client = new LockClient(${JSON.stringify(server.address)}, { connect });
      client.acquire("exit:c", { lease: 30, wait: 0 }).then(async (lock) => {
        console.log("granted");
        await lock.release();
        await client.close();
      });
    `);
    await new Promise((resolve) => setTimeout(resolve, 1500));
    assert.equal(await holder.request(`R exit:c ${token}`), "R exit:c R");
    const done = await run;
    await holder.close();
    assert.equal(done.code, 0, done.stderr);
    assert.equal(done.stdout.trim(), "granted");
  } finally {
    await server.stop();
    await Deno.remove(server.dataDir, { recursive: true });
  }
});

Deno.test("a node that answers everything but the hello does not keep the script alive", async () => {
  await using server = await FakeServer.start();
  server.answerHellos = false; // The hello reaches the handler, which never answers it.
  server.handler = lockServer();
  const run = await runScript(`
    const client = new LockClient(${JSON.stringify(server.address)});
    const lock = await client.acquire("exit:h", { lease: 30 });
    await lock.release();
    console.log("done");
  `);
  assert.equal(run.code, 0, run.stderr);
  assert.equal(run.stdout.trim(), "done");
  assert.ok(run.ms < 10_000, `exited after ${run.ms} ms`);
  assert.ok(server.count("HELLO ") >= 1, "the client said hello");
});
