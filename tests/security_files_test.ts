/**
 * The security files' permissions (server/security.ts, docs/security.md): a file holding a
 * secret that any user can read is named in a warning at start (its content never is); one
 * readable by its owner (and group) only is not.
 */

import assert from "node:assert/strict";
import { parseConfig } from "../server/cli.ts";
import { loadSecurity } from "../server/security.ts";
import { capturingLogger } from "./_logger.ts";

const SECRET = "0123456789abcdef0123456789abcdef";

Deno.test({
  name: "loadSecurity() warns about a world-readable secret file, naming it but not its content",
  ignore: Deno.build.os === "windows",
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: "lockd-perm-" });
    try {
      const open = `${dir}/open.secret`, closed = `${dir}/closed.secret`;
      await Deno.writeTextFile(open, SECRET + "\n", { mode: 0o644 });
      await Deno.chmod(open, 0o644); // the umask may have narrowed it
      await Deno.writeTextFile(closed, SECRET + "\n", { mode: 0o640 });
      await Deno.chmod(closed, 0o640);
      const args = (file: string) =>
        ["--peers", "127.0.0.1:1,127.0.0.1:2", "--listen", "127.0.0.1:1"]
          .concat(["--peer-secret-file", file]);
      const warned = capturingLogger();
      loadSecurity(parseConfig(args(open), () => undefined), warned).close();
      assert.equal(warned.lines.length, 1, warned.lines.join("\n"));
      assert.match(warned.lines[0], /peer secret file ".*open\.secret" can be read by any user/);
      assert.match(warned.lines[0], /mode 0644/);
      assert.ok(!warned.lines[0].includes(SECRET));
      const quiet = capturingLogger();
      loadSecurity(parseConfig(args(closed), () => undefined), quiet).close();
      assert.deepEqual(quiet.lines, []);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test("a bridge token file line with a space inside is refused by its line number, not its text", async () => {
  const dir = await Deno.makeTempDir({ prefix: "lockd-tokens-" });
  try {
    const file = `${dir}/tokens`;
    await Deno.writeTextFile(file, "# tokens\n good-token-1 \n\nsecret part two\n", {
      mode: 0o600,
    });
    const args = ["--bridge", "127.0.0.1:0", "--bridge-token-file", file];
    assert.throws(
      () => loadSecurity(parseConfig(args, () => undefined), capturingLogger()),
      (e: Error) =>
        /tokens: line 4 is not a token/.test(e.message) && !e.message.includes("secret"),
    );
    await Deno.writeTextFile(file, "# tokens\n good-token-1 \n\nother_token.2~\n", { mode: 0o600 });
    const security = loadSecurity(parseConfig(args, () => undefined), capturingLogger());
    assert.equal(security.bridgeToken?.("good-token-1"), true);
    assert.equal(security.bridgeToken?.("other_token.2~"), true);
    assert.equal(security.bridgeToken?.("secret"), false);
    security.close();
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
