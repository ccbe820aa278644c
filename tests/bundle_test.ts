/**
 * Tests of the browser bundle and the `./bridge` export (issue 5): the committed
 * `server/assets/lockd-client.js` is what the `bundle` task builds from the sources today,
 * it uses no Deno API and no Node built-in, and the bridge entry point is documented well
 * enough for `deno doc --lint`.
 */

import assert from "node:assert/strict";

const ROOT = new URL("../", import.meta.url);
const COMMITTED = new URL("server/assets/lockd-client.js", ROOT);

/** Runs `deno <args>` in the package root. */
async function deno(args: string[]): Promise<{ code: number; output: string }> {
  const out = await new Deno.Command(Deno.execPath(), {
    args,
    cwd: ROOT,
    env: { NO_COLOR: "1" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decoder = new TextDecoder();
  return { code: out.code, output: decoder.decode(out.stdout) + decoder.decode(out.stderr) };
}

Deno.test("bundle task matches the committed server/assets/lockd-client.js", async () => {
  const tasks = JSON.parse(await Deno.readTextFile(new URL("deno.json", ROOT))).tasks;
  assert.equal(
    tasks.bundle,
    "deno bundle --platform browser --external=./tcp.ts --external=./node_tcp.ts -o server/assets/lockd-client.js mod.ts",
    "this test rebuilds with the same command",
  );
  const dir = await Deno.makeTempDir({ prefix: "lockd-bundle-" });
  try {
    const fresh = `${dir}/lockd-client.js`;
    const { code, output } = await deno([
      "bundle",
      "--platform",
      "browser",
      "--external=./tcp.ts",
      "--external=./node_tcp.ts",
      "-o",
      fresh,
      "mod.ts",
    ]);
    assert.equal(code, 0, output);
    assert.equal(
      await Deno.readTextFile(fresh),
      await Deno.readTextFile(COMMITTED),
      "server/assets/lockd-client.js is stale: run `deno task bundle`",
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/** The code of a bundle without its comments (JSDoc examples may mention `Deno.`). */
function withoutComments(code: string): string {
  return code.replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, "");
}

Deno.test("bundle uses no Deno API and no Node built-in", async () => {
  const bundle = withoutComments(await Deno.readTextFile(COMMITTED));
  const uses = bundle.split("\n").filter((line) => /\bDeno\s*(?:\?\.|\.|\[)/.test(line));
  assert.deepEqual(uses, [], "the browser bundle uses `Deno`");
  assert.ok(!/["']node:/.test(bundle), "the browser bundle imports a `node:` module");
  assert.ok(!/\brequire\(/.test(bundle), "the browser bundle calls require()");
  // Its only imports are the TCP transports (Deno's, and node:net's for Node.js and Bun),
  // loaded on demand for TCP addresses only, which a browser never gets to.
  const imports = [...bundle.matchAll(/\bimport\s*(?:\(\s*|[^;]*?from\s*)["']([^"']+)["']/g)]
    .map((m) => m[1]);
  assert.deepEqual(imports, ["./tcp.ts", "./node_tcp.ts"]);
  assert.match(bundle, /await import\("\.\/tcp\.ts"\)/);
  assert.match(bundle, /await import\("\.\/node_tcp\.ts"\)/);
  // What a page imports.
  const exports = /export\s*\{([^}]*)\}\s*;?\s*$/.exec(bundle);
  assert.ok(exports, "the bundle ends with its exports");
  const names = exports[1].split(",").map((n) => n.trim()).filter((n) => n !== "");
  for (const name of ["LockClient", "LockError", "LockTimeoutError", "LockUnavailableError"]) {
    assert.ok(names.includes(name), `the bundle exports ${name}`);
  }
});

Deno.test("deno doc --lint passes on the ./bridge export alone", async () => {
  const { code, output } = await deno(["doc", "--lint", "client/bridge.ts"]);
  assert.equal(code, 0, output);
});

Deno.test("deno doc --lint passes on every export of the package together", async () => {
  const exports: Record<string, string> =
    JSON.parse(await Deno.readTextFile(new URL("deno.json", ROOT))).exports;
  assert.equal(exports["./bridge"], "./client/bridge.ts");
  const { code, output } = await deno(["doc", "--lint", ...Object.values(exports)]);
  assert.equal(code, 0, output);
});
