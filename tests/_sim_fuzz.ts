/**
 * One seeded run of random faults on the cluster simulator (`_sim_cluster.ts`), for
 * `cluster_sim_fuzz_test.ts`: overlapping pauses, kill -9 and restarts, graceful restarts,
 * partitions and stalled links, under a stream of acquires and releases on a few keys. Then
 * every fault ends and the run checks what docs/cluster.md promises once the faults are
 * over: one active that serves, every standby in sync with it, and tokens above every one
 * granted before. Throughout, no token may be granted twice.
 *
 * @module
 */

import { mulberry32 } from "./_prng.ts";
import { ADDRESSES, type SimClient, SimCluster } from "./_sim_cluster.ts";

/** Options of {@linkcode fuzzRun}. */
export interface FuzzOptions {
  /** Fake ms during which faults start (default 20,000). */
  faultMs?: number;
  /** Fake ms the cluster gets to settle once every fault ended (default 15,000). */
  settleMs?: number;
}

/** What a run found: `problems` is empty when every check held. */
export interface FuzzResult {
  seed: number;
  size: number;
  grants: number;
  faults: string[];
  problems: string[];
  timeline: string;
}

interface Grant {
  token: bigint;
  key: string;
  node: string;
  at: number;
}

/** Fault kinds, with how often each is drawn. */
const KINDS = [
  ["pause", 3],
  ["kill", 2],
  ["shutdown", 1],
  ["partition", 2],
  ["stall", 1],
] as const;

