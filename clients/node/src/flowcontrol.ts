/**
 * Cancel and retry a whole flow, or a branch of one (docs/flows.md): the Python client's
 * `producer/flowcontrol.py` and `protocol/flowwalk.py`, on the same scripts.
 *
 * The **branch** of a task is the task and every task that waits for it, transitively;
 * its **flow** is every task connected to it through `after` links in either direction.
 * The members are found by walking the links Redis holds (each task's `after`, and the
 * `by:<dependant>` fields a dependency keeps), `WALK_BATCH` tasks a round trip, every read
 * bounded (one HMGET and one HSCAN step of at most `BY_COUNT` fields per task); then
 * changed in script calls of `CHANGE_BATCH` tasks: each call is atomic and short, the
 * whole is not one atomic step (a member may finish between two calls).
 *
 * @module
 */

import { type CancelOutcome, type Control, cancelCall, retryFlowCall } from "./control.js";
import { FlowTooLarge, InvalidArgument, TaskNotFound } from "./errors.js";
import { readLinkHeads, scanWaitedBy } from "./protocol/flowstore.js";

/** Tasks whose links one round trip reads. */
export const WALK_BATCH = 200;
/** Tasks one cancel or retry script call changes (each resolves at most 200 dependants). */
export const CHANGE_BATCH = 200;
/** Walks a cancel makes at most: one more after each that found members to cancel. */
export const MAX_PASSES = 10;
/**
 * Tasks a walk finds at most (linked ids included): past it, `FlowTooLarge` and nothing
 * changed, so a walk's time and memory are bounded whatever Redis holds.
 */
export const MAX_FLOW_TASKS = 50_000;

const UNFINISHED = new Set(["pending", "delayed", "waiting", "running"]);
const ACTED = new Set<CancelOutcome>(["cancelled", "requested"]);

/** One task's state (null: no such task) and links: what it waits for, what waits for it. */
interface Links {
  readonly state: string | null;
  readonly after: readonly string[];
  readonly by: readonly string[];
}

function afterIds(raw: string | null): string[] {
  if (raw === null) return [];
  let ids: unknown;
  try {
    ids = JSON.parse(raw);
  } catch {
    return [];
  }
  return Array.isArray(ids) ? ids.map(String) : [];
}

/** Each task's state and links, in the order asked (one round trip), the first HSCAN step's cursor too. */
async function readLinks(c: Control, batch: readonly string[]): Promise<[Links, string][]> {
  return (await readLinkHeads(c, batch)).map((head) => [
    { state: head.state, after: afterIds(head.after), by: head.by },
    head.cursor,
  ]);
}

/**
 * The members of `taskId`'s branch (`branch`) or flow, with their links, in the order
 * found; a linked id with no task (deleted by retention) is kept with state null and not
 * followed. `TaskNotFound` when `taskId` itself is no task; `FlowTooLarge` past
 * `MAX_FLOW_TASKS`. Each id is read once (`queued`), so a cycle in the stored links ends
 * the walk like any other edge back to a task already met.
 */
async function walk(c: Control, taskId: string, branch: boolean): Promise<Map<string, Links>> {
  const found = new Map<string, Links>();
  let frontier = [taskId];
  const queued = new Set([taskId]);
  while (frontier.length > 0) {
    const batch = frontier.slice(0, WALK_BATCH);
    frontier = frontier.slice(WALK_BATCH);
    const read = await readLinks(c, batch);
    for (const [i, tid] of batch.entries()) {
      const [got, first] = read[i] as [Links, string];
      const by = [...got.by];
      let cursor = first;
      while (cursor !== "0") {
        if (queued.size + by.length > MAX_FLOW_TASKS)
          throw new FlowTooLarge(taskId, MAX_FLOW_TASKS);
        const [next, more] = await scanWaitedBy(c, tid, cursor);
        cursor = next;
        by.push(...more);
      }
      found.set(tid, { state: got.state, after: got.after, by });
      if (got.state === null) {
        if (tid === taskId) throw new TaskNotFound(c.keys.queue, taskId);
        continue;
      }
      for (const other of branch ? by : [...got.after, ...by]) {
        if (!queued.has(other)) {
          queued.add(other);
          frontier.push(other);
        }
      }
      if (queued.size > MAX_FLOW_TASKS) throw new FlowTooLarge(taskId, MAX_FLOW_TASKS);
    }
  }
  return found;
}

