// One run of `bench/clients.ts` in any runtime (Deno, Node.js, Bun): `tasks` concurrent loops
// through one LockClient, each acquiring and releasing its own key, for `warmup` seconds
// unmeasured and then `duration` seconds measured. Prints one JSON line: cycles, seconds, and
// the CPU time this process used meanwhile (user + system, µs; `process.cpuUsage()`).
//
// Arguments: <client module URL> <address> <tasks> <warmup s> <duration s> [transport URL]
// The optional transport URL is a module exporting `connectNodeTcp` (client/node_tcp.ts):
// the client then uses it instead of the runtime's default TCP transport.

const args = globalThis.Deno?.args ?? globalThis.process.argv.slice(2);
const [moduleUrl, address, tasksArg, warmupArg, durationArg, transportUrl] = args;
const { LockClient } = await import(moduleUrl);
const options = {};
if (transportUrl !== undefined && transportUrl !== "") {
  const { connectNodeTcp } = await import(transportUrl);
  options.connect = connectNodeTcp;
}
const tasks = Number(tasksArg);
const warmupMs = Number(warmupArg) * 1000;
const durationMs = Number(durationArg) * 1000;

const client = new LockClient(address, options);
let counting = false;
let stop = false;
let cycles = 0;
async function loop(i) {
  const key = `bench:${i}`;
  while (!stop) {
    const lock = await client.acquire(key, { lease: 30 });
    await lock.release();
    if (counting) cycles++;
  }
}
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const loops = Array.from({ length: tasks }, (_, i) => loop(i));
await sleep(warmupMs);
const cpuUsage = () => globalThis.process?.cpuUsage?.();
counting = true;
const started = performance.now();
const cpuBefore = cpuUsage();
await sleep(durationMs);
counting = false;
const seconds = (performance.now() - started) / 1000;
const cpuAfter = cpuUsage();
const cpuMicros = cpuBefore === undefined || cpuAfter === undefined
  ? null
  : cpuAfter.user - cpuBefore.user + cpuAfter.system - cpuBefore.system;
stop = true;
await Promise.all(loops);
await client.close();
console.log(JSON.stringify({ cycles, seconds, cpuMicros }));
