/**
 * `@lockd/client` in every runtime it supports (issue 15): the same black-box scenarios
 * (`tests/_runtime_scenarios.mjs`, plain JavaScript) run in Deno, Node.js 24 and Bun against
 * real lockd processes on 127.0.0.1: acquire, extend, release, contention, a wait that runs
 * out, abort, `await using`; TLS with `caCerts` and a credential; FIFO across two processes;
 * failover across a 2-node cluster after a kill -9 of the active; a script that never closes
 * its client exits by itself; and, with neither `Deno` nor `process`, a TCP address fails
 * with a clear message. The runtimes of one scenario run at once, each a step of its test.
 *
 * Node and Bun come from `.tools/` (`.ci/run` installs them; see `tests/_runtimes.ts`). A
 * missing one is skipped with a warning, unless `LOCKD_REQUIRE_RUNTIMES=1` (set by
 * `.ci/run`), which makes it a failure.
 */

import assert from "node:assert/strict";
import { Cluster, replicated } from "./_cluster.ts";
import { LineClient, type ServerProcess, waitFor, withServer as withServerOf } from "./_helpers.ts";
import { freePorts } from "./_net.ts";
import {
  findRuntime,
  runScript,
  type Runtime,
  type RuntimeName,
  ScriptProcess,
} from "./_runtimes.ts";
import { testPki, tlsArgs } from "./_tls.ts";

const SCRIPT = new URL("_runtime_scenarios.mjs", import.meta.url).pathname;
const REQUIRED = Deno.env.get("LOCKD_REQUIRE_RUNTIMES") === "1";
const NAMES: RuntimeName[] = ["deno", "node", "bun"];

const found = await Promise.all(NAMES.map((name) => findRuntime(name)));
const runtimes = found.filter((r): r is Runtime => r !== undefined);
const missing = NAMES.filter((_, i) => found[i] === undefined);

if (missing.length > 0) {
  if (REQUIRED) {
    Deno.test(`every runtime is installed (LOCKD_REQUIRE_RUNTIMES=1): ${missing.join(", ")}`, () => {
      assert.fail(
        `${missing.join(", ")} not found in .tools/ (run .ci/run, or set LOCKD_NODE / LOCKD_BUN)`,
      );
    });
  } else {
    console.warn(
      `%c!!! tests/runtimes_test.ts: ${missing.join(", ")} not found in .tools/: SKIPPED ` +
        `(.ci/run installs them; LOCKD_REQUIRE_RUNTIMES=1 makes this a failure) !!!`,
      "color: red; font-weight: bold",
    );
  }
}

/** Runs `fn` for every runtime at once, then reports each runtime as a step. */
async function inEveryRuntime(
  t: Deno.TestContext,
  fn: (runtime: Runtime) => Promise<void>,
): Promise<void> {
  const outcomes = await Promise.allSettled(runtimes.map((runtime) => fn(runtime)));
  for (const [i, runtime] of runtimes.entries()) {
    const outcome = outcomes[i];
    await t.step(runtime.version, () => {
      if (outcome.status === "rejected") throw outcome.reason;
    });
  }
}

/** Runs a scenario to its end in `runtime`; returns its result. */
async function scenario(
  runtime: Runtime,
  name: string,
  params: Record<string, unknown>,
  timeoutMs = 20_000,
): Promise<Record<string, unknown>> {
  const run = await runScript(runtime, SCRIPT, [runtime.moduleUrl, name, JSON.stringify(params)], {
    timeoutMs,
  });
  const what = `${runtime.name} ${name}`;
  assert.ok(!run.timedOut, `${what} ran past ${timeoutMs} ms:\n${run.stdout}${run.stderr}`);
  assert.equal(run.code, 0, `${what} exited with ${run.code}:\n${run.stdout}${run.stderr}`);
  const last = run.stdout.trim().split("\n").at(-1) ?? "";
  const parsed = JSON.parse(last);
  return { ...parsed.result, ms: run.ms };
}

