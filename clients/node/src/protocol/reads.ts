/**
 * The producer's reads and plain writes of a queue's keys (what no script does): tasks,
 * flows, statistics, workers, the config, schedules, pages of a state, and the purge.
 * Each returns what Redis stored; the modules above parse it.
 *
 * @module
 */

import type { Client } from "../connection.js";
import type { QueueKeys } from "../keys.js";
import { CONFIG } from "./layout.js";
import { type Store, layoutOf, queueMs, replies } from "./store.js";

/** A task's hash (empty: no such task). */
export async function readTask(s: Store, taskId: string): Promise<Record<string, string>> {
  return s.client.hgetall(layoutOf(s.keys).task(taskId));
}

/** Each task's hash, in the order asked, in one round trip (empty: no such task). */
export async function readTasks(
  s: Store,
  taskIds: readonly string[],
): Promise<Record<string, string>[]> {
  if (taskIds.length === 0) return [];
  const layout = layoutOf(s.keys);
  const pipe = s.client.pipeline();
  for (const id of taskIds) pipe.hgetall(layout.task(id));
  return replies(await pipe.exec()) as Record<string, string>[];
}

/** The fields of a flow's record (`flow:<id>`), in the order `readFlow` returns them. */
export const FLOW_FIELDS = [
  "open",
  "done",
  "dead",
  "cancelled",
  "started_at",
  "ended_at",
  "outcome",
] as const;

/** A flow's record as `FLOW_FIELDS` (null where absent). */
export async function readFlow(s: Store, flowId: string): Promise<(string | null)[]> {
  return s.client.hmget(layoutOf(s.keys).flow(flowId), ...FLOW_FIELDS);
}

/** The task states a queue keeps a sorted set of. */
export const STATE_SETS = [
  "pending",
  "delayed",
  "running",
  "done",
  "dead",
  "cancelled",
  "waiting",
] as const;
/** One of `STATE_SETS`. */
export type StateSet = (typeof STATE_SETS)[number];

/** The sorted set of the tasks in `state`. */
export function stateKey(s: Store, state: StateSet): string {
  return layoutOf(s.keys)[state];
}

/** What `Queue.stats` is made of, read in one round trip. */
export interface StoredStats {
  /** Each state's set size (pending: the ungrouped tasks only). */
  readonly sizes: Readonly<Record<StateSet, number>>;
  readonly workers: number;
  readonly counters: Readonly<Record<string, string>>;
  /** How many tasks wait in the groups' own sets (the stored text, null when none). */
  readonly groupsPending: string | null;
}

/** The sizes, the worker count and the counters of the queue. */
export async function readStats(s: Store): Promise<StoredStats> {
  const layout = layoutOf(s.keys);
  const pipe = s.client.pipeline();
  for (const state of STATE_SETS) pipe.zcard(layout[state]);
  pipe.hlen(layout.workers);
  pipe.hgetall(layout.stats);
  pipe.get(layout.groupsPending);
  const values = replies(await pipe.exec());
  const sizes = Object.fromEntries(
    STATE_SETS.map((state, i) => [state, Number(values[i])]),
  ) as Record<StateSet, number>;
  const n = STATE_SETS.length;
  return {
    sizes,
    workers: Number(values[n]),
    counters: (values[n + 1] ?? {}) as Record<string, string>,
    groupsPending: (values[n + 2] ?? null) as string | null,
  };
}

/** The workers' records by pod (JSON text), the stored lease TTL (null: unset) and the server's time (ms). */
export async function readWorkers(
  s: Store,
): Promise<{ records: Record<string, string>; leaseTtl: string | null; nowMs: number }> {
  const layout = layoutOf(s.keys);
  const nowMs = await queueMs(s);
  const [records, leaseTtl] = await Promise.all([
    s.client.hgetall(layout.workers),
    s.client.hget(layout.config, CONFIG.lease_ttl_s),
  ]);
  return { records, leaseTtl, nowMs };
}

/** The queue's `config` hash as stored. */
/** Whether anything of the queue is stored: its config, counters, sequence or workers. */
export async function queueStored(s: Store): Promise<boolean> {
  const k = layoutOf(s.keys);
  return (await s.client.exists(k.config, k.stats, k.seq, k.workers)) > 0;
}

export async function readConfig(s: Store): Promise<Record<string, string>> {
  return s.client.hgetall(layoutOf(s.keys).config);
}

/** Replace the `config` hash with `fields` in one transaction. */
export async function writeConfig(
  s: Store,
  fields: Readonly<Record<string, string>>,
): Promise<void> {
  const key = layoutOf(s.keys).config;
  const tx = s.client.multi().del(key);
  if (Object.keys(fields).length > 0) tx.hset(key, fields);
  replies(await tx.exec());
}

/** Delete every key of the queue, on every master of a cluster. */
export async function purge(s: Store): Promise<void> {
  const nodes = "nodes" in s.client ? s.client.nodes("master") : [s.client];
  for (const node of nodes) {
    let cursor = "0";
    do {
      const [next, keys] = await node.scan(cursor, "MATCH", s.keys.pattern, "COUNT", 1000);
      cursor = next;
      if (keys.length > 0) await node.unlink(...keys);
    } while (cursor !== "0");
  }
}

