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

/** Store the unit of provider quotas the groups are fair by; null: by claims (the key goes). */
export async function writeFairBy(s: Store, unit: string | null): Promise<void> {
  const key = layoutOf(s.keys).groupsFair;
  if (unit === null) await s.client.del(key);
  else await s.client.set(key, unit);
}

/** The unit the groups are fair by, as stored; null: by claims. */
export async function readFairBy(s: Store): Promise<string | null> {
  return s.client.get(layoutOf(s.keys).groupsFair);
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

/** Groups a listing of pending across groups reads, in turn order (`groups.LANES_READ`). */
export const LANES_READ = 1000;
/** Positions of pending's order across groups a listing reaches (`groups.MERGED_MAX`). */
export const MERGED_MAX = 100_000;

/**
 * One zset of pending as the claim serves it: a group's ('' the ungrouped tasks), its
 * virtual time in the fair-claim ring, weight and size; `held`: parked by its own limits,
 * its claim pause or at its concurrency cap (served only once it is back).
 */
export interface Lane {
  readonly group: string;
  readonly turn: number;
  readonly weight: number;
  readonly size: number;
  readonly held: boolean;
}

function positive(value: string | null | undefined): number | null {
  const n = value === null || value === undefined || value === "" ? NaN : Number(value);
  return Number.isFinite(n) && n > 0 ? n : null;
}

/** The lanes of pending now, or null when no group is in use (two round trips). */
export async function readLanes(s: Store): Promise<Lane[] | null> {
  const layout = layoutOf(s.keys);
  const heads = s.client.pipeline();
  heads.zrange(layout.groups, "0", String(LANES_READ - 1), "WITHSCORES");
  heads.zrange(layout.groupsParked, "0", String(LANES_READ - 1));
  heads.zcard(layout.pending);
  const [flat, parkedAll, ungrouped] = replies(await heads.exec()) as [string[], string[], number];
  if (flat.length === 0 && parkedAll.length === 0) return null;
  const ring: [string, number][] = [];
  for (let i = 0; i + 1 < flat.length; i += 2) ring.push([flat[i] ?? "", Number(flat[i + 1])]);
  const inRing = ring.filter(([g]) => g !== "");
  const parked = parkedAll.filter((g) => g !== "");
  const names = [...inRing.map(([g]) => g), ...parked];
  const pipe = s.client.pipeline();
  pipe.hget(layout.config, "group_max_concurrency");
  for (const g of names) {
    pipe.zcard(layout.groupPending(g));
    pipe.hmget(layout.group(g), GROUP_WEIGHT, "max_concurrency");
    pipe.hget(layout.groupRunning, g);
  }
  const values = replies(await pipe.exec());
  const defaultCap = positive(values[0] as string | null) ?? 0;
  const lanes: Lane[] = names.map((group, i) => {
    const [weight, cap] = values[2 + 3 * i] as (string | null)[];
    const limit = positive(cap) ?? defaultCap;
    const full = limit > 0 && (positive(values[3 + 3 * i] as string | null) ?? 0) >= limit;
    return {
      group,
      turn: inRing[i]?.[1] ?? 0,
      weight: positive(weight) ?? 1,
      size: Number(values[1 + 3 * i]),
      held: i >= inRing.length || full,
    };
  });
  if (ungrouped > 0) {
    const own = ring.find(([g]) => g === "");
    const lowest = ring.length > 0 ? Math.min(...ring.map(([, t]) => t)) : 0;
    lanes.push({ group: "", turn: own ? own[1] : lowest, weight: 1, size: ungrouped, held: false });
  }
  return lanes;
}

/**
 * Positions `offset .. offset+count-1` of the order the claim serves `lanes` in, each as
 * [group, rank in its zset]: the lowest virtual time first (ties by name, as ZRANGE), a
 * lane moving on by 1 / weight per task taken; the held lanes after, in turn among
 * themselves. Pure.
 */
export function fairOrder(
  lanes: readonly Lane[],
  offset: number,
  count: number,
): [string, number][] {
  const out: [string, number][] = [];
  const end = Math.min(offset + count, MERGED_MAX);
  let pos = 0;
  for (const held of [false, true]) {
    // [turn, group, rank, lane], kept sorted by turn then group (few lanes: a sorted array)
    const heads: [number, string, number, Lane][] = lanes
      .filter((l) => l.held === held && l.size > 0)
      .map((l) => [held ? 0 : l.turn, l.group, 0, l]);
    const before = (a: [number, string, number, Lane], b: [number, string, number, Lane]): number =>
      a[0] - b[0] || (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0);
    heads.sort(before);
    for (let head = heads.shift(); head !== undefined && pos < end; head = heads.shift()) {
      const [turn, group, rank, lane] = head;
      if (pos >= offset) out.push([group, rank]);
      pos += 1;
      if (rank + 1 < lane.size) {
        const next: [number, string, number, Lane] = [
          turn + 1 / lane.weight,
          group,
          rank + 1,
          lane,
        ];
        let at = heads.findIndex((h) => before(next, h) < 0);
        if (at < 0) at = heads.length;
        heads.splice(at, 0, next);
      }
    }
  }
  return out;
}

/**
 * Ids `offset .. offset+count-1` of pending in the order the claim serves them, across
 * the groups' zsets ('' where a task left meanwhile); null when no group is in use (the
 * caller reads pending itself) or `offset` is past `MERGED_MAX` ("beyond").
 */
export async function pendingAcrossGroups(
  s: Store,
  offset: number,
  count: number,
): Promise<string[] | null | "beyond"> {
  const lanes = await readLanes(s);
  if (lanes === null) return null;
  if (offset >= MERGED_MAX) return "beyond";
  const slots = fairOrder(lanes, offset, count);
  if (slots.length === 0) return [];
  const spans = new Map<string, [number, number]>();
  for (const [g, rank] of slots) {
    const [lo, hi] = spans.get(g) ?? [rank, rank];
    spans.set(g, [Math.min(lo, rank), Math.max(hi, rank)]);
  }
  const layout = layoutOf(s.keys);
  const groups = [...spans.entries()];
  const pipe = s.client.pipeline();
  for (const [g, [lo, hi]] of groups) {
    pipe.zrange(g === "" ? layout.pending : layout.groupPending(g), String(lo), String(hi));
  }
  const read = new Map<string, string[]>();
  replies(await pipe.exec()).forEach((r, i) => read.set(groups[i]?.[0] ?? "", r as string[]));
  return slots.map(([g, rank]) => read.get(g)?.[rank - (spans.get(g)?.[0] ?? 0)] ?? "");
}