/**
 * The members, each after every member it waits for (dependencies first). Iterative, each
 * member entered once: a cycle in the stored links (written by hand) is cut where the walk
 * meets a member already entered, so it ends in time and memory linear in the links.
 */
function order(members: ReadonlyMap<string, Links>): string[] {
  const entered = new Set<string>();
  const out: string[] = [];
  for (const start of members.keys()) {
    if (entered.has(start)) continue;
    entered.add(start);
    const stack: [string, Iterator<string>][] = [
      [start, (members.get(start)?.after ?? [])[Symbol.iterator]()],
    ];
    while (stack.length > 0) {
      const [tid, deps] = stack[stack.length - 1] as [string, Iterator<string>];
      let pushed = false;
      for (let next = deps.next(); !next.done; next = deps.next()) {
        const dep = next.value;
        if (members.has(dep) && !entered.has(dep)) {
          entered.add(dep);
          stack.push([dep, (members.get(dep)?.after ?? [])[Symbol.iterator]()]);
          pushed = true;
          break;
        }
      }
      if (!pushed) {
        stack.pop();
        out.push(tid);
      }
    }
  }
  return out;
}

/** Options of `Queue.cancelFlow` and `Queue.retryFlow`. */
export interface FlowControlOptions {
  /** Only the task's branch (it and what waits for it, transitively), not its whole flow. */
  readonly branch?: boolean;
}

/** The arguments checked; whether only the branch is meant. */
function checked(taskId: unknown, options: FlowControlOptions): boolean {
  if (typeof taskId !== "string" || !taskId.isWellFormed()) {
    throw new InvalidArgument("task_id must be a string UTF-8 can encode");
  }
  const branch: unknown = options.branch ?? false;
  if (typeof branch !== "boolean") throw new InvalidArgument("branch must be true or false");
  return branch;
}

/**
 * Cancel every unfinished member, dependants first (a dependant cancelled before its
 * dependency is not ended by its policy instead). Walks again after each pass that
 * cancelled something, for members that appeared meanwhile (children a running member
 * added before it was asked to stop). Each member's outcome, as `cancelMany`.
 */
export async function cancelFlow(
  c: Control,
  taskId: string,
  options: FlowControlOptions,
): Promise<Record<string, CancelOutcome>> {
  const branch = checked(taskId, options);
  const out = new Map<string, CancelOutcome>();
  for (let pass = 0; pass < MAX_PASSES; pass++) {
    const members = await walk(c, taskId, branch);
    for (const [tid, got] of members) {
      if (!out.has(tid) && got.state !== null) {
        out.set(tid, got.state === "done" ? "done" : got.state === "dead" ? "dead" : "finished");
      }
    }
    const targets = order(members)
      .reverse()
      .filter(
        (tid) =>
          UNFINISHED.has(members.get(tid)?.state ?? "") && !ACTED.has(out.get(tid) ?? "finished"),
      );
    if (targets.length === 0) break;
    for (let start = 0; start < targets.length; start += CHANGE_BATCH) {
      for (const [tid, outcome] of Object.entries(
        await cancelCall(c, targets.slice(start, start + CHANGE_BATCH)),
      )) {
        out.set(tid, outcome);
      }
    }
  }
  return Object.fromEntries(out);
}

/**
 * Send every dead or cancelled member back, dependencies first (so a dependant waits for
 * them again rather than ending again by its policy); done and unfinished members are
 * left as they are. How many went back (pending, or waiting again).
 */
export async function retryFlow(
  c: Control,
  taskId: string,
  options: FlowControlOptions,
): Promise<number> {
  const branch = checked(taskId, options);
  const members = await walk(c, taskId, branch);
  const targets = order(members).filter((tid) => {
    const state = members.get(tid)?.state;
    return state === "dead" || state === "cancelled";
  });
  let count = 0;
  for (let start = 0; start < targets.length; start += CHANGE_BATCH) {
    count += await retryFlowCall(c, targets.slice(start, start + CHANGE_BATCH));
  }
  return count;
}
