/**
 * Whether the server answers at all, on no queue's key (its settings: serverprobe.ts).
 *
 * @module
 */

import type { Client } from "../connection.js";

/** PING: resolves once the server answers. */
export async function ping(client: Client): Promise<string> {
  return client.ping();
}
