/**
 * Controlling tasks after their enqueue: cancel, retry (replay) dead ones, list, purge
 * finished ones. The Python client's `producer/control.py`, on the same scripts: each
 * call atomic, a change by filter in calls of at most `SCAN_BOUND` tasks so Redis never
 * blocks long.
 *
 * @module
 */

import * as bounds from "./bounds.js";
import type { Bundle } from "./bundle.js";
import type { Client, Scripts } from "./connection.js";
import { groupProblem } from "./encoding.js";
import { InvalidArgument, ProtocolError, describe, pyRepr } from "./errors.js";
import type { QueueKeys } from "./keys.js";
import { MERGED_MAX, pendingAcrossGroups } from "./protocol/groupstore.js";
import { type PageOf, pageIds, readTasks } from "./protocol/reads.js";
import { queueMs } from "./protocol/store.js";
import { FINISHED, type Task, TaskState, taskFromHash } from "./tasks.js";

/** Ids per cancel, retry or drop call when the caller names them. */
export const ID_BATCH = 1000;
/** Hashes read per round trip while listing. */
export const LIST_CHUNK = 200;
/** Most tasks one page of `Queue.list` holds. */
export const MAX_LIMIT = 10_000;
/** Finished tasks a retry or a drop looks at per call when it works by filter. */
export const SCAN_BOUND = 1000;

/** What `Queue.cancel` did to a task. */
export const CancelOutcome = {
  /** It was pending or delayed: it will never run. */
  Cancelled: "cancelled",
  /** It runs: its worker cancels the run, and it then ends cancelled. */
  Requested: "requested",
  /** It had finished: nothing changed. */
  Done: "done",
  Dead: "dead",
  /** Cancelled before. */
  Finished: "finished",
  NotFound: "not_found",
} as const;
/** One of `CancelOutcome`'s values. */
export type CancelOutcome = (typeof CancelOutcome)[keyof typeof CancelOutcome];

const CANCEL_CODES: Readonly<Record<string, CancelOutcome>> = {
  cancelled: "cancelled",
  requested: "requested",
  done: "done",
  dead: "dead",
  finished: "finished",
  missing: "not_found",
};

/** Which finished tasks a retry or purge by filter takes; ages in milliseconds. */
export interface TaskFilter {
  /** Only tasks with this reason. */
  readonly reason?: string;
  /** Finished (or, unfinished, created) more than this many milliseconds ago. */
  readonly olderThanMs?: number;
  /** Finished (or created) less than this many milliseconds ago. */
  readonly newerThanMs?: number;
}

/** One page of `Queue.list`: the tasks, and the cursor of the next page (null: the last one). */
export interface TaskPage {
  readonly tasks: Task[];
  readonly cursor: string | null;
}

/** The context every control call runs in. */
export interface Control {
  readonly client: Client;
  readonly scripts: Scripts;
  readonly bundle: Bundle;
  readonly keys: QueueKeys;
}

/** An age filter given in ms, as the seconds the scripts take. */
function age(name: string, value: unknown): number | undefined {
  if (value === undefined) return undefined;
  if (
    typeof value !== "number" ||
    !Number.isFinite(value) ||
    value < 0 ||
    value > bounds.MAX_DURATION_S * 1000
  ) {
    throw new InvalidArgument(
      `${name} must be 0..${bounds.MAX_DURATION_S * 1000} ms, not ${describe(value)}`,
    );
  }
  return value / 1000;
}

/** `state` checked (and, with `allowed`, one of those). */
export function checkState(state: unknown, allowed?: ReadonlySet<TaskState>): TaskState {
  const known = Object.values(TaskState) as string[];
  if (typeof state !== "string" || !known.includes(state)) {
    throw new InvalidArgument(
      `unknown task state ${typeof state === "string" ? pyRepr(state) : String(state)}; one of: ${known.join(", ")}`,
    );
  }
  if (allowed !== undefined && !allowed.has(state as TaskState)) {
    throw new InvalidArgument(
      `state must be one of ${[...allowed].sort().join(", ")}, not ${pyRepr(state)}`,
    );
  }
  return state as TaskState;
}

function checkIds(taskIds: unknown): string[] {
  if (
    typeof taskIds === "string" ||
    !Array.isArray(taskIds) ||
    !taskIds.every((i) => typeof i === "string" && i !== "")
  ) {
    throw new InvalidArgument("task ids must be a list of non-empty strings");
  }
  return [...new Set(taskIds as string[])];
}

