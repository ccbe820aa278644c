/**
 * The layering of docs/architecture.md, checked on the source tree: pure cores import no
 * I/O, `Deno.*` stays in the few files meant for it, the client never imports the server,
 * and no source file grows past a few hundred lines.
 *
 * @module
 */

import assert from "node:assert/strict";

const ROOT = new URL("../", import.meta.url);

/** Every `.ts` file under `dir` (relative to the repository root). */
function sources(dir: string): string[] {
  const out: string[] = [];
  const walk = (path: string) => {
    for (const entry of Deno.readDirSync(new URL(path, ROOT))) {
      const child = `${path}/${entry.name}`;
      if (entry.isDirectory) walk(child);
      else if (entry.name.endsWith(".ts")) out.push(child);
    }
  };
  walk(dir);
  return out.sort();
}

function read(path: string): string {
  return Deno.readTextFileSync(new URL(path, ROOT));
}

/** The code of `path` without comments (JSDoc examples mention Deno.* and imports). */
function code(path: string): string {
  return read(path).replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, "");
}

/** The modules `path` imports (static and dynamic). */
function imports(path: string): string[] {
  return [...code(path).matchAll(/(?:from|import)\s*\(?\s*"([^"]+)"/g)].map((m) => m[1]);
}

Deno.test("server/engine and the pure cluster modules import nothing with I/O", () => {
  const pure = [
    ...sources("server/engine"),
    "server/cluster/election.ts",
    "server/cluster/peer_codec.ts",
  ];
  for (const path of pure) {
    for (const target of imports(path)) {
      const ok = target.startsWith("./") ||
        target === "../../client/codec.ts";
      assert.ok(ok, `${path} imports ${target}`);
    }
    assert.doesNotMatch(code(path), /\bDeno\./, `${path} uses Deno.*`);
  }
});

Deno.test("the role machine and its parts use no Deno.* (network and timers are injected)", () => {
  const io = new Set(["server/cluster/peer_link.ts", "server/cluster/network.ts"]);
  for (const path of sources("server/cluster").filter((p) => !io.has(p))) {
    assert.doesNotMatch(code(path), /\bDeno\./, `${path} uses Deno.*`);
    assert.doesNotMatch(code(path), /\bset(Timeout|Interval)\(/, `${path} arms a real timer`);
  }
});

Deno.test("Deno.* appears under client/ only in tcp.ts and bridge/deno.ts", () => {
  const allowed = new Set(["client/tcp.ts", "client/bridge/deno.ts"]);
  for (const path of [...sources("client"), "mod.ts"]) {
    if (allowed.has(path)) continue;
    assert.doesNotMatch(code(path), /\bDeno\./, `${path} uses Deno.*`);
  }
});

Deno.test("node:* imports under client/ only in node_tcp.ts, loaded only by dial.ts on demand", () => {
  // Like tcp.ts for Deno: the one runtime-specific transport, which browsers never evaluate
  // because dial.ts imports it dynamically, and only for a TCP address outside Deno.
  for (const path of [...sources("client"), "mod.ts"]) {
    if (path === "client/node_tcp.ts") continue;
    for (const target of imports(path)) {
      assert.doesNotMatch(target, /^node:/, `${path} imports ${target}`);
    }
    assert.doesNotMatch(code(path), /\brequire\(/, `${path} calls require()`);
  }
  for (const path of [...sources("client"), "mod.ts"]) {
    const staticImports = [...code(path).matchAll(/\bfrom\s*"([^"]+)"/g)].map((m) => m[1]);
    for (const target of staticImports) {
      assert.doesNotMatch(
        target,
        /(?:^|\/)(?:node_)?tcp\.ts$/,
        `${path} imports ${target} statically`,
      );
    }
  }
  assert.match(code("client/dial.ts"), /await import\("\.\/node_tcp\.ts"\)/);
});

Deno.test("the client package never imports the server, tests or benchmarks", () => {
  for (const path of [...sources("client"), "mod.ts"]) {
    for (const target of imports(path)) {
      assert.doesNotMatch(target, /server\/|tests\/|bench\//, `${path} imports ${target}`);
    }
  }
});

Deno.test("no source file of the server, client or benchmark is over 500 lines", () => {
  for (const path of [...sources("server"), ...sources("client"), ...sources("bench"), "mod.ts"]) {
    const lines = read(path).split("\n").length;
    assert.ok(lines <= 500, `${path} has ${lines} lines`);
  }
});

Deno.test("the chaos harness treats the server as a black box and keeps its files short", () => {
  for (const path of sources("chaos")) {
    for (const target of imports(path)) {
      assert.doesNotMatch(target, /server\//, `${path} imports ${target}`);
    }
    const lines = read(path).split("\n").length;
    assert.ok(lines <= 500, `${path} has ${lines} lines`);
  }
});

Deno.test("the pure parts of the lockd command use no Deno.* and import no I/O", () => {
  const pure = ["args.ts", "exit.ts", "format.ts", "help.ts", "parse.ts"];
  const allowed = new Set([
    "node:util",
    "../../client/address.ts",
    "../../client/codec.ts",
    "../../client/errors.ts",
    "../../client/inspect.ts", // for a type only
    ...pure.map((file) => `./${file}`),
  ]);
  for (const file of pure) {
    const path = `server/cmd/${file}`;
    for (const target of imports(path)) assert.ok(allowed.has(target), `${path} imports ${target}`);
    assert.doesNotMatch(code(path), /\bDeno\./, `${path} uses Deno.*`);
  }
});

Deno.test("the HTTP endpoints' routes use no Deno.*: http.ts alone serves them", () => {
  const path = "server/http_routes.ts";
  assert.doesNotMatch(code(path), /\bDeno\./, `${path} uses Deno.*`);
  // http_answer.ts (HEAD answers, shared with the bridge) is Web APIs only, and imports nothing.
  const answer = "client/http_answer.ts";
  assert.doesNotMatch(code(answer), /\bDeno\./, `${answer} uses Deno.*`);
  assert.deepEqual(imports(answer), [], `${answer} imports nothing`);
  const allowed = ["node:crypto", "../client/codec.ts", "../client/http_answer.ts"];
  for (const target of imports(path)) {
    const ok = [...allowed, "./assets/status.html"].includes(target);
    assert.ok(ok, `${path} imports ${target}`);
  }
});
