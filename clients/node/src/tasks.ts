/**
 * A task as stored in its hash, read into typed fields: the Python package's `Task`
 * (`protocol/tasks.py`), with camelCase names and times as `Date`s. Reading never fails
 * on a field it cannot read, whoever wrote it: only a hash without a known state throws.
 *
 * @module
 */

import * as bounds from "./bounds.js";
import { NAME_MARK } from "./encoding.js";
import { ProtocolError, pyRepr } from "./errors.js";
import { ATTEMPT, COUNTER_FIELDS, TASK } from "./protocol/layout.js";

/** A task's states. */
export const TaskState = {
  Pending: "pending",
  Delayed: "delayed",
  Running: "running",
  Done: "done",
  Dead: "dead",
  Cancelled: "cancelled",
  /** Waiting for the tasks it names in `after`. */
  Waiting: "waiting",
} as const;
/** One of a task's states. */
export type TaskState = (typeof TaskState)[keyof typeof TaskState];

const STATES: ReadonlySet<string> = new Set(Object.values(TaskState));
/** The states a task ends in. */
export const FINISHED: ReadonlySet<TaskState> = new Set<TaskState>(["done", "dead", "cancelled"]);

/** Counters of the queue's statistics, each reported by `Queue.stats` (0 when never bumped). */
export const COUNTERS = COUNTER_FIELDS;

/**
 * One attempt of a task: who ran it, when, and how it ended. `outcome`: done, failed (it
 * runs again), retried (given back as its handler asked), timed out, lost (its worker
 * died), released (given back by a draining worker), cancelled, dead; running for the
 * attempt under way; null when unknown.
 */
export interface Attempt {
  /** The attempt's number (a given-back start keeps it). */
  readonly attempt: number;
  readonly pod: string | null;
  readonly startedAt: Date | null;
  readonly endedAt: Date | null;
  readonly outcome: string | null;
  readonly error: string | null;
  /** The failure's last frames (a stack or a Python traceback, at most 4096 characters). */
  readonly traceback: string | null;
}

/**
 * A task as stored, with proper types (times are `Date`s, null when absent or unreadable).
 * `Payload` and `Result` are what its `Queue<Payload, Result>` says it carries; they are
 * not checked when read (a foreign writer may have stored anything).
 */
export interface Task<Payload = unknown, Result = unknown> {
  readonly id: string;
  readonly state: TaskState;
  /** Its handler's name; null: the workers' default handler. */
  readonly name: string | null;
  /** The payload as parsed JSON (or its text, when a foreign writer stored something else). */
  readonly payload: Payload;
  readonly priority: number;
  readonly attempts: number;
  readonly maxAttempts: number | null;
  readonly lost: number;
  readonly cost: number;
  /** The real cost its handler reported. */
  readonly costUsed: number | null;
  /** Retries its handler asked for (RetryAfter). */
  readonly deferred: number;
  /** Milliseconds a run may take (stored in seconds); null: the queue's default. */
  readonly timeoutMs: number | null;
  readonly createdAt: Date | null;
  readonly runAt: Date | null;
  readonly deadline: Date | null;
  readonly startedAt: Date | null;
  readonly finishedAt: Date | null;
  readonly leaseUntil: Date | null;
  readonly progressAt: Date | null;
  /** When its cancellation was asked for while it ran. */
  readonly cancelRequested: Date | null;
  readonly pod: string | null;
  readonly incarnation: string | null;
  readonly token: string | null;
  readonly error: string | null;
  /** Why it is dead (expired, worker lost, bad payload, bad task, failed, permanent, ...), or cancelled. */
  readonly reason: string | null;
  /** Its group; null: ungrouped. */
  readonly group: string | null;
  /** What its handler returned (null until it is done). */
  readonly result: Result | null;
  /** What its handler last reported: {fraction, done, total, message}. */
  readonly progress: unknown;
  /** The state its handler last checkpointed; once finished, only if kept. */
  readonly checkpoint: unknown;
  /** The tasks it waits for (`after`), empty when none. */
  readonly after: readonly string[];
  /** With `after`: fail, ignore or cancel; null when it waits for nothing. */
  readonly onDepFail: string | null;
  /** The flow it belongs to (the id of the flow's first task); null: none. */
  readonly flow: string | null;
  /** Whether it has finished (done, dead or cancelled). */
  readonly finished: boolean;
  /** Its attempts, oldest first (the newest 16 stored, then the one its own fields tell). */
  readonly history: readonly Attempt[];
  /** The traceback of its latest attempt that left one; null when none did. */
  readonly traceback: string | null;
}