/** Starts a server with `args`, runs `fn`, then stops it and removes its data directory. */
function withServer(args: string[], fn: (server: ServerProcess) => Promise<void>): Promise<void> {
  return withServerOf({ args }, (server) => fn(server));
}

Deno.test("every runtime: acquire, extend, release, contention, wait limit, abort, await using", async (t) => {
  await withServer([], async (server) => {
    await inEveryRuntime(t, async (runtime) => {
      const r = await scenario(runtime, "basic", {
        address: server.address,
        prefix: `basic-${runtime.name}`,
      });
      assert.deepEqual(
        { ...r, waitMs: undefined, abortMs: undefined, ms: undefined },
        {
          tokenType: "bigint",
          key: `basic-${runtime.name}:a`,
          leaseAfterExtend: 20,
          inspectHeld: true,
          inspectAfterRelease: false,
          extendReleased: false,
          signalAfterRelease: false,
          tokensGrow: true,
          tryWhileHeld: true,
          waitRunsOut: "LockTimeoutError",
          timeoutClass: true,
          abort: "AbortError",
          abortClass: true,
          abortCause: "caller gave up",
          abortedBefore: "AbortError",
          freeAfterAbort: true,
          asyncDispose: true,
          // Node.js 22 has Symbol.asyncDispose but not the syntax: the scenario calls it.
          awaitUsingSyntax: !runtime.version.startsWith("node 22."),
          heldInBlock: true,
          freeAfterBlock: true,
          freeAfterClientBlock: true,
          queuedOnClose: "LockError",
          waitersAfterClose: 0,
          waitMs: undefined,
          abortMs: undefined,
          ms: undefined,
        },
      );
      assert.ok((r.waitMs as number) >= 250, `the wait ran out after ${r.waitMs} ms`);
      assert.ok((r.abortMs as number) < 1000, `the abort took ${r.abortMs} ms`);
    });
  });
});

Deno.test("every runtime: TLS with caCerts (by IP and by name) and a credential, a wrong CA, a wrong secret", async (t) => {
  const pki = await testPki();
  const file = `${pki.dir}/runtimes.auth`;
  await Deno.writeTextFile(file, "ops runtimes-Secret-0123456789 ops:\n");
  // A server per runtime: a refused hello slows every later hello from 127.0.0.1 down.
  await inEveryRuntime(t, async (runtime) => {
    await withServer([...tlsArgs(pki), "--auth-file", file], async (server) => {
      const r = await scenario(runtime, "secure", {
        port: server.port,
        ca: pki.caPem,
        otherCa: pki.otherCaPem,
        name: "ops",
        secret: "runtimes-Secret-0123456789",
        keyPrefix: "ops:",
        prefix: runtime.name,
      });
      assert.deepEqual({ ...r, ms: undefined }, {
        "tls-127.0.0.1": "bigint",
        "tls-localhost": "bigint",
        otherCa: "LockUnavailableError",
        otherCaClass: true,
        wrongSecret: "LockRejectedError",
        wrongSecretClass: true,
        wrongSecretMessage: "authentication failed",
        ms: undefined,
      });
    });
  });
});

/** The number of waiters `I <key>` reports (`I <key> I <token> <lease left> <waiters> ...`). */
async function waiters(holder: LineClient, key: string): Promise<number> {
  const parts = ((await holder.request(`I ${key}`)) ?? "").split(" ");
  return parts[2] === "I" ? Number(parts[5]) : 0;
}