function swept(script: string, raw: unknown): [number, number | null] {
  if (!Array.isArray(raw) || raw.length !== 2)
    throw new ProtocolError(`${script}: unexpected reply ${JSON.stringify(raw)}`);
  const offset = Number(raw[1]);
  return [Number(raw[0]), offset < 0 ? null : offset];
}

/** Cancel each id (in calls of `ID_BATCH`); what happened to each. */
export async function cancel(
  c: Control,
  taskIds: readonly string[],
): Promise<Record<string, CancelOutcome>> {
  const all = checkIds(taskIds);
  const out: Record<string, CancelOutcome> = {};
  for (let start = 0; start < all.length; start += ID_BATCH) {
    Object.assign(out, await cancelCall(c, all.slice(start, start + ID_BATCH)));
  }
  return out;
}

/**
 * Run delayed tasks now (scheduled for later, or waiting out a retry's backoff): each goes
 * to pending at its priority. Per id whether it was delayed, and so promoted; the others
 * are left as they are. In calls of 1000, each atomic.
 */
export async function promote(
  c: Control,
  taskIds: readonly string[],
): Promise<Record<string, boolean>> {
  const all = checkIds(taskIds);
  const out: Record<string, boolean> = {};
  for (let start = 0; start < all.length; start += ID_BATCH) {
    const batch = all.slice(start, start + ID_BATCH);
    const argv = c.bundle.pack(
      "promote",
      {},
      batch.map((task_id) => ({ task_id })),
    );
    const raw = await c.scripts.run("promote", c.keys, argv);
    const flags = typeof raw === "string" ? raw : Buffer.isBuffer(raw) ? raw.toString() : "";
    if (flags.length !== batch.length || /[^01]/.test(flags)) {
      throw new ProtocolError(`promote: unexpected reply ${JSON.stringify(raw)}`);
    }
    batch.forEach((id, i) => {
      out[id] = flags[i] === "1";
    });
  }
  return out;
}

/** `group` if it is a group name, else an `InvalidArgument` (one line, as Python's `check_group`). */
export function checkGroup(group: unknown): string {
  const problem = groupProblem(group);
  if (problem !== undefined) throw new InvalidArgument(problem);
  return group as string;
}

/**
 * Cancel every unfinished task of `group`: its pending ones (from its own zset), then
 * its delayed and running ones (found by listing those states). How many ended each way.
 */
export async function cancelGroup(
  c: Control,
  group: string,
): Promise<Partial<Record<CancelOutcome, number>>> {
  checkGroup(group);
  const counts: Partial<Record<CancelOutcome, number>> = {};
  const tally = async (ids: readonly string[]): Promise<void> => {
    for (const outcome of Object.values(await cancel(c, ids)))
      counts[outcome] = (counts[outcome] ?? 0) + 1;
  };
  for (;;) {
    const ids = await pageIds(c, { state: "pending", group, newestFirst: false }, 0, ID_BATCH);
    if (ids.length === 0) break;
    await tally(ids);
  }
  for (const state of [TaskState.Delayed, TaskState.Running]) {
    let cursor: string | null = "0";
    while (cursor !== null) {
      let page: TaskPage = await listTasks(c, state, { limit: ID_BATCH, cursor, group });
      // cancelled delayed tasks leave the set: the next page starts where this began
      if (state === TaskState.Delayed && page.tasks.length > 0 && page.cursor !== null) {
        page = { tasks: page.tasks, cursor: String(Number(page.cursor) - page.tasks.length) };
      }
      await tally(page.tasks.map((t) => t.id));
      cursor = page.cursor;
    }
  }
  return counts;
}

/** One cancel script call for `batch` (distinct ids, checked): what happened to each. */
export async function cancelCall(
  c: Control,
  batch: readonly string[],
): Promise<Record<string, CancelOutcome>> {
  const argv = c.bundle.pack(
    "cancel",
    {},
    batch.map((task_id) => ({ task_id })),
  );
  const raw = await c.scripts.run("cancel", c.keys, argv);
  if (!Array.isArray(raw) || raw.length !== batch.length) {
    throw new ProtocolError(`cancel: unexpected reply ${JSON.stringify(raw)}`);
  }
  const out: Record<string, CancelOutcome> = {};
  batch.forEach((id, i) => {
    const outcome = CANCEL_CODES[String(raw[i])];
    if (outcome === undefined)
      throw new ProtocolError(`cancel: unexpected reply ${JSON.stringify(raw)}`);
    out[id] = outcome;
  });
  return out;
}

