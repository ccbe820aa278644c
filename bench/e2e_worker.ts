/**
 * One client process of the end-to-end benchmark (`bench/clients.ts`), in any runtime
 * (Deno runs it as it is; Bun too, for lockd; Node.js runs a bundle of it). It opens the
 * system's client through its adapter (`bench/_e2e_<system>.ts`, named by URL in the
 * config), starts `tasks` acquire → release loops and prints `{"ready":true}`; the loops run
 * unrecorded (the warm-up) until stdin says `start`, and are recorded until it says `stop`.
 * It then prints `{"result": WorkerResult}`, closes the client and exits.
 *
 * Argument: the {@linkcode WorkerConfig} as JSON.
 *
 * @module
 */

import process from "node:process";
import { type OpenSystem, type WorkerConfig, Workload } from "./_e2e_workload.ts";

/** How long closing the client may take after the result is out. */
const CLOSE_TIMEOUT_MS = 3000;

function print(value: unknown): Promise<void> {
  return new Promise((resolve) =>
    process.stdout.write(JSON.stringify(value) + "\n", () => resolve())
  );
}

async function main(): Promise<void> {
  const config: WorkerConfig = JSON.parse(process.argv.at(-1)!);
  const { open } = (await import(config.adapter)) as { open: OpenSystem };
  const system = await open(config);
  const workload = new Workload(system, config);
  workload.run();
  let input = "";
  let stopped = false;
  process.stdin.setEncoding("utf8");
  const finished = new Promise<void>((resolve) => {
    process.stdin.on("data", (chunk: string) => {
      input += chunk;
      let nl;
      while ((nl = input.indexOf("\n")) >= 0) {
        const line = input.slice(0, nl).trim();
        input = input.slice(nl + 1);
        if (line === "start") workload.start();
        else if (line === "stop" && !stopped) {
          stopped = true;
          resolve(print({ result: workload.stop() }));
        }
      }
    });
    process.stdin.on("end", () => {
      if (!stopped) resolve(Promise.reject(new Error("stdin closed before stop")));
    });
  });
  await print({ ready: true });
  await finished;
  process.stdin.pause();
  let timer: ReturnType<typeof setTimeout> | undefined;
  await Promise.race([
    workload.drained().then(() => system.close()),
    new Promise((resolve) => timer = setTimeout(resolve, CLOSE_TIMEOUT_MS)),
  ]);
  clearTimeout(timer);
}

try {
  await main();
  process.exit(0);
} catch (error) {
  await print({ error: error instanceof Error ? error.stack ?? error.message : String(error) });
  process.exit(1);
}
