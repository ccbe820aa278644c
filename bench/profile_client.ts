/**
 * A driver for profiling `LockClient` (issue 14, "Make the client cheap"): the workload of
 * `deno task bench:clients` (N concurrent loops through one client, each acquire → release
 * on its own key) in this process, against a fresh lockd (or `--address`), printing cycles/s,
 * this process's CPU µs per cycle and, with `--tasks 1`, the cycle's latency percentiles.
 *
 *   deno run -A --cpu-prof --cpu-prof-dir=/tmp/prof bench/profile_client.ts --duration 5
 *
 * `--node-tcp` uses the `node:net` transport (`client/node_tcp.ts`) instead of Deno's.
 *
 * @module
 */

import { parseArgs } from "node:util";
import process from "node:process";
import { LockClient, type LockClientOptions } from "../mod.ts";
import { connectNodeTcp } from "../client/node_tcp.ts";
import { type ServerProcess, startLockd } from "./_procs.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    tasks: { type: "string", default: "64" },
    duration: { type: "string", default: "5" },
    warmup: { type: "string", default: "1" },
    address: { type: "string" },
    "node-tcp": { type: "boolean", default: false },
  },
});
const tasks = Number(values.tasks);
const durationMs = Number(values.duration) * 1000;
const warmupMs = Number(values.warmup) * 1000;

let server: ServerProcess | undefined;
let dataDir: string | undefined;
let address = values.address;
if (address === undefined) {
  dataDir = await Deno.makeTempDir({ prefix: "lockd-profile-client-" });
  server = await startLockd({ dataDir });
  address = `127.0.0.1:${server.port}`;
}

const options: LockClientOptions = {};
if (values["node-tcp"]) options.connect = connectNodeTcp;
const client = new LockClient(address, options);
let counting = false;
let stop = false;
let cycles = 0;
const latencies: number[] = [];
async function loop(i: number): Promise<void> {
  const key = `bench:${i}`;
  while (!stop) {
    const started = tasks === 1 ? performance.now() : 0;
    const lock = await client.acquire(key, { lease: 30 });
    await lock.release();
    if (counting) {
      cycles++;
      if (tasks === 1) latencies.push(performance.now() - started);
    }
  }
}
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const loops = Array.from({ length: tasks }, (_, i) => loop(i));
await sleep(warmupMs);
counting = true;
const started = performance.now();
const cpuBefore = process.cpuUsage();
await sleep(durationMs);
counting = false;
const seconds = (performance.now() - started) / 1000;
const cpu = process.cpuUsage(cpuBefore);
stop = true;
await Promise.all(loops);
await client.close();
await server?.stop();
if (dataDir !== undefined) await Deno.remove(dataDir, { recursive: true }).catch(() => {});
const out: Record<string, number> = {
  cycles,
  cyclesPerSecond: Math.round(cycles / seconds),
  cpuMicrosPerCycle: Number(((cpu.user + cpu.system) / cycles).toFixed(2)),
};
if (latencies.length > 0) {
  latencies.sort((a, b) => a - b);
  const at = (q: number) =>
    Number((latencies[Math.floor(q * (latencies.length - 1))] * 1000).toFixed(1));
  out.p50Micros = at(0.5);
  out.p99Micros = at(0.99);
}
console.log(JSON.stringify(out));
