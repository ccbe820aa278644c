// The `await using` part of the `basic` scenario of tests/_runtime_scenarios.mjs, in a module
// of its own: a runtime without explicit resource management (Node.js 22) cannot parse it,
// and the scenario then calls `Symbol.asyncDispose` itself instead.

/** A lock and a client, each disposed at the end of its block. */
export async function scoped(client, LockClient, address, prefix) {
  const r = {};
  {
    await using lock = await client.acquire(`${prefix}:c`, { lease: 30 });
    r.heldInBlock = (await client.tryAcquire(`${prefix}:c`, { lease: 5 })) === null &&
      lock.key === `${prefix}:c`;
  }
  const free = await client.tryAcquire(`${prefix}:c`, { lease: 5 });
  r.freeAfterBlock = free !== null;
  await free?.release();
  {
    await using other = new LockClient(address);
    await other.acquire(`${prefix}:d`, { lease: 30 });
  }
  // The end of the block closed `other`, which released what it held.
  r.freeAfterClientBlock = (await client.inspect(`${prefix}:d`)).held === false;
  return r;
}