/** A schedule's hash (empty: no such schedule). */
export async function readSchedule(s: Store, name: string): Promise<Record<string, string>> {
  return s.client.hgetall(layoutOf(s.keys).schedule(name));
}

/** Every schedule's hash, by name order (a schedule deleted meanwhile is left out). */
export async function readSchedules(s: Store): Promise<Record<string, string>[]> {
  const layout = layoutOf(s.keys);
  const names = (await s.client.smembers(layout.schedules)).sort();
  if (names.length === 0) return [];
  const pipe = s.client.pipeline();
  for (const name of names) pipe.hgetall(layout.schedule(name));
  return (replies(await pipe.exec()) as Record<string, string>[]).filter(
    (h) => Object.keys(h).length > 0,
  );
}

/** Where a page of task ids is read from: a state's set, or a group's own pending set. */
export interface PageOf {
  readonly state: StateSet;
  /** A group's own pending set (with state pending). */
  readonly group?: string;
  /** Newest first (finished tasks); with `scores`, those scored within [lo, hi] only. */
  readonly newestFirst: boolean;
  readonly scores?: readonly [hi: string, lo: string];
}

/** Up to `count` task ids of `page` from `offset`. */
export async function pageIds(
  s: Store,
  page: PageOf,
  offset: number,
  count: number,
): Promise<string[]> {
  const layout = layoutOf(s.keys);
  if (page.group !== undefined)
    return s.client.zrange(
      layout.groupPending(page.group),
      String(offset),
      String(offset + count - 1),
    );
  const key = layout[page.state];
  if (page.newestFirst && page.scores !== undefined) {
    return s.client.zrevrangebyscore(key, page.scores[0], page.scores[1], "LIMIT", offset, count);
  }
  if (page.newestFirst) return s.client.zrevrange(key, offset, offset + count - 1);
  return s.client.zrange(key, String(offset), String(offset + count - 1));
}

/** The field of a dependant's hash holding the result of one dependency (`in:<id>`). */
const INPUT_PREFIX = "in:";

/**
 * The ids `taskId` waits for (its `after`, in order) and the result each handed it (JSON
 * text; null: not handed), in two reads; none when it waits for none.
 */
export async function readDependencyInputs(
  client: Client,
  keys: QueueKeys,
  taskId: string,
  after: string | null = null,
): Promise<[string[], (string | null)[]]> {
  const key = layoutOf(keys).task(taskId);
  const raw = after ?? (await client.hget(key, "after"));
  if (raw === null || raw === "") return [[], []];
  let list: unknown;
  try {
    list = JSON.parse(raw);
  } catch {
    return [[], []];
  }
  if (!Array.isArray(list) || list.length === 0) return [[], []];
  const ids = list.map(String);
  return [ids, await client.hmget(key, ...ids.map((dep) => INPUT_PREFIX + dep))];
}

/**
 * Block up to `blockS` on a waiter's list, then take up to `max` more ids, in one round
 * trip on `blocker` (a connection of its own): the pipeline's two replies.
 */
export async function popFinished(
  blocker: Client,
  keys: QueueKeys,
  waiter: string,
  blockS: number,
  max: number,
): Promise<[Error | null, unknown][] | null> {
  const list = layoutOf(keys).waiter(waiter);
  return blocker
    .pipeline()
    .blpop(list, Number(blockS.toFixed(3)) || 0.001)
    .lpop(list, max)
    .exec();
}

/** Turn the queue's event stream on (keeping about `retention` events) or off. */
export async function writeEventsCap(s: Store, retention: number | null): Promise<void> {
  const key = layoutOf(s.keys).eventsCap;
  if (retention === null) await s.client.del(key);
  else await s.client.set(key, String(retention));
}

/** The newest event's stream id, or "0-0" when there is none. */
export async function lastEventId(s: Store): Promise<string> {
  const found = (await s.client.xrevrange(layoutOf(s.keys).events, "+", "-", "COUNT", 1)) as [
    string,
    string[],
  ][];
  return found[0]?.[0] ?? "0-0";
}

/** One stored event: its stream id and its fields (`event`, `id`, `attempt`) by name. */
export interface StoredEvent {
  readonly streamId: string;
  readonly fields: Readonly<Record<string, string>>;
}

/** The events after `since`, waiting up to `blockMs` for one (XREAD BLOCK) on `blocker`. */
export async function readEvents(
  blocker: Client,
  keys: QueueKeys,
  since: string,
  blockMs: number,
  count: number,
): Promise<StoredEvent[]> {
  const key = layoutOf(keys).events;
  const raw = await blocker.xread("COUNT", count, "BLOCK", blockMs, "STREAMS", key, since);
  const entries = raw?.[0]?.[1] ?? [];
  return entries.map(([streamId, flat]) => {
    const fields: Record<string, string> = {};
    for (let i = 0; i + 1 < flat.length; i += 2) fields[flat[i] as string] = flat[i + 1] as string;
    return { streamId, fields };
  });
}
