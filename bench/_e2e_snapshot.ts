/**
 * The code one end-to-end run measures, fixed when it starts: a copy of the package's client,
 * server, `mod.ts`, `deno.json`, `bench/deno.lock` and the benchmark's worker files in a temporary
 * directory, so that edits made to the checkout during a run (other people optimizing the
 * client or server) do not mix into it. Deno and Bun run the copy as it is; Node.js runs a
 * bundle of it (`deno bundle --platform node`, the npm packages left out and imported by
 * name) next to a `node_modules` that Deno installs from the copied lock file, so that Node
 * runs the npm packages as they are published. Also a fingerprint of the client's and the
 * server's sources, so a report says which code it measured.
 *
 * @module
 */

const ROOT = new URL("..", import.meta.url).pathname;
/** Files of `bench/` the workers load. */
const BENCH_FILES = [
  "e2e_worker.ts",
  "_e2e_workload.ts",
  "_e2e_stats.ts",
  "_e2e_lockd.ts",
  "_e2e_redlock.ts",
  "_e2e_semaphore.ts",
  "_e2e_etcd.ts",
];

/** A copy of the package, made once per process. */
export interface Snapshot {
  /** The copy's root, ending in `/`. */
  root: string;
  /** The first 12 hex digits of a SHA-256 over `mod.ts` and `client/`, and over `server/`. */
  clientHash: string;
  serverHash: string;
}

let snapshot: Promise<Snapshot> | undefined;
let nodeDir: Promise<string> | undefined;
let tmp: string | undefined;

function scratch(): string {
  if (tmp === undefined) {
    tmp = Deno.makeTempDirSync({ prefix: "lockd-e2e-" });
    const dir = tmp;
    globalThis.addEventListener("unload", () => {
      try {
        Deno.removeSync(dir, { recursive: true });
      } catch {
        // Gone already.
      }
    });
  }
  return tmp;
}

/** The files under `dir` (relative to the root), sorted. */
function filesUnder(dir: string): string[] {
  const out: string[] = [];
  for (const entry of Deno.readDirSync(`${ROOT}${dir}`)) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory) out.push(...filesUnder(path));
    else if (entry.isFile) out.push(path);
  }
  return out.sort();
}

async function hash(files: string[], root: string): Promise<string> {
  const parts: Uint8Array[] = [];
  const encoder = new TextEncoder();
  for (const f of files) parts.push(encoder.encode(`${f}\n`), await Deno.readFile(`${root}${f}`));
  const all = new Uint8Array(parts.reduce((a, p) => a + p.length, 0));
  let at = 0;
  for (const p of parts) {
    all.set(p, at);
    at += p.length;
  }
  const digest = new Uint8Array(await crypto.subtle.digest("SHA-256", all));
  return [...digest.slice(0, 6)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** The run's copy of the package (made on first use). */
export function sources(): Promise<Snapshot> {
  snapshot ??= (async () => {
    const root = `${scratch()}/src/`;
    const client = ["mod.ts", ...filesUnder("client")];
    const server = filesUnder("server");
    const files = [
      "deno.json",
      "bench/deno.lock",
      ...client,
      ...server,
      ...BENCH_FILES.map((f) => `bench/${f}`),
    ];
    for (const f of files) {
      await Deno.mkdir(`${root}${f.slice(0, f.lastIndexOf("/") + 1)}`, { recursive: true });
      await Deno.copyFile(`${ROOT}${f}`, `${root}${f}`);
    }
    return {
      root,
      clientHash: await hash(client, root),
      serverHash: await hash(server, root),
    };
  })();
  return snapshot;
}

/** Runs `deno <args>` in `cwd`; throws with its output if it fails. */
async function deno(args: string[], cwd: string): Promise<void> {
  const out = await new Deno.Command(Deno.execPath(), {
    args,
    cwd,
    env: { NO_COLOR: "1" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!out.success) {
    const text = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
    throw new Error(`deno ${args.join(" ")} failed:\n${text}`);
  }
}

/** `"npm:name@version/path"` → `"name/path"`, which Node resolves in `./node_modules`. */
export function bareNpmSpecifiers(code: string): string {
  return code.replace(
    /(["'])npm:((?:@[^/"'@]+\/)?[^/"'@]+)(?:@[^/"']*)?(\/[^"']*)?\1/g,
    "$1$2$3$1",
  );
}

/**
 * The directory of the Node.js bundles (`e2e_worker.js`, `_e2e_<system>.js`), made from the
 * run's copy on first use.
 */
export function nodeBundle(): Promise<string> {
  nodeDir ??= (async () => {
    const { root } = await sources();
    const dir = `${scratch()}/node`;
    await Deno.mkdir(dir);
    const npmUsers = ["_e2e_redlock.ts", "_e2e_semaphore.ts", "_e2e_etcd.ts"];
    const entries = ["e2e_worker.ts", "_e2e_lockd.ts", ...npmUsers];
    await Deno.writeTextFile(`${dir}/package.json`, JSON.stringify({ type: "module" }) + "\n");
    await Deno.copyFile(`${root}bench/deno.lock`, `${dir}/deno.lock`);
    await Deno.writeTextFile(`${dir}/deno.json`, JSON.stringify({ nodeModulesDir: "auto" }) + "\n");
    await deno([
      "install",
      "--quiet",
      "--config",
      `${dir}/deno.json`,
      "--entrypoint",
      ...npmUsers.map((f) => `${root}bench/${f}`),
    ], dir);
    await deno([
      "bundle",
      "--quiet",
      "--lock=bench/deno.lock",
      "--platform",
      "node",
      "--external",
      "npm:*",
      "--outdir",
      dir,
      ...entries.map((f) => `bench/${f}`),
    ], root);
    for (const entry of entries) {
      const file = `${dir}/${entry.replace(/\.ts$/, ".js")}`;
      await Deno.writeTextFile(file, bareNpmSpecifiers(await Deno.readTextFile(file)));
    }
    return dir;
  })();
  return nodeDir;
}
