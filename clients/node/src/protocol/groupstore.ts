/**
 * A group's own settings hash (`group:<name>`) and the reads `Queue.groups` makes of the
 * groups' sets: what the group scripts read, written and read outside a script.
 *
 * @module
 */

import { type Store, layoutOf, replies } from "./store.js";

/** The settings a group's hash holds, by the API's name: the stored field and its least value. */
export const GROUP_SETTING_FIELDS = [
  ["maxConcurrency", "max_concurrency", 0],
  ["rateLimitTasks", "rate_limit_tasks", 1],
  ["rateLimitCost", "rate_limit_cost", 1],
] as const;
/** The stored field of a group's weight. */
export const GROUP_WEIGHT = "weight";
/** The stored field of a group's own claim pause's end (epoch ms). */
const GROUP_PAUSED_UNTIL = "until";

/**
 * Replace `group`'s settings with `fields` in one transaction, keeping the hash's other
 * fields (its claim pause and budget); a group parked by its old limits is looked at
 * again by the next claim.
 */
export async function writeGroupSettings(
  s: Store,
  group: string,
  fields: Readonly<Record<string, string>>,
): Promise<void> {
  const layout = layoutOf(s.keys);
  const key = layout.group(group);
  const tx = s.client
    .multi()
    .hdel(key, GROUP_WEIGHT, ...GROUP_SETTING_FIELDS.map(([, field]) => field));
  if (Object.keys(fields).length > 0) tx.hset(key, fields);
  tx.zadd(layout.groupsParked, "XX", 0, group);
  replies(await tx.exec());
}

/** `group`'s hash as stored. */
export async function readGroup(s: Store, group: string): Promise<Record<string, string>> {
  return s.client.hgetall(layoutOf(s.keys).group(group));
}

/** One group as its sets hold it now (stored text: `pausedUntil` null when it has no pause). */
export interface StoredGroupCount {
  readonly group: string;
  readonly pending: number;
  readonly running: string | null;
  readonly pausedUntil: string | null;
}

/** Every group in the ring, parked or running (the ungrouped '' left out), by name, with its counts. */
export async function readGroupCounts(s: Store): Promise<StoredGroupCount[]> {
  const layout = layoutOf(s.keys);
  const read = s.client.pipeline();
  read.zrange(layout.groups, "0", "-1");
  read.zrange(layout.groupsParked, "0", "-1");
  read.hkeys(layout.groupRunning);
  const names = new Set<string>();
  for (const reply of replies(await read.exec()))
    for (const name of reply as string[]) names.add(name);
  names.delete("");
  const all = [...names].sort();
  if (all.length === 0) return [];
  const pipe = s.client.pipeline();
  for (const g of all) pipe.zcard(layout.groupPending(g));
  pipe.hmget(layout.groupRunning, ...all);
  for (const g of all) pipe.hget(layout.group(g), GROUP_PAUSED_UNTIL);
  const values = replies(await pipe.exec());
  const running = values[all.length] as (string | null)[];
  return all.map((group, i) => ({
    group,
    pending: Number(values[i]),
    running: running[i] ?? null,
    pausedUntil: (values[all.length + 1 + i] ?? null) as string | null,
  }));
}

/** The claim pause and budget's hash: the queue's (`group` ''), or a group's own. */
export async function readQuota(s: Store, group: string): Promise<Record<string, string>> {
  const layout = layoutOf(s.keys);
  return s.client.hgetall(group === "" ? layout.quota : layout.group(group));
}