/**
 * One retry script call in mode `flow` for `batch` (distinct ids, checked): its dead and
 * cancelled tasks back, each dependant waiting again for what it needs; how many went back.
 */
export async function retryFlowCall(c: Control, batch: readonly string[]): Promise<number> {
  const argv = c.bundle.pack(
    "retry",
    { mode: "flow" },
    batch.map((task_id) => ({ task_id })),
  );
  return swept("retry", await c.scripts.run("retry", c.keys, argv))[0];
}

interface Scan {
  reason: string;
  oldestMs: number | "-inf";
  newestMs: number;
}

async function scanOf(c: Control, filter: TaskFilter): Promise<Scan> {
  // tasks finished before now (server time), so one that finishes again meanwhile (a
  // retried one that fails) is not taken twice
  const older = age("olderThanMs", filter.olderThanMs) ?? 0;
  const newer = age("newerThanMs", filter.newerThanMs);
  const now = await queueMs(c);
  return {
    reason: filter.reason ?? "",
    oldestMs: newer === undefined ? "-inf" : now - Math.trunc(newer * 1000),
    newestMs: now - Math.trunc(older * 1000),
  };
}

async function byIdsOrScan(
  c: Control,
  script: "retry" | "drop",
  head: Record<string, string | number | undefined>,
  taskIds: readonly string[] | undefined,
  filter: TaskFilter,
): Promise<number> {
  let total = 0;
  if (taskIds !== undefined) {
    const all = checkIds(taskIds);
    for (let start = 0; start < all.length; start += ID_BATCH) {
      const records = all.slice(start, start + ID_BATCH).map((task_id) => ({ task_id }));
      const argv = c.bundle.pack(script, { ...head, mode: "ids" }, records);
      total += swept(script, await c.scripts.run(script, c.keys, argv))[0];
    }
    return total;
  }
  const scan = await scanOf(c, filter);
  let offset: number | null = 0;
  while (offset !== null) {
    const argv = c.bundle.pack(script, {
      ...head,
      mode: "scan",
      reason: scan.reason,
      oldest_ms: scan.oldestMs,
      newest_ms: scan.newestMs,
      offset,
      bound: SCAN_BOUND,
    });
    const [count, next]: [number, number | null] = swept(
      script,
      await c.scripts.run(script, c.keys, argv),
    );
    total += count;
    offset = next;
  }
  return total;
}

/** Options of `Queue.retry`. */
export interface RetryOptions extends TaskFilter {
  /** These dead tasks (default: every dead task the filter matches). */
  readonly taskIds?: readonly string[];
  /** The new attempt budget, replacing the task's own. */
  readonly maxAttempts?: number;
  /** Only the dead tasks of this group (found by listing them; ignored with `taskIds`). */
  readonly group?: string;
}

/** Send dead tasks back to pending with a new attempt budget; how many went back. */
export async function retry(c: Control, options: RetryOptions): Promise<number> {
  const { maxAttempts } = options;
  if (
    maxAttempts !== undefined &&
    (typeof maxAttempts !== "number" ||
      !Number.isInteger(maxAttempts) ||
      maxAttempts < bounds.MIN_ATTEMPTS ||
      maxAttempts > bounds.MAX_ATTEMPTS)
  ) {
    throw new InvalidArgument(
      `max_attempts must be ${bounds.MIN_ATTEMPTS}..${bounds.MAX_ATTEMPTS}, not ${describe(maxAttempts)}`,
    );
  }
  if (options.taskIds === undefined && options.group !== undefined) {
    // the dead tasks of that group, by listing (the script's scan filters by reason only)
    const group = checkGroup(options.group);
    const found: string[] = [];
    let cursor: string | null = "0";
    while (cursor !== null) {
      const page: TaskPage = await listTasks(c, TaskState.Dead, {
        limit: MAX_LIMIT,
        cursor,
        reason: options.reason,
        olderThanMs: options.olderThanMs,
        newerThanMs: options.newerThanMs,
        group,
      });
      for (const task of page.tasks) found.push(task.id);
      cursor = page.cursor;
    }
    return byIdsOrScan(c, "retry", { max_attempts: maxAttempts }, found, {});
  }
  return byIdsOrScan(c, "retry", { max_attempts: maxAttempts }, options.taskIds, options);
}

/** Options of `Queue.purgeTasks`. */
export interface PurgeOptions extends TaskFilter {
  /** These tasks (default: every one of the state the filter matches). */
  readonly taskIds?: readonly string[];
}