/** A stored number, or null when absent, not a number, or not finite. */
export function storedFloat(value: string | undefined): number | null {
  if (value === undefined || value.trim() === "") return null;
  const text = value.trim().toLowerCase();
  const number = /^[+-]?(inf|infinity|nan)$/.test(text) ? NaN : Number(text.replaceAll("_", ""));
  return Number.isFinite(number) ? number : null;
}

/** A stored integer, or null when it is not a number (a decimal reads truncated toward zero). */
export function storedInt(value: string | undefined): number | null {
  const number = storedFloat(value);
  return number === null ? null : Math.trunc(number);
}

/** Epoch ms as a `Date`, or null when absent, unreadable or out of range. */
export function storedTime(value: string | undefined): Date | null {
  const ms = storedFloat(value);
  if (ms === null || ms < bounds.MIN_EPOCH_MS || ms > bounds.MAX_EPOCH_MS) return null;
  return new Date(Math.trunc(ms));
}

/** `(name, JSON text)` of a stored payload; name null when it has none. */
export function splitNamed(stored: string): [string | null, string] {
  if (!stored.startsWith(NAME_MARK)) return [null, stored];
  const end = stored.indexOf(NAME_MARK, 1);
  if (end < 0) return [stored.slice(1), ""];
  return [stored.slice(1, end), stored.slice(end + 1)];
}

function nestedTooDeep(text: string): boolean {
  let count = 0;
  for (const c of text) if (c === "[" || c === "{") count++;
  if (count <= bounds.MAX_PAYLOAD_DEPTH) return false;
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === "\\") i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === "[" || c === "{") deepest = Math.max(deepest, ++depth);
    else if (c === "]" || c === "}") depth--;
  }
  return deepest > bounds.MAX_PAYLOAD_DEPTH;
}

function parsed(text: string): unknown {
  if (nestedTooDeep(text)) return text;
  try {
    return JSON.parse(text);
  } catch {
    return text; // written by a foreign producer: kept as text
  }
}

const TIME_FIELDS = {
  createdAt: TASK.created_at,
  runAt: TASK.run_at,
  deadline: TASK.deadline,
  startedAt: TASK.started_at,
  finishedAt: TASK.finished_at,
  leaseUntil: TASK.lease_until,
  progressAt: TASK.progress_at,
  cancelRequested: TASK.cancel_requested,
} as const;

