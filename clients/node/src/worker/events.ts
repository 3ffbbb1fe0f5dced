/**
 * A worker's own events (`worker.on("completed", ...)`): what happened to each task this
 * worker ran, as it happened, in this process. The queue-wide record, which every process
 * can read, is the queue's event stream, not this.
 *
 * Each is emitted once per run it is about: `active` when the run starts, `progress` on
 * each `task.progress(...)`, then one of `completed`, `failed`, `cancelled`, `deferred` or
 * `waiting-children` (the run returned; children it added are still out)
 * once the worker's write of the outcome was accepted. A run whose outcome is not written
 * by this worker (its lease was lost, or it was handed back at the drain deadline) ends
 * with no outcome event here: another run of the task has its own. `drained` comes once,
 * when a drain has ended (just before `run()` resolves); `error` when a run's outcome
 * could not be written and the worker gives its tasks back (`worker_failed`).
 *
 * A listener runs on the worker's event loop, synchronously with the worker: a slow one
 * slows the worker. A listener that throws (or returns a promise that rejects) is logged
 * once per throw (`listener_failed`) and otherwise ignored: the other listeners still run,
 * and the task's outcome, already written, is not changed.
 *
 * A worker with no listener pays one property read per run and event site.
 *
 * @module
 */

import type { Progress, TaskContext } from "./context.js";
import { formatError } from "./failures.js";
import { logEvent } from "./log.js";

/** How a failed run ended: `dead` when the task will not run again, else it is retried. */
export interface FailedHow {
  readonly dead: boolean;
}

/** The events of a `Worker<Payload, Result>` and what each listener gets. */
export interface WorkerEvents<Payload = Record<string, unknown>, Result = unknown> {
  /** A run of a task started (its handler is called now, or once a rate limit's hold ends). */
  active: [task: TaskContext<Payload, Result>];
  /** The run reported progress (`task.progress`), as stored. */
  progress: [task: TaskContext<Payload, Result>, progress: Progress];
  /** The task is done: its handler returned `result`, and the worker stored it. */
  completed: [task: TaskContext<Payload, Result>, result: Result];
  /** The attempt failed (`error`: the error's text as stored); `how.dead`: no retry is left. */
  failed: [task: TaskContext<Payload, Result>, error: string, how: FailedHow];
  /** The task was cancelled while it ran, and ended cancelled. */
  cancelled: [task: TaskContext<Payload, Result>];
  /**
   * The handler returned `result` but children it added (`task.addChildren`) are still out:
   * the task waits for them. Its end is not this worker's to see: done once they are, or
   * dead (or cancelled) by its policy if one fails; the queue's event stream says which.
   * So `completed` never comes for a task that may yet end dead.
   */
  "waiting-children": [task: TaskContext<Payload, Result>, result: Result];
  /** The handler asked to run again later (`RetryAfter`, `RateLimited`): the attempt was given back. */
  deferred: [task: TaskContext<Payload, Result>, error: string];
  /** The worker's drain ended: every run finished or was handed back; `run()` resolves next. */
  drained: [];
  /** The worker failed (a bug, not an outage): it gives its tasks back and `run()` resolves to 1. */
  error: [error: unknown];
}

type AnyListener = (...args: never[]) => unknown;

/** The listeners of one worker, by event; each called in turn, each one's failure contained. */
export class Listeners {
  /** How many listeners there are, of every event: the worker's one check when it has none. */
  count = 0;
  private readonly byEvent = new Map<string, { fn: AnyListener; once: boolean }[]>();

  add(event: string, fn: AnyListener, once: boolean): void {
    if (typeof fn !== "function")
      throw new TypeError(`a listener of ${JSON.stringify(event)} must be a function`);
    const list = this.byEvent.get(event);
    // a new array: an emit under way calls the listeners it began with
    this.byEvent.set(event, [...(list ?? []), { fn, once }]);
    this.count += 1;
  }

  remove(event: string, fn: AnyListener): void {
    const list = this.byEvent.get(event);
    if (list === undefined) return;
    const at = list.findIndex((entry) => entry.fn === fn);
    if (at < 0) return;
    this.byEvent.set(event, [...list.slice(0, at), ...list.slice(at + 1)]);
    this.count -= 1;
  }

  /** How many listeners `event` has. */
  listenerCount(event: string): number {
    return this.byEvent.get(event)?.length ?? 0;
  }

  /** Call `event`'s listeners with `args`; none throws out of here. */
  emit(event: string, ...args: unknown[]): void {
    const list = this.byEvent.get(event);
    if (list === undefined || list.length === 0) return;
    for (const entry of list) {
      if (entry.once) this.remove(event, entry.fn);
      try {
        const returned = (entry.fn as (...a: unknown[]) => unknown)(...args);
        if (isThenable(returned)) {
          returned.then(undefined, (error: unknown) => {
            failed(event, error);
          });
        }
      } catch (error) {
        failed(event, error);
      }
    }
  }
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    (typeof value === "object" || typeof value === "function") &&
    value !== null &&
    typeof (value as { then?: unknown }).then === "function"
  );
}

function failed(event: string, error: unknown): void {
  logEvent("warning", "listener_failed", { of: event, error: formatError(error) });
}
