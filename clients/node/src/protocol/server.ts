/**
 * Questions to the server itself, on no queue's key: whether it answers, and its
 * maxmemory-policy (a full Redis must refuse writes, not evict tasks).
 *
 * @module
 */

import type { Client } from "../connection.js";

/** PING: resolves once the server answers. */
export async function ping(client: Client): Promise<string> {
  return client.ping();
}

/** CONFIG GET maxmemory-policy: the policy, or null when the reply names none. */
export async function configuredEvictionPolicy(client: Client): Promise<string | null> {
  const reply = (await client.call("CONFIG", ["GET", "maxmemory-policy"])) as string[];
  return reply[1] ?? null;
}

/** INFO memory's maxmemory_policy (for servers that refuse CONFIG), or null. */
export async function reportedEvictionPolicy(client: Client): Promise<string | null> {
  const info = String(await client.call("INFO", ["memory"]));
  return /^maxmemory_policy:(\S+)/m.exec(info)?.[1] ?? null;
}