/** Runs seed `seed`; never throws for a failed check (see {@linkcode FuzzResult.problems}). */
export async function fuzzRun(seed: number, options: FuzzOptions = {}): Promise<FuzzResult> {
  const random = mulberry32(seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)];
  const between = (lo: number, hi: number) => Math.round(lo + random() * (hi - lo));
  const size = between(2, 5);
  const faultMs = options.faultMs ?? 20_000;
  const sim = new SimCluster({ size });
  const addresses = ADDRESSES.slice(0, size);
  const faults: string[] = [];
  const problems: string[] = [];
  const grants: Grant[] = [];
  const seen = new Map<bigint, Grant>();
  const result = (): FuzzResult => ({
    seed,
    size,
    grants: grants.length,
    faults,
    problems,
    timeline: sim.describe(),
  });
  try {
    await sim.waitForOneActive();
    await sim.waitForSync();
  } catch (error) {
    problems.push(`no cold start: ${error instanceof Error ? error.message : error}`);
    return result();
  }

  // Nodes down (killed or shut down, not restarted yet) or paused: no second fault on them.
  const busy = new Set<string>();
  const driver = sim.time.process("driver");
  const note = (what: string) => faults.push(`${sim.now} ${what}`);
  const down = (address: string) => {
    const node = sim.node(address);
    return !node.process.alive || node.exited;
  };
  const restart = (address: string) => {
    if (!down(address)) return; // already restarted when the faults ended
    sim.start(address);
    busy.delete(address);
    note(`restart ${address}`);
  };

  // The workload: every 10 ms an acquire on a random node; a grant is released later.
  const clients = new Map<string, SimClient>();
  const clientOf = (address: string): SimClient => {
    let client = clients.get(address);
    if (client === undefined || client.closed) {
      const fresh = sim.connect(address);
      fresh.onReply = (line) => {
        const match = /^A (\S+) A (\d+)$/.exec(line);
        if (match === null) return;
        const grant = { token: BigInt(match[2]), key: match[1], node: address, at: sim.now };
        const earlier = seen.get(grant.token);
        if (earlier !== undefined) {
          problems.push(`token ${grant.token} granted twice: ${show(earlier)} and ${show(grant)}`);
        }
        seen.set(grant.token, grant);
        grants.push(grant);
        driver.after(between(0, 400), () => fresh.send(`R ${grant.key} ${grant.token}`));
      };
      clients.set(address, fresh);
      client = fresh;
    }
    return client;
  };
  const stopWorkload = driver.scheduler.every(10, () => {
    const address = pick(addresses);
    const lease = (between(5, 30) / 10).toFixed(1);
    const wait = (between(0, 10) / 10).toFixed(1);
    clientOf(address).send(`A fuzz:${between(0, 3)} ${lease} ${wait}`);
  });

  // The faults.
  const faultAt = (): number => between(0, faultMs);
  const count = between(3, 12);
  for (let i = 0; i < count; i++) {
    const kind = weighted(random);
    driver.after(faultAt(), () => {
      const free = addresses.filter((a) => !busy.has(a) && sim.node(a).running);
      if (free.length === 0) return;
      const address = pick(free);
      const lasts = between(100, 3000);
      switch (kind) {
        case "pause":
          busy.add(address);
          sim.pause(address);
          note(`pause ${address} for ${lasts} ms`);
          driver.after(lasts, () => {
            sim.resume(address);
            busy.delete(address);
            note(`resume ${address}`);
          });
          break;
        case "kill":
          busy.add(address);
          sim.kill(address);
          note(`kill -9 ${address}, restart after ${lasts} ms`);
          driver.after(lasts, () => restart(address));
          break;
        case "shutdown":
          busy.add(address);
          note(`SIGTERM ${address}, restart ${lasts} ms after it exits`);
          sim.shutdown(address).then(() => driver.after(lasts, () => restart(address)));
          break;
        case "partition": {
          const left = addresses.filter(() => random() < 0.5);
          const right = addresses.filter((a) => !left.includes(a));
          if (left.length === 0 || right.length === 0) return;
          const mode = random() < 0.5 ? "hold" : "down";
          sim.partition(left, right, mode);
          note(`partition ${left} | ${right} (${mode}) for ${lasts} ms`);
          driver.after(lasts, () => {
            sim.heal();
            note("heal");
          });
          break;
        }
        case "stall": {
          const to = pick(addresses.filter((a) => a !== address));
          sim.cut(address, to, "hold");
          note(`stall ${address} > ${to} for ${lasts} ms`);
          driver.after(lasts, () => {
            sim.heal();
            note("heal");
          });
          break;
        }
      }
    });
  }
  await sim.advance(faultMs + 3000);

  // Every fault ends: paused nodes go on, down ones come back, links heal.
  sim.heal();
  for (const address of addresses) {
    if (sim.node(address).process.paused) {
      sim.resume(address);
      busy.delete(address);
    } else if (down(address)) restart(address);
    // (A SIGTERM whose leave() is still under way comes back once it exits.)
  }
  note("every fault over");
  let active: string | undefined;
  try {
    // Settled under load, then again without it, after any failback that leads to.
    await sim.waitForOneActive(options.settleMs ?? 15_000);
    await sim.waitForSync(5000);
    stopWorkload();
    await sim.advance(5000);
    active = (await sim.waitForOneActive(5000)).address;
    await sim.waitForSync(5000);
  } catch (error) {
    problems.push(`not settled: ${error instanceof Error ? error.message.split("\n")[0] : error}`);
  }
  stopWorkload();
  const before = grants.reduce((max, g) => g.token > max ? g.token : max, 0n);
  if (active !== undefined) {
    const reply = await sim.request(active, "A fuzz:after 30 0", 200);
    const match = reply === undefined ? null : /^A fuzz:after A (\d+)$/.exec(reply);
    if (match === null) problems.push(`the settled active ${active} answered ${reply}`);
    else if (BigInt(match[1]) <= before) {
      problems.push(
        `a grant after the faults (${match[1]}) is not above every earlier one (${before})`,
      );
    }
  }
  return result();
}

function weighted(random: () => number): (typeof KINDS)[number][0] {
  const total = KINDS.reduce((sum, [, weight]) => sum + weight, 0);
  let at = random() * total;
  for (const [kind, weight] of KINDS) {
    at -= weight;
    if (at < 0) return kind;
  }
  return KINDS[0][0];
}

function show(grant: Grant): string {
  return `${grant.key} on ${grant.node} at ${grant.at} ms`;
}
