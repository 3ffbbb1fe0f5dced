/**
 * Errors taskfleet throws on purpose, one class each, so callers catch exactly what they
 * mean. Names and meanings are those of the Python package's `taskfleet.protocol.errors`.
 *
 * @module
 */

import { formatG } from "./pyformat.js";

/** Base of every error taskfleet throws on purpose. */
export class TaskfleetError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** A payload is not a JSON object, not serialisable, nested too deep, or too large. */
export class InvalidPayload extends TaskfleetError {}

/** An argument is out of range or of the wrong kind (priority, delay, cost, queue name, ...). */
export class InvalidArgument extends TaskfleetError {}

/** A task's output is full (MAX_OUTPUT_ENTRIES chunks or MAX_OUTPUT_BYTES bytes): the chunk was not stored. */
export class OutputFull extends InvalidArgument {}

/** A Redis URL taskfleet refuses; the message says what to fix and never quotes the URL. */
export class InvalidRedisURL extends TaskfleetError {}

/** A script answered something this version does not understand (version skew?). */
export class ProtocolError extends TaskfleetError {}

/** `Queue.wait` ran out of time before every task finished. */
export class WaitTimeout extends TaskfleetError {
  /** The ids that had not finished. */
  readonly unfinished: string[];

  constructor(unfinished: string[], timeout: number) {
    super(`${unfinished.length} task(s) not finished after ${formatG(timeout)} s`);
    this.unfinished = unfinished;
  }
}

/**
 * An enqueue named an existing task id with a different payload or options: an id names
 * one task, and nothing of the call was stored. `field` says what differs (`payload`,
 * `name`, `priority`, `cost`, `timeout`, `max_attempts`, `after`, `on_dep_fail` or `group`).
 */
export class TaskExists extends TaskfleetError {
  readonly taskId: string;
  /** What differs, as the script names it (`payload`, `name`, `priority`, `cost`, `timeout`, `max_attempts`, `after`, `on_dep_fail`, `group`). */
  readonly field: string;

  constructor(taskId: string, field: string) {
    super(
      `task ${pyRepr(taskId)} exists with a different ${field}; an id names one task, ` +
        "enqueue it again only with the same payload and options",
    );
    this.taskId = taskId;
    this.field = field;
  }
}

/**
 * A call that uses flows, groups, claim pauses or spend budgets was refused, nothing
 * stored: `pod`, a live worker of an older release (level 1, taskfleet 0.1.x), serves the
 * queue and would mishandle them without an error (docs/compatibility.md). `feature` names
 * what was refused (`flows`, `groups`, `flows and groups`, `claim pauses`, `spend budgets`).
 */
export class OlderWorker extends TaskfleetError {
  readonly queue: string;
  readonly pod: string;
  readonly feature: string;

  constructor(queue: string, pod: string, feature: string) {
    super(
      `worker ${pyRepr(pod)} serves queue ${pyRepr(queue)} at level 1 (taskfleet 0.1.x): ` +
        `${feature} need every worker of the queue at 0.2; upgrade the queue's workers first (docs/upgrade.md)`,
    );
    this.queue = queue;
    this.pod = pod;
    this.feature = feature;
  }
}

/** The error a script's `[-6, pod, feature]` reply stands for, else null. */
export function olderWorker(queue: string, reply: readonly unknown[]): OlderWorker | null {
  if (reply.length !== 3 || Number(reply[0]) !== -6) return null;
  return new OlderWorker(queue, String(reply[1]), String(reply[2]));
}

/**
 * A write the master applied that fewer replicas confirmed than asked (`WAIT` timed out,
 * `?wait_replicas=N`): it is stored, but a failover now could still lose it. Enqueueing
 * the same ids again is safe and waits for the replicas again.
 */
export class NotReplicated extends TaskfleetError {
  readonly acked: number;
  readonly wanted: number;
  readonly timeoutMs: number;
  readonly taskIds: string[];