Deno.test("every runtime: two processes queued on one key are granted first come, first served", async (t) => {
  await withServer([], async (server) => {
    await inEveryRuntime(t, async (runtime) => {
      const key = `fifo-${runtime.name}`;
      const holder = await LineClient.connect(server.port);
      const queued: ScriptProcess[] = [];
      try {
        assert.match((await holder.request(`A ${key} 30 0`))!, new RegExp(`^A ${key} A \\d+$`));
        for (const n of [1, 2]) {
          queued.push(
            new ScriptProcess(runtime, SCRIPT, [
              runtime.moduleUrl,
              "waiter",
              JSON.stringify({ address: server.address, key, holdMs: 100 }),
            ]),
          );
          await waitFor(async () => (await waiters(holder, key)) === n, `waiter ${n}`, 15_000);
        }
        const token = BigInt((await holder.request(`I ${key}`))!.split(" ")[3]);
        assert.equal(await holder.request(`R ${key} ${token}`), `R ${key} R`);
        const [first, second] = await Promise.all(queued.map((p) => p.result(15_000)));
        const tokens = [BigInt(first.token as string), BigInt(second.token as string)];
        assert.ok(
          token < tokens[0] && tokens[0] < tokens[1],
          `grants in order ${token}, ${tokens[0]}, ${tokens[1]}`,
        );
      } finally {
        await Promise.all(queued.map((p) => p.kill()));
        await holder.close();
      }
    });
  });
});

Deno.test("every runtime: a client given both nodes follows a kill -9 of the active to the new one", async (t) => {
  await Cluster.run(2, async (cluster) => {
    const active = await cluster.waitForOneActive({ timeoutMs: 10_000 });
    const standby = cluster.members.find((m) => m !== active)!;
    const holders = runtimes.map((runtime) =>
      new ScriptProcess(runtime, SCRIPT, [
        runtime.moduleUrl,
        "failover",
        JSON.stringify({ addresses: cluster.addresses, key: `failover-${runtime.name}` }),
      ])
    );
    try {
      // Each holds its key, and the standby has the grant before the active dies.
      const held = await Promise.allSettled(holders.map(async (p) => {
        const event = await p.next(15_000);
        assert.equal(event.event, "held", JSON.stringify(event));
        await replicated(standby, `failover-${p.runtime.name}`, BigInt(event.token as string));
        return BigInt(event.token as string);
      }));
      await active.kill("SIGKILL");
      await inEveryRuntime(t, async (runtime) => {
        const i = runtimes.indexOf(runtime);
        const token = held[i];
        if (token.status === "rejected") throw token.reason;
        await holders[i].send("go", true);
        const r = await holders[i].result(20_000);
        assert.equal(r.extend, "resolved", "the lock was extended on the new active");
        assert.ok(BigInt(r.nextToken as string) > token.value, "a new grant above the old");
        assert.equal(r.signalAborted, false, "losing one node of two does not signal a loss");
        assert.ok((r.ms as number) < 10_000, `the failover took ${r.ms} ms`);
      });
    } finally {
      await Promise.all(holders.map((p) => p.kill()));
    }
  });
});

Deno.test("every runtime: a script that never closes its clients exits by itself", async (t) => {
  await withServer([], async (server) => {
    const [downPort] = freePorts(1);
    await inEveryRuntime(t, async (runtime) => {
      const r = await scenario(runtime, "exit", {
        address: server.address,
        downAddress: `127.0.0.1:${downPort}`,
        prefix: `exit-${runtime.name}`,
      }, 15_000);
      assert.equal(r.done, true);
      assert.equal(r.unavailable, "LockUnavailableError");
      assert.ok((r.ms as number) < 5000, `${runtime.name} exited after ${r.ms} ms`);
    });
  });
});

Deno.test("every runtime: without Deno or process (a browser, a worker) a TCP address says to use the bridge", async (t) => {
  await inEveryRuntime(t, async (runtime) => {
    const r = await scenario(runtime, "no-tcp", { address: "127.0.0.1:7321" });
    assert.match(r.connect as string, /needs Deno, Node\.js or Bun.*WebSocket bridge/);
    assert.equal(r.acquire, "LockUnavailableError");
    assert.match(r.acquireMessage as string, /WebSocket bridge/);
  });
});
