/**
 * Flows as values: `chain`, `group` and `chord` of tasks, built into one enqueue call
 * whose tasks wait for each other (`after`), so a whole flow is stored in one atomic
 * script (`Queue.enqueueFlow`); and `flowRecord`, the read of a flow's record
 * (`Queue.flow`). The Python client's `producer/flows.py` and `protocol/flows.py`: the
 * same flow gives the same call, and so the same records (docs/flows.md).
 *
 * A task of a flow is an `enqueueMany` item (its `payload` and `enqueue`'s options).
 * `chain(a, b, c)`: b after a, c after b; `group(a, b)`: side by side; a part after a
 * group waits for every task that ends it; `chord(group(...), merge)` is
 * `chain(group(...), merge)`: merge runs once all are done and receives their results.
 * Parts nest.
 *
 * @module
 */

import type { Client } from "./connection.js";
import type { EnqueueItem } from "./encoding.js";
import { newTaskId } from "./encoding.js";
import { InvalidArgument } from "./errors.js";
import type { QueueKeys } from "./keys.js";
import { FLOW_FIELDS, readDependencyInputs } from "./protocol/reads.js";
import { storedInt, storedTime } from "./tasks.js";

/** How deep parts may nest. */
export const MAX_FLOW_DEPTH = 100;

/** A part of a flow: a task (an `enqueueMany` item) or a flow. */
export type FlowPart = EnqueueItem | Flow;

/** A chain or a group of parts; build with `chain` / `group` / `chord`. */
export class Flow {
  /** @internal */
  constructor(
    readonly kind: "chain" | "group",
    readonly parts: readonly FlowPart[],
  ) {}
}

/**
 * What `Queue.enqueueFlow` stored: every task's id in the order the flow names them, and
 * the ids of the tasks that end it (what a part after it would wait for).
 */
export interface FlowIds {
  readonly ids: readonly string[];
  readonly last: readonly string[];
}

/** Each part after the one before it. */
export function chain(...parts: FlowPart[]): Flow {
  return new Flow("chain", parts);
}

/** The parts side by side; what follows waits for all of them. */
export function group(...parts: FlowPart[]): Flow {
  return new Flow("group", parts);
}

/** `callback` once every task of `header` is done, with their results. */
export function chord(header: FlowPart, callback: FlowPart): Flow {
  return new Flow("chain", [header, callback]);
}

/**
 * The enqueue items of a flow, in order (each after what it waits for, with an id of its
 * own), and the ids that end it. `InvalidArgument` for a flow with no task, a part that
 * is neither a task nor a flow, or nesting past `MAX_FLOW_DEPTH`.
 */
export function buildFlow(flow: FlowPart): { items: EnqueueItem[]; last: string[] } {
  const items: EnqueueItem[] = [];
  const last = place(flow, [], items, 0);
  if (items.length === 0) {
    throw new InvalidArgument("the flow has no task: give chain / group at least one part");
  }
  return { items, last: [...last] };
}

function place(
  part: unknown,
  after: readonly string[],
  items: EnqueueItem[],
  depth: number,
): readonly string[] {
  if (depth > MAX_FLOW_DEPTH)
    throw new InvalidArgument(`a flow nests more than ${MAX_FLOW_DEPTH} levels deep`);
  if (part instanceof Flow) {
    if (part.kind === "chain") {
      let ends = after;
      for (const sub of part.parts) ends = place(sub, ends, items, depth + 1);
      return ends;
    }
    const out: string[] = [];
    for (const sub of part.parts) out.push(...place(sub, after, items, depth + 1));
    return part.parts.length > 0 ? out : after;
  }
  if (typeof part !== "object" || part === null || Array.isArray(part)) {
    throw new InvalidArgument(
      `a flow's part must be a task (an object with a payload) or a flow, not ${shown(part)}`,
    );
  }
  const item: Record<string, unknown> = { ...part };
  item.taskId ??= newTaskId();
  const own: unknown = item.after ?? [];
  if (!Array.isArray(own)) throw new InvalidArgument("after must be a list of task ids");
  const waits = [...(own as unknown[]), ...after.filter((dep) => !own.includes(dep))];
  if (waits.length > 0) item.after = waits;
  items.push(item as unknown as EnqueueItem);
  return [String(item.taskId)];
}

function shown(value: unknown): string {
  const text = Array.isArray(value) ? JSON.stringify(value) : String(value);
  return text.length > 100 ? `${text.slice(0, 100)}...` : text;
}

/** A flow's outcome once its last member ended. */
export type FlowOutcome = "done" | "failed" | "cancelled";

/**
 * One flow as its record stands: members open (not finished) and finished by how;
 * `outcome` and `endedAt` once the last one ended (null before).
 */
export interface FlowRecord {
  readonly id: string;
  readonly open: number;
  readonly done: number;
  readonly dead: number;
  readonly cancelled: number;
  readonly startedAt: Date | null;
  readonly endedAt: Date | null;
  readonly outcome: FlowOutcome | null;
  /** The last member ended (`endedAt` is set). */
  readonly ended: boolean;
}

/** A flow's record from its HMGET reply; null when there is none. */
export function flowRecord(flowId: string, reply: readonly (string | null)[]): FlowRecord | null {
  const h = Object.fromEntries(
    FLOW_FIELDS.map((name, i) => [name, reply[i] ?? undefined]),
  ) as Record<(typeof FLOW_FIELDS)[number], string | undefined>;
  if (h.started_at === undefined) return null;
  const count = (name: "open" | "done" | "dead" | "cancelled"): number =>
    Math.max(0, storedInt(h[name]) ?? 0);
  const endedAt = storedTime(h.ended_at);
  return {
    id: flowId,
    open: count("open"),
    done: count("done"),
    dead: count("dead"),
    cancelled: count("cancelled"),
    startedAt: storedTime(h.started_at),
    endedAt,
    outcome: (h.outcome ?? null) as FlowOutcome | null,
    ended: endedAt !== null,
  };
}

/**
 * The results handed to `taskId` by its dependencies, by their id, in the order of its
 * `after` (a dependency whose result was not handed is absent). `after`: that list as the
 * claim record carried it (one read); null: read from the task (two).
 */
export async function dependencyResults(
  client: Client,
  keys: QueueKeys,
  taskId: string,
  after: string | null = null,
): Promise<Record<string, unknown>> {
  const [ids, values] = await readDependencyInputs(client, keys, taskId, after);
  const out: Record<string, unknown> = {};
  ids.forEach((dep, i) => {
    const value = values[i];
    if (value === null || value === undefined) return;
    try {
      out[dep] = JSON.parse(value);
    } catch {
      out[dep] = value; // written by a foreign producer: kept as text
    }
  });
  return out;
}
