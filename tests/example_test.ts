import assert from "node:assert/strict";
import { startServer } from "./_helpers.ts";

const EXAMPLE = new URL("../examples/fenced_counter.ts", import.meta.url).pathname;

Deno.test("examples/fenced_counter.ts keeps the count exact and refuses the paused worker's write", async () => {
  const server = await startServer();
  try {
    const out = await new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        EXAMPLE,
        "--server",
        server.address,
        "--workers",
        "3",
        "--increments",
        "10",
        "--lease",
        "0.5",
        "--pause",
      ],
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(out.stdout);
    assert.equal(out.code, 0, text + new TextDecoder().decode(out.stderr));
    assert.match(text, /final counter: 30 \(expected 30\) exact/);
    assert.match(text, /worker 1: late write with token \d+ REFUSED by the fence/);
    assert.match(text, /stale writes refused: [1-9]/);
  } finally {
    assert.equal(await server.stop(), 0);
    await Deno.remove(server.dataDir, { recursive: true });
  }
});
