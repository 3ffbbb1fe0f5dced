/**
 * The worker's commands outside its scripts: the blocking wait for work, the per-task
 * reads a claim record does not carry, the lease TTL it sizes its heartbeat by, and the
 * probes of the server (does it answer, does it take writes, may it evict keys).
 *
 * @module
 */

import type { Client } from "../connection.js";
import type { QueueKeys } from "../keys.js";
import { CONFIG, TASK } from "./layout.js";
import { layoutOf } from "./store.js";

/**
 * Block up to `timeoutS` on the pod's wake list and the queue's notify list. Null on
 * timeout; else `handedOver`: the claim record a producer pushed for this pod, or null
 * when only signalled (new work: claim then).
 */
export async function popWork(
  blocking: Client,
  keys: QueueKeys,
  pod: string,
  timeoutS: number,
): Promise<{ handedOver: string | null } | null> {
  const layout = layoutOf(keys);
  const wake = layout.wake(pod);
  const popped = await blocking.blpop(wake, layout.notify, Number(timeoutS.toFixed(3)));
  if (popped === null) return null;
  const [key, record] = popped;
  return { handedOver: key === wake ? record : null };
}

/** A task's group and trace context, as `taskFieldsOfEach` reads them. */
export const GROUP_AND_TRACE = ["group", TASK.trace] as const;

/**
 * Some fields of each task's hash (its `group`, its `trace`), in one round trip: the
 * pipeline's replies, each the fields' values in the order asked.
 */
export async function taskFieldsOfEach(
  client: Client,
  keys: QueueKeys,
  taskIds: readonly string[],
  fields: readonly ("group" | typeof TASK.trace)[],
): Promise<[Error | null, unknown][] | null> {
  const layout = layoutOf(keys);
  const pipe = client.pipeline();
  for (const id of taskIds) pipe.hmget(layout.task(id), ...fields);
  return pipe.exec();
}

/** The queue's stored lease TTL (null: unset; the text as stored). */
export async function readLeaseTtl(client: Client, keys: QueueKeys): Promise<string | null> {
  return client.hget(layoutOf(keys).config, CONFIG.lease_ttl_s);
}

/** A write script that writes nothing: refused up front while Redis refuses writes (Redis 7). */
const WRITABLE_PROBE = "#!lua\nreturn 1";

/** Run the write probe on the queue's slot (its error is the server's refusal, if any). */
export async function probeWritable(client: Client, keys: QueueKeys): Promise<unknown> {
  return client.call("EVAL", [WRITABLE_PROBE, 1, layoutOf(keys).config]);
}
