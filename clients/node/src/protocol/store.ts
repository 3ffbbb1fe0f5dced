/**
 * What every protocol function reads and writes through: a queue's client and keys, the
 * typed key layout made from them, and the shared handling of replies.
 *
 * @module
 */

import { type Client, serverMs } from "../connection.js";
import type { QueueKeys } from "../keys.js";
import { QueueLayout } from "./layout.js";

/** A queue's client and keys: what a protocol function needs to reach its Redis keys. */
export interface Store {
  readonly client: Client;
  readonly keys: QueueKeys;
}

const layouts = new WeakMap<QueueKeys, QueueLayout>();

/** The typed key names of `keys`' queue, made once per `QueueKeys`. */
export function layoutOf(keys: QueueKeys): QueueLayout {
  let found = layouts.get(keys);
  if (found === undefined) {
    found = new QueueLayout(keys.queue);
    layouts.set(keys, found);
  }
  return found;
}

/** The clock of the server holding the queue (every score and deadline of it uses it), in ms. */
export async function queueMs(s: Store): Promise<number> {
  return serverMs(s.client, layoutOf(s.keys).stats);
}

/** A pipeline's or transaction's replies, the first error thrown. */
export function replies(raw: [Error | null, unknown][] | null): unknown[] {
  return (raw ?? []).map(([error, value]) => {
    if (error !== null) throw error;
    return value;
  });
}

/** A run's name in a provider quota's slot (`pq_run`): its task's key, NUL, its claim token. */
export function runMember(keys: QueueKeys, taskId: string, token: string): string {
  return `${layoutOf(keys).task(taskId)}\0${token}`;
}
