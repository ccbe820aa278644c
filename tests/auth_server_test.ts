/**
 * Authentication of a real lockd process over raw TCP (docs/security.md, "Credentials";
 * docs/protocol.md, "Sessions and authentication"): with `--auth-file`, the first line must
 * be a valid hello; a wrong credential gets one `E` with no hint and a closed connection;
 * failures from one address are slowed; a key outside the credential's prefix gets `E` and
 * changes nothing; the file is re-read without a restart; secrets never reach logs or `ps`.
 */

import assert from "node:assert/strict";
import { LockClient, LockRejectedError } from "../mod.ts";
import { grantOf, LineClient, type ServerProcess, startServer, waitFor } from "./_helpers.ts";

const BILLING_SECRET = "billing-Secret-0f3a9c71e2";
const ADMIN_SECRET = "admin-Secret-77d1b0a4c9";
const NEW_SECRET = "reports-Secret-5e8c2d13aa";
const WRONG_SECRET = "guess-Secret-9999999999";

async function sha256Hex(text: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** An auth file: billing (plain secret, prefix `billing:`), admin (hashed, any key). */
async function authFileText(extra = ""): Promise<string> {
  return `# test credentials\n` +
    `billing ${BILLING_SECRET} billing:\n` +
    `admin\tsha256:${await sha256Hex(ADMIN_SECRET)}\t*\n` + extra;
}

interface AuthServer {
  server: ServerProcess;
  file: string;
  dir: string;
  close(): Promise<void>;
}

async function withAuthServer(
  fn: (s: AuthServer) => Promise<void>,
  args: string[] = [],
): Promise<void> {
  const dir = await Deno.makeTempDir({ prefix: "lockd-auth-" });
  const file = `${dir}/clients.auth`;
  await Deno.writeTextFile(file, await authFileText());
  const server = await startServer({ args: ["--auth-file", file, ...args] });
  const s: AuthServer = {
    server,
    file,
    dir,
    async close() {
      await server.stop();
      await Deno.remove(server.dataDir, { recursive: true });
      await Deno.remove(dir, { recursive: true });
    },
  };
  try {
    await fn(s);
  } finally {
    await s.close();
  }
}

function hello(name: string, credential?: [string, string], session = "-"): string {
  return `HELLO 1 ${session} ${name}` + (credential ? ` ${credential[0]} ${credential[1]}` : "");
}

/** Opens a connection, says hello with `credential`, and checks it is accepted. */
async function signedIn(port: number, credential: [string, string]): Promise<LineClient> {
  const c = await LineClient.connect(port);
  assert.equal(await c.request(hello("tester", credential)), "HELLO - OK");
  return c;
}

/** Sends `lines` on a fresh connection; returns every line until the server closes it. */
async function refusedWith(port: number, lines: string[]): Promise<string[]> {
  const c = await LineClient.connect(port);
  try {
    await c.write(lines.map((l) => l + "\n").join(""));
    return await c.closedByPeer(10_000);
  } finally {
    await c.close();
  }
}

Deno.test("with --auth-file, a first line that is not a hello gets 'E authentication required' and a close", async () => {
  await withAuthServer(async ({ server }) => {
    for (const line of ["A billing:k 10 0", "R billing:k 1", "X billing:k 1 10", "junk", "?"]) {
      const [op, key] = line.split(" ");
      const rest = await refusedWith(server.port, [line, "A billing:k 10 0"]);
      assert.deepEqual(rest, [`${op} ${key ?? "-"} E authentication required`], line);
    }
    // Nothing was taken: an authenticated client gets the key at once.
    const c = await signedIn(server.port, ["billing", BILLING_SECRET]);
    assert.match((await c.request("A billing:k 10 0"))!, /^A billing:k A \d+$/);
    await c.close();
  });
});

Deno.test("a wrong credential gets one E without saying which part was wrong, and a close", async () => {
  await withAuthServer(async ({ server }) => {
    const answers = new Set<string>();
    for (
      const credential of [
        ["billing", WRONG_SECRET], // wrong secret
        ["nobody", BILLING_SECRET], // unknown name, a real secret
        ["admin", BILLING_SECRET], // another credential's secret
        undefined, // no credential at all
      ] as ([string, string] | undefined)[]
    ) {
      const rest = await refusedWith(server.port, [hello("w", credential), "A billing:x 10 0"]);
      assert.equal(rest.length, 1, `one line, then the close: ${JSON.stringify(rest)}`);
      answers.add(rest[0]);
    }
    assert.deepEqual([...answers], ["HELLO - E authentication failed"]);
    // A hashed entry accepts its secret, not its hash.
    const hash = await sha256Hex(ADMIN_SECRET);
    assert.deepEqual(await refusedWith(server.port, [hello("w", ["admin", `sha256:${hash}`])]), [
      "HELLO - E authentication failed",
    ]);
    const admin = await signedIn(server.port, ["admin", ADMIN_SECRET]);
    await admin.close();
  });
});

Deno.test("a malformed hello with auth on gets E and a close; without auth the connection stays", async () => {
  await withAuthServer(async ({ server }) => {
    for (
      const line of [
        "HELLO",
        "HELLO 2 - w billing " + BILLING_SECRET,
        "HELLO 1 xyz w billing " + BILLING_SECRET,
        "HELLO 1 - w billing",
        "HELLO 1 -  w billing " + BILLING_SECRET,
      ]
    ) {
      const rest = await refusedWith(server.port, [line, "A billing:m 10 0"]);
      assert.equal(rest.length, 1, line);
      assert.match(rest[0], /^HELLO \S+ E /, line);
      assert.ok(!rest[0].includes(BILLING_SECRET), "the reply never repeats the secret");
    }
  });
  const open = await startServer();
  try {
    const c = await LineClient.connect(open.port);
    assert.match((await c.request("HELLO 1 zz w"))!, /^HELLO - E session must be/);
    assert.match((await c.request("A open:k 10 0"))!, /^A open:k A \d+$/);
    await c.close();
  } finally {
    await open.stop();
    await Deno.remove(open.dataDir, { recursive: true });
  }
});

Deno.test("a hello after other lines is refused: with auth the connection closes, without it stays", async () => {
  await withAuthServer(async ({ server }) => {
    // With auth on, the non-hello first line already closes the connection.
    assert.deepEqual(
      await refusedWith(server.port, ["A billing:h 10 0", hello("w", ["billing", BILLING_SECRET])]),
      ["A billing:h E authentication required"],
    );
    // A second hello on an authenticated connection is refused and changes nothing.
    const c = await signedIn(server.port, ["billing", BILLING_SECRET]);
    assert.equal(
      await c.request(hello("w", ["admin", ADMIN_SECRET])),
      "HELLO - E hello must be the first line",
    );
    assert.match(
      (await c.request("A elsewhere 10 0"))!,
      /^A elsewhere E key outside this credential's prefix$/,
      "the second hello did not widen the prefix",
    );
    await c.close();
  });
  const open = await startServer();
  try {
    const c = await LineClient.connect(open.port);
    assert.match((await c.request("A open:h 10 0"))!, /^A open:h A \d+$/);
    assert.equal(await c.request("HELLO 1 - late"), "HELLO - E hello must be the first line");
    assert.match((await c.request("A open:h2 10 0"))!, /^A open:h2 A \d+$/);
    await c.close();
  } finally {
    await open.stop();
    await Deno.remove(open.dataDir, { recursive: true });
  }
});

Deno.test("a key outside the credential's prefix gets E and changes nothing", async () => {
  await withAuthServer(async ({ server }) => {
    const admin = await signedIn(server.port, ["admin", ADMIN_SECRET]);
    const token = /^A shared:k A (\d+)$/.exec((await admin.request("A shared:k 30 0"))!)![1];
    const billing = await signedIn(server.port, ["billing", BILLING_SECRET]);
    const outside = "E key outside this credential's prefix";
    assert.equal(await billing.request("A shared:k 30 5"), `A shared:k ${outside}`);
    assert.equal(await billing.request(`R shared:k ${token}`), `R shared:k ${outside}`);
    assert.equal(await billing.request(`X shared:k ${token} 30`), `X shared:k ${outside}`);
    assert.equal(await billing.request("A free:k 30 0"), `A free:k ${outside}`);
    // "billing" is not "billing:": the prefix is compared as given.
    assert.equal(await billing.request("A billingx 30 0"), `A billingx ${outside}`);
    // Nothing changed: admin still holds shared:k with its token, free:k is free.
    assert.equal(await admin.request(`X shared:k ${token} 30`), "X shared:k X");
    assert.match((await admin.request("A free:k 30 0"))!, /^A free:k A \d+$/);
    // Inside the prefix, billing works as usual.
    assert.match((await billing.request("A billing:k 30 0"))!, /^A billing:k A \d+$/);
    await Promise.all([admin.close(), billing.close()]);
  });
});

Deno.test("failed hellos from one address are answered slower and slower; a right one is not", async () => {
  await withAuthServer(async ({ server }) => {
    const took: number[] = [];
    for (let i = 0; i < 4; i++) {
      const started = performance.now();
      const rest = await refusedWith(server.port, [hello("w", ["billing", WRONG_SECRET + i])]);
      took.push(performance.now() - started);
      assert.deepEqual(rest, ["HELLO - E authentication failed"]);
    }
    // 100, 200, 400, 800 ms by docs/security.md (allow scheduling slack below).
    assert.ok(took[0] >= 90, `first failure answered after ${took[0]} ms`);
    assert.ok(took[3] >= 700, `fourth failure answered after ${took[3]} ms`);
    assert.ok(took[3] > took[1] && took[2] > took[0], `delays grow: ${took.join(", ")}`);
    // The right credential is answered at once even right after the failures.
    const started = performance.now();
    const c = await signedIn(server.port, ["billing", BILLING_SECRET]);
    assert.ok(performance.now() - started < took[3], "a valid hello is not held back");
    await c.close();
  });
});

Deno.test("hellos with no credential are refused unthrottled: they guess nothing", async () => {
  await withAuthServer(async ({ server }) => {
    const mark = server.stderr().length;
    // At once, as guesses on parallel connections would come.
    const refusals = await Promise.all(
      Array.from({ length: 6 }, () => refusedWith(server.port, [hello("w")])),
    );
    for (const rest of refusals) assert.deepEqual(rest, ["HELLO - E authentication failed"]);
    await waitFor(
      () => server.stderr().slice(mark).split(": no credential").length === 7,
      "six refusals logged",
    );
    // Counted as failures, the fourth would be refused unchecked (locked out).
    assert.doesNotMatch(server.stderr().slice(mark), /not checked/);
    const c = await signedIn(server.port, ["billing", BILLING_SECRET]);
    await c.close();
  });
});

Deno.test("guesses sent on many connections at once are not checked in parallel", async () => {
  await withAuthServer(async ({ server }) => {
    for (let i = 0; i < 3; i++) {
      await refusedWith(server.port, [hello("w", ["billing", WRONG_SECRET + i])]);
    }
    // A fourth guess is checked (the third's delay passed): from it, 800 ms of lockout.
    let mark = server.stderr().length;
    const fourth = refusedWith(server.port, [hello("w", ["billing", WRONG_SECRET])]);
    await waitFor(
      () => /wrong credential for billing/.test(server.stderr().slice(mark)),
      "the fourth guess to be checked",
    );
    // Locked out: 20 guesses at once, the right secret among them, are all refused unchecked.
    mark = server.stderr().length;
    const guesses = Array.from(
      { length: 20 },
      (_, i) =>
        refusedWith(server.port, [hello("w", ["billing", i === 7 ? BILLING_SECRET : `x${i}`])]),
    );
    for (const rest of await Promise.all([fourth, ...guesses])) {
      assert.deepEqual(rest, ["HELLO - E authentication failed"]);
    }
    await waitFor(
      () =>
        (server.stderr().slice(mark).match(/too many failures, not checked/g) ?? []).length >= 20,
      "the unchecked refusals to be logged",
    );
    // Once the delay has passed, the right secret is checked and accepted.
    const c = await signedIn(server.port, ["billing", BILLING_SECRET]);
    await c.close();
  });
});

Deno.test("the auth file is re-read when it changes; a bad new file keeps the old credentials", async () => {
  await withAuthServer(async ({ server, file }) => {
    const helloNew = hello("r", ["reports", NEW_SECRET]);
    assert.deepEqual(await refusedWith(server.port, [helloNew]), [
      "HELLO - E authentication failed",
    ]);
    await Deno.writeTextFile(file, await authFileText(`reports ${NEW_SECRET} reports:\n`));
    await waitFor(
      async () => {
        const c = await LineClient.connect(server.port);
        try {
          return (await c.request(helloNew, 8000)) === "HELLO - OK";
        } finally {
          await c.close();
        }
      },
      "the new credential to work",
      15_000,
      200,
    );
    // A malformed file: logged by line number, the credentials in force stay.
    const mark = server.stderr().length;
    await Deno.writeTextFile(file, `reports ${NEW_SECRET}\nbilling only-two-fields\n`);
    await waitFor(
      () => /auth file/i.test(server.stderr().slice(mark)),
      "the bad file to be logged",
      10_000,
      50,
    );
    const logged = server.stderr().slice(mark);
    assert.match(logged, /line 1/);
    assert.ok(!logged.includes(NEW_SECRET), "the log never quotes the file");
    const c = await signedIn(server.port, ["reports", NEW_SECRET]);
    await c.close();
    const b = await signedIn(server.port, ["billing", BILLING_SECRET]);
    await b.close();
  });
});

Deno.test("LockClient presents its credential; a wrong one rejects with LockRejectedError", async () => {
  await withAuthServer(async ({ server }) => {
    const client = new LockClient(server.address, {
      auth: { name: "billing", secret: BILLING_SECRET },
      name: "billing-test",
    });
    const lock = await client.acquire("billing:client", { lease: 10 });
    assert.equal(typeof lock.token, "bigint");
    await assert.rejects(client.acquire("outside", { lease: 10 }), (error) => {
      assert.ok(error instanceof LockRejectedError);
      assert.match(error.serverMessage, /outside this credential's prefix/);
      return true;
    });
    await lock.release();
    await client.close();

    const wrong = new LockClient(server.address, {
      auth: { name: "billing", secret: WRONG_SECRET },
      connectTimeoutMs: 8000,
    });
    try {
      await assert.rejects(wrong.acquire("billing:w", { lease: 10 }), (error) => {
        assert.ok(error instanceof LockRejectedError, String(error));
        assert.match(error.message, /authentication failed/);
        assert.ok(!error.message.includes(WRONG_SECRET), "the error never quotes the secret");
        return true;
      });
    } finally {
      await wrong.close();
    }
    // Without a credential at all.
    const none = new LockClient(server.address, { connectTimeoutMs: 8000 });
    try {
      await assert.rejects(none.acquire("billing:n", { lease: 10 }), LockRejectedError);
    } finally {
      await none.close();
    }
  });
});

Deno.test("secrets never appear in the logs, in replies or in ps", async () => {
  const dir = await Deno.makeTempDir({ prefix: "lockd-auth-" });
  const peerSecret = "peer-Secret-3c1f9e0b7d5a2468";
  await Deno.writeTextFile(`${dir}/cluster.secret`, peerSecret + "\n");
  try {
    await withAuthServer(async ({ server }) => {
      const replies: string[] = [];
      replies.push(
        ...await refusedWith(server.port, [hello("w", ["billing", WRONG_SECRET])]),
        ...await refusedWith(server.port, [hello("w", ["admin", BILLING_SECRET])]),
        ...await refusedWith(server.port, [`HELLO 1 - w billing ${BILLING_SECRET} extra`]),
      );
      const c = await signedIn(server.port, ["billing", BILLING_SECRET]);
      replies.push((await c.request("A billing:s 10 0"))!);
      await c.close();
      const ps = await new Deno.Command("ps", { args: ["-eo", "args"], stdout: "piped" })
        .output();
      const processes = new TextDecoder().decode(ps.stdout);
      assert.match(processes, /--auth-file/, "ps shows the server");
      await server.stop();
      const logs = server.stderr();
      assert.match(logs, /refused a hello from 127\.0\.0\.1:\d+: wrong credential for billing/);
      for (const secret of [BILLING_SECRET, ADMIN_SECRET, WRONG_SECRET, peerSecret]) {
        assert.ok(!logs.includes(secret), "a secret in the logs");
        assert.ok(!processes.includes(secret), "a secret in ps");
        assert.ok(!replies.some((r) => r.includes(secret)), "a secret in a reply");
      }
    }, ["--peer-secret-file", `${dir}/cluster.secret`]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a secret is never taken from the command line", async () => {
  const { runMain } = await import("./_helpers.ts");
  for (const flag of ["--secret", "--auth", "--peer-secret", "--password"]) {
    const out = await runMain([flag, "hunter2-hunter2"]);
    assert.equal(out.code, 2, flag);
    assert.ok(!out.stderr.includes("hunter2-hunter2"), `${flag}: the value is not echoed`);
  }
  // An unreadable auth file stops the node, naming the file and not its content.
  const out = await runMain([
    "--auth-file",
    "/nonexistent/clients.auth",
    "--listen",
    "127.0.0.1:0",
  ]);
  assert.equal(out.code, 1);
  assert.match(out.stderr, /\/nonexistent\/clients\.auth/);
});

Deno.test("with --auth-file, sockets that never say hello are closed and free their place", async () => {
  await withAuthServer(async ({ server }) => {
    // Three idle sockets fill --max-connections 3: a client with its credential is refused.
    const idle = await Promise.all([0, 1, 2].map(() => LineClient.connect(server.port)));
    try {
      const refused = await LineClient.connect(server.port);
      assert.deepEqual(await refused.closedByPeer(5000), ["- - E too many connections"]);
      await refused.close();
      // Each is closed once FIRST_LINE_MS (10 s) has passed without a first line.
      for (const socket of idle) assert.deepEqual(await socket.closedByPeer(15_000), []);
      assert.match(server.stderr(), /closed 127\.0\.0\.1:\d+: no first line within 10 s/);
      const admin = await signedIn(server.port, ["admin", ADMIN_SECRET]);
      await admin.close();
    } finally {
      for (const socket of idle) await socket.close();
    }
  }, ["--max-connections", "3"]);
});

Deno.test("an auth file reload that revokes a credential closes its connections at their next request", async () => {
  await withAuthServer(async ({ server, file }) => {
    const billing = await signedIn(server.port, ["billing", BILLING_SECRET]);
    const admin = await signedIn(server.port, ["admin", ADMIN_SECRET]);
    try {
      const token = grantOf((await billing.request("A billing:r 30 0"))!, "billing:r");
      // billing is gone from the file (swapped in whole, as docs/security.md advises).
      const next = `${file}.next`;
      await Deno.writeTextFile(next, `admin\tsha256:${await sha256Hex(ADMIN_SECRET)}\t*\n`);
      await Deno.rename(next, file);
      await waitFor(() => /reloaded 1 credential/.test(server.stderr()), "the reload", 10_000);
      assert.equal(
        await billing.request(`R billing:r ${token}`),
        "R billing:r E credential revoked",
      );
      assert.deepEqual(await billing.closedByPeer(), []);
      assert.match(server.stderr(), /its credential billing was revoked or changed/);
      // admin's credential is unchanged: it goes on, and sees the lock still held.
      assert.match((await admin.request("I billing:r"))!, new RegExp(`^I billing:r I ${token} `));
    } finally {
      await billing.close();
      await admin.close();
    }
  });
});
