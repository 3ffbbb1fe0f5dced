/**
 * Following a task (the Python client's `protocol/follow.py`): a follower sets `follows`
 * and makes the task's follow stream `follow:<id>`, both expiring a minute after it last
 * refreshed them; each script that changes the task's state or progress adds the event's
 * kind to that stream, which wakes the follower blocked on it (XREAD BLOCK): no polling.
 *
 * @module
 */

import type { Client } from "../connection.js";
import type { QueueKeys } from "../keys.js";
import { TASK } from "./layout.js";
import { layoutOf, replies } from "./store.js";

/** How long `follows` and a follow stream outlive a follower's last refresh (ms). */
export const FOLLOW_TTL_MS = 60_000;
/** Entries a follow stream keeps (about), as the scripts trim it. */
export const FOLLOW_MAX = 32;

/** Start following `taskId`: the stream's newest entry id; block after it. */
export async function followJoin(client: Client, keys: QueueKeys, taskId: string): Promise<string> {
  const layout = layoutOf(keys);
  const stream = layout.follow(taskId);
  const found = replies(
    await client
      .pipeline()
      .set(layout.follows, "1", "PX", FOLLOW_TTL_MS)
      .xadd(stream, "MAXLEN", "~", FOLLOW_MAX, "*", "event", "follow")
      .pexpire(stream, FOLLOW_TTL_MS)
      .exec(),
  );
  return String(found[1]);
}

/** Keep following another `FOLLOW_TTL_MS`; false when the stream is gone (join again). */
export async function followRefresh(
  client: Client,
  keys: QueueKeys,
  taskId: string,
): Promise<boolean> {
  const layout = layoutOf(keys);
  const found = replies(
    await client
      .pipeline()
      .set(layout.follows, "1", "PX", FOLLOW_TTL_MS)
      .pexpire(layout.follow(taskId), FOLLOW_TTL_MS)
      .exec(),
  );
  return Number(found[1]) === 1;
}

/** Wait up to `blockMs` for a change after `after`: the newest entry id, or null. */
export async function followBlock(
  client: Client,
  keys: QueueKeys,
  taskId: string,
  after: string,
  blockMs: number,
): Promise<string | null> {
  const key = layoutOf(keys).follow(taskId);
  const raw = await client.xread("COUNT", FOLLOW_MAX, "BLOCK", blockMs, "STREAMS", key, after);
  const entries = raw?.[0]?.[1] ?? [];
  return entries.length > 0 ? (entries[entries.length - 1]?.[0] ?? null) : null;
}

/** What changes when a task moves on (state, progress_at, progress); null: no such task. */
export async function progressMarks(
  client: Client,
  keys: QueueKeys,
  taskId: string,
): Promise<string | null> {
  const marks = await client.hmget(
    layoutOf(keys).task(taskId),
    TASK.state,
    TASK.progress_at,
    TASK.progress,
  );
  if (marks[0] === null) return null;
  return JSON.stringify(marks);
}