/** The task of a stored hash (field name to text); `taskId` when the hash has no id. */
export function taskFromHash(raw: Readonly<Record<string, string>>, taskId?: string): Task {
  const text = (name: string): string | null => raw[name] ?? null;
  const id = raw.id ?? taskId ?? "?";
  const state = raw.state;
  if (state === undefined || !STATES.has(state)) {
    throw new ProtocolError(
      `task ${pyRepr(id)} has no state this version knows: ${state === undefined ? "None" : pyRepr(state)}`,
    );
  }
  const int = (name: string, fallback: number): number => storedInt(raw[name]) ?? fallback;
  const times = Object.fromEntries(
    Object.entries(TIME_FIELDS).map(([key, field]) => [key, storedTime(raw[field])]),
  ) as Record<keyof typeof TIME_FIELDS, Date | null>;
  const timeout = storedFloat(raw.timeout);
  let name: string | null = null;
  let payload: unknown = null;
  if (raw.payload !== undefined) {
    const [taskName, body] = splitNamed(raw.payload);
    name = taskName;
    payload = parsed(body);
  }
  const history = historyOf(raw, state, int("attempts", 0), times.startedAt, times.finishedAt);
  return {
    id,
    state: state as TaskState,
    name,
    payload,
    priority: int("priority", 0),
    attempts: int("attempts", 0),
    maxAttempts: storedInt(raw[TASK.max_attempts]),
    lost: int("lost", 0),
    cost: int("cost", 1),
    costUsed: storedInt(raw[TASK.cost_used]),
    deferred: int("deferred", 0),
    timeoutMs: timeout !== null && timeout > 0 ? Math.round(timeout * 1000 * 1e6) / 1e6 : null,
    ...times,
    pod: text("pod"),
    incarnation: text("incarnation"),
    token: text("token"),
    error: text("error"),
    reason: text("reason"),
    group: text("group"),
    result: raw.result === undefined ? null : parsed(raw.result),
    progress: raw.progress === undefined ? null : parsed(raw.progress),
    checkpoint: raw.checkpoint === undefined ? null : parsed(raw.checkpoint),
    after: afterIds(raw.after),
    onDepFail: text("on_dep_fail"),
    flow: text("flow"),
    finished: FINISHED.has(state as TaskState),
    history,
    traceback: history.findLast((a) => a.traceback !== null)?.traceback ?? null,
  };
}

/** What an attempt only the task's own fields tell ended as, by the task's state. */
const LAST_OUTCOME: Readonly<Record<string, string>> = {
  running: "running",
  done: "done",
  dead: "dead",
  cancelled: "cancelled",
  delayed: "failed",
};

/**
 * The stored attempts (field `history`), then the latest one when only the task's own
 * fields tell it (a done or running attempt is never stored; none for a pending task).
 * Unreadable records are left out.
 */
function historyOf(
  raw: Readonly<Record<string, string>>,
  state: string,
  attempts: number,
  startedAt: Date | null,
  finishedAt: Date | null,
): Attempt[] {
  const out: Attempt[] = [];
  const historyText = raw[TASK.history];
  const stored = historyText === undefined ? null : parsed(historyText);
  const textOf = (v: unknown): string | null => (typeof v === "string" && v !== "" ? v : null);
  const timeOf = (v: unknown): Date | null =>
    typeof v === "number" || typeof v === "string" ? storedTime(String(v)) : null;
  for (const record of Array.isArray(stored) ? (stored as unknown[]) : []) {
    if (typeof record !== "object" || record === null || Array.isArray(record)) continue;
    const r = record as Record<string, unknown>;
    const n = r[ATTEMPT.attempt];
    out.push({
      attempt: typeof n === "number" && Number.isFinite(n) ? Math.trunc(n) : 0,
      pod: textOf(r[ATTEMPT.pod]),
      startedAt: timeOf(r[ATTEMPT.started_at]),
      endedAt: timeOf(r[ATTEMPT.ended_at]),
      outcome: textOf(r[ATTEMPT.outcome]),
      error: textOf(r[ATTEMPT.error]),
      traceback: textOf(r[ATTEMPT.traceback]),
    });
  }
  const last = out.at(-1);
  // a pending task's last start was recorded when it ended, or was a hand-off no handler
  // began (released without a record): nothing more to tell
  const outcome = LAST_OUTCOME[state] ?? null;
  if (
    outcome !== null &&
    startedAt !== null &&
    (last === undefined || last.startedAt?.getTime() !== startedAt.getTime())
  ) {
    out.push({
      attempt: attempts,
      pod: raw.pod ?? null,
      startedAt,
      endedAt: FINISHED.has(state as TaskState) ? finishedAt : null,
      outcome,
      error: outcome === "failed" || outcome === "dead" ? (raw.error ?? null) : null,
      traceback: null,
    });
  }
  return out;
}

function afterIds(value: string | undefined): string[] {
  if (value === undefined || value === "") return [];
  const ids = parsed(value);
  return Array.isArray(ids) ? ids.map(String) : [];
}