  constructor(acked: number, wanted: number, timeoutMs: number, taskIds: string[]) {
    super(
      `the write is on the master but ${acked} of ${wanted} replicas confirmed it ` +
        `within ${timeoutMs} ms`,
    );
    this.acked = acked;
    this.wanted = wanted;
    this.timeoutMs = timeoutMs;
    this.taskIds = taskIds;
  }
}

/** No schedule of that name in the queue's store. */
export class ScheduleNotFound extends TaskfleetError {
  readonly scheduleName: string;

  constructor(name: string) {
    super(`no schedule named ${pyRepr(name)} in this queue`);
    this.scheduleName = name;
  }
}

/** The schedule belongs to a TaskQueue's spec: only its owner changes it. */
export class ScheduleOwned extends TaskfleetError {
  readonly scheduleName: string;
  readonly owner: string;

  constructor(name: string, owner: string) {
    const where = owner === "taskqueue" ? "its TaskQueue's spec.schedules" : "the API / CLI";
    super(`schedule ${pyRepr(name)} is managed through ${where}; change it there`);
    this.scheduleName = name;
    this.owner = owner;
  }
}

/** No task has that id in the queue (never enqueued, or pruned after retention). */
export class TaskNotFound extends TaskfleetError {
  readonly queue: string;
  readonly taskId: string;

  constructor(queue: string, taskId: string) {
    super(`task ${pyRepr(taskId)} not found in queue ${pyRepr(queue)}`);
    this.queue = queue;
    this.taskId = taskId;
  }
}

/**
 * A dependency would close a cycle: the tasks in it would wait for each other for ever.
 * Refused whole, nothing stored: a child (`addChildren`) that is the parent itself, or a
 * task that waits for the parent, directly or through others, or that waits for one.
 */
export class DependencyCycle extends InvalidArgument {
  readonly taskId: string;
  readonly parent: string;

  constructor(taskId: string, parent: string) {
    super(
      `task ${pyRepr(taskId)} would close a dependency cycle through ${pyRepr(parent)} ` +
        "(it waits for it, directly or through others): give it no such after",
    );
    this.taskId = taskId;
    this.parent = parent;
  }

  /** An item of one enqueue (a flow) waiting for a later item of the same call. */
  static later(taskId: string, dep: string): DependencyCycle {
    const err = new DependencyCycle(taskId, dep);
    err.message = `task ${pyRepr(taskId)} waits for ${pyRepr(dep)}, a later task of the same call: a task waits only for earlier ones (no cycle can be stored); put it first`;
    return err;
  }
}

/** A walk over a flow met more tasks than its bound (`MAX_FLOW_TASKS` of flowcontrol). */
export class FlowTooLarge extends TaskfleetError {
  readonly taskId: string;
  readonly bound: number;

  constructor(taskId: string, bound: number) {
    super(
      `the flow of task ${pyRepr(taskId)} has more than ${bound} tasks: nothing was changed; ` +
        "cancel or retry it by branch (--branch) or by task",
    );
    this.taskId = taskId;
    this.bound = bound;
  }
}

/**
 * The claim token no longer matches: the task was taken back (and maybe claimed again).
 * The write was refused; the run must give the task up (another worker owns it now).
 */
export class StaleToken extends TaskfleetError {
  readonly taskId: string;

  constructor(taskId: string) {
    super(`task ${taskId}: claim token is stale; the task was taken back`);
    this.taskId = taskId;
  }
}

/** A string quoted for a message, as Python's `repr` would for plain text. */
export function pyRepr(value: string): string {
  return value.includes("'") && !value.includes('"')
    ? `"${value}"`
    : `'${value.replaceAll("'", "\\'")}'`;
}

/** Any value for a message: a string quoted, a number as is, anything else by its kind. */
export function describe(value: unknown): string {
  if (typeof value === "string")
    return pyRepr(value.length > 100 ? `${value.slice(0, 100)}...` : value);
  if (typeof value === "number" || typeof value === "boolean" || typeof value === "bigint")
    return String(value);
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  return typeof value === "object"
    ? Object.prototype.toString.call(value).slice(8, -1)
    : typeof value;
}