/** Delete finished tasks in `state` now; how many were deleted. */
export async function drop(c: Control, state: TaskState, options: PurgeOptions): Promise<number> {
  const name = checkState(state, FINISHED);
  return byIdsOrScan(c, "drop", { state: name }, options.taskIds, options);
}

/** Options of `Queue.list`. */
export interface ListOptions extends TaskFilter {
  /** Most tasks on the page, 1..10,000 (default 100). */
  readonly limit?: number;
  /** The previous page's cursor. */
  readonly cursor?: string | null;
  /**
   * Only this group's tasks. Pending tasks of groups wait in their group's own order:
   * `group` lists one group's (`Queue.groups` names the groups); without it, pending lists
   * every task, its groups' included, in the order the claim serves them (the first
   * `MERGED_MAX` of that order).
   */
  readonly group?: string;
}

/**
 * Tasks in `state`: pending in the order they will run, delayed by when they are due,
 * running by lease expiry, finished ones newest first. Age is from finished_at for
 * finished tasks, created_at for the others; a page looks at most `10 * limit + 1000`
 * entries.
 */
export async function listTasks(
  c: Control,
  state: TaskState,
  options: ListOptions,
): Promise<TaskPage> {
  const parsed = checkState(state);
  const group = options.group === undefined ? undefined : checkGroup(options.group);
  // a group's pending tasks have their own zset, in the order they will run
  const own = group !== undefined && parsed === TaskState.Pending;
  const limit = options.limit ?? 100;
  if (typeof limit !== "number" || !Number.isInteger(limit) || limit < 1 || limit > MAX_LIMIT) {
    throw new InvalidArgument(`limit must be 1..${MAX_LIMIT}, not ${describe(limit)}`);
  }
  const cursor = options.cursor ?? "";
  if (typeof cursor !== "string" || (cursor !== "" && !/^[0-9]+$/.test(cursor))) {
    throw new InvalidArgument(`not a cursor of Queue.list: ${describe(cursor)}`);
  }
  let offset = cursor === "" ? 0 : Number(cursor);
  const older = age("olderThanMs", options.olderThanMs);
  const newer = age("newerThanMs", options.newerThanMs);
  const now = await queueMs(c);
  const finished = FINISHED.has(parsed);
  const lo = newer === undefined ? -Infinity : now - Math.trunc(newer * 1000);
  const hi = older === undefined ? Infinity : now - Math.trunc(older * 1000);
  const byScore = finished && (older !== undefined || newer !== undefined);
  let budget = 10 * limit + 1000;
  const found: Task[] = [];
  const bound = (v: number): string =>
    v === Infinity ? "+inf" : v === -Infinity ? "-inf" : String(v);
  while (found.length < limit && budget > 0) {
    const chunk = Math.min(LIST_CHUNK, budget);
    const page: PageOf = {
      state: parsed,
      group: own ? group : undefined,
      newestFirst: finished,
      scores: byScore ? [bound(hi), bound(lo)] : undefined,
    };
    // pending without a group: across the groups' own zsets when groups are in use
    const across =
      parsed === TaskState.Pending && !own ? await pendingAcrossGroups(c, offset, chunk) : null;
    if (across === "beyond") {
      if (found.length > 0) return { tasks: found, cursor: String(offset) };
      throw new InvalidArgument(
        `pending across groups is listed up to its first ${MERGED_MAX} tasks: ` +
          "list one group's with group (Queue.groups names them)",
      );
    }
    const ids = across ?? (await pageIds(c, page, offset, chunk));
    if (ids.length === 0) return { tasks: found, cursor: null };
    const hashes = await readTasks(c, ids);
    for (const [i, id] of ids.entries()) {
      offset += 1;
      budget -= 1;
      const hash = id === "" ? {} : (hashes[i] ?? {});
      if (Object.keys(hash).length === 0) continue; // pruned or deleted meanwhile
      const task = taskFromHash(hash, id);
      if (group !== undefined && task.group !== group) continue;
      if (matches(task, finished, options.reason, lo, hi)) found.push(task);
      if (found.length >= limit) break;
    }
    if (ids.length < chunk && found.length < limit) return { tasks: found, cursor: null };
  }
  return { tasks: found, cursor: String(offset) };
}

function matches(
  task: Task,
  finished: boolean,
  reason: string | undefined,
  lo: number,
  hi: number,
): boolean {
  if (reason !== undefined && reason !== "" && task.reason !== reason) return false;
  if (finished || (lo === -Infinity && hi === Infinity)) return true;
  if (task.createdAt === null) return false;
  const created = task.createdAt.getTime();
  return created >= lo && created <= hi;
}
