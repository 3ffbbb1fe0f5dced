/**
 * What a running handler can know and say about its task: the `TaskContext` it gets as
 * its second argument, also `currentTask()` anywhere in the run's async calls.
 *
 * - `progress(...)`: stored on the task (`Queue.get`), the latest of each run written at
 *   most every half second, every run's in one call;
 * - `reportCost(n)`: the task's real cost (an LLM call's tokens), settled against the
 *   queue's cost rate limit by the same write;
 * - `signal`: an `AbortSignal` aborted when the run should stop: the task was cancelled
 *   (`Queue.cancel`), its timeout passed, its lease was lost, or the drain deadline came;
 *   `signal.reason` says which (an `Error` named `CancelledError`, `TimeoutError`,
 *   `LeaseLost`, `Drained`). `cancelled` is true once the task was cancelled.
 *
 * Each write is fenced by the run's claim token: a run whose task was taken back writes
 * nothing.
 *
 * @module
 */

import { AsyncLocalStorage } from "node:async_hooks";

import { MAX_CHECKPOINT_BYTES, MAX_COST, MAX_DELAY_S, MIN_COST } from "../bounds.js";
import { numberProblem } from "../numbers.js";
import { checkOptionKeys } from "../options.js";
import { type EnqueueItem, type TaskRecord, batchRecords } from "../encoding.js";
import { amountsJson, checkQuotaName } from "../providerquota.js";
import { PROVIDER_PAUSE_MS } from "./failures.js";

/** A progress message longer than this is cut. */
export const MAX_MESSAGE_CHARS = 500;

/** Where a run's reports go: `(taskId, token, progress JSON | null, cost | null)`. */
export type ReportSink = (
  taskId: string,
  token: string,
  progress: string | null,
  cost: number | null,
) => void;

/** The worker's line for a run's provider quota calls (docs/quotas.md). */
export interface ProviderQuotaLine {
  settle(taskId: string, token: string, quota: string, used: string): Promise<void>;
  pause(quota: string, pauseMs: number, reason: string): Promise<void>;
}

/** The worker's line for a run's flow calls: children it adds, results it was handed. */
export interface FlowLine {
  addChildren(parent: string, token: string, batch: readonly TaskRecord[]): Promise<void>;
  /** `after`: the task's list as its claim record carried it ("": none; null: not known). */
  dependencyResults(taskId: string, after: string | null): Promise<Record<string, unknown>>;
  /** Store a run's checkpoint (JSON text); `StaleToken` when the run lost the task. */
  checkpoint?(taskId: string, token: string, state: string, keep: boolean): Promise<void>;
  /** Append a chunk to a run's output; its entry id. `StaleToken` when the run lost the task. */
  emit?(taskId: string, token: string, kind: string, data: string): Promise<string>;
}

/**
 * `reportQuota`: a remaining quota at or below this pauses claims until the reset (0: the
 * request that spent the last unit may run; the next one would meet a 429).
 */
export const QUOTA_LOW = 0;

/** Where a run's quota reports go: `(taskId, token, pause ms | null = adaptive, group only, reason)`. */
export type QuotaSink = (
  taskId: string,
  token: string,
  pauseMs: number | null,
  group: boolean,
  reason: string,
) => void;

const QUOTA_REPORT_KEYS: ReadonlySet<string> = new Set([
  "remaining",
  "resetAfterMs",
  "resetAt",
  "scope",
]);

/** What `reportQuota` takes: the provider's remaining quota and when it resets. */
export interface QuotaReport {
  readonly remaining: number;
  /** Milliseconds from now. */
  readonly resetAfterMs?: number;
  /** When, as a Date (for a header's epoch seconds: `new Date(s * 1000)`). */
  readonly resetAt?: Date;
  /** "group": only this task's group pauses (the queue if it has none). */
  readonly scope?: "queue" | "group";
}

const CHECKPOINT_KEYS: ReadonlySet<string> = new Set(["keep"]);

/** The stored form of a checkpoint state: JSON text; a clear error when not JSON or too large. */
export function checkpointText(state: unknown): string {
  let text: unknown;
  try {
    text = JSON.stringify(state); // undefined (and a function) give undefined
  } catch (error) {
    throw new TypeError(`a checkpoint state must be JSON: ${String(error)}`);
  }
  if (typeof text !== "string")
    throw new TypeError("a checkpoint state must be JSON, not undefined");
  const size = Buffer.byteLength(text, "utf8");
  if (size > MAX_CHECKPOINT_BYTES)
    throw new RangeError(
      `checkpoint state of ${size} bytes exceeds MAX_CHECKPOINT_BYTES (${MAX_CHECKPOINT_BYTES}); store less, or a reference to it`,
    );
  return text;
}

/** A progress report: a fraction in [0, 1], or `done` of `total`, and/or a message. */
export interface Progress {
  readonly fraction?: number;
  readonly done?: number;
  readonly total?: number;
  readonly message?: string;
}

/** Why a run's signal was aborted (`signal.reason.name`). */
export type StopReason = "CancelledError" | "TimeoutError" | "LeaseLost" | "Drained";

/**
 * The task a handler runs, and its line to the worker. `Payload` and `Result` are its
 * `Worker`'s (they type `payload` and the worker's events).
 */
// eslint-disable-next-line @typescript-eslint/no-unused-vars -- Result types the events a worker emits for it
export class TaskContext<Payload = Record<string, unknown>, Result = unknown> {
  /** The queue's name. */
  readonly queue: string;
  /** The task's id. */
  readonly id: string;
  /** The task's payload, as its handler gets it. */
  readonly payload: Payload;
  /** Starts of the task, this one included (1 on the first run). */
  readonly attempt: number;
  /** The task's name (its handler); null for the default handler. */
  readonly name: string | null;
  /** The worker's name and incarnation. */
  readonly pod: string;
  readonly incarnation: string;
  /** The producer's trace context as stored (JSON of a carrier); null when it has none. */
  readonly trace: string | null;
  /** The task's group; null when it has none. */
  readonly group: string | null;
  // the JSON list of the tasks it waited for, from its claim record ("": none; null: not known)
  private readonly after: string | null;
  // the state an earlier attempt checkpointed, as stored (JSON text); null: none
  private readonly restoredJson: string | null;
  // Made on the first read of `signal` or the first stop: most runs never need one, and
  // an AbortController per task is a measurable part of a short task's cost.
  private controller: AbortController | null = null;
  private readonly token: string;
  private readonly sink: ReportSink;
  private readonly flows: FlowLine | null;
  private readonly quotaSink: QuotaSink | null;
  private readonly providerQuotas: ProviderQuotaLine | null;
  private wasCancelled = false;

  /** @internal */
  constructor(fields: {
    queue: string;
    id: string;
    payload?: Payload;
    attempt: number;
    name: string | null;
    pod: string;
    incarnation: string;
    trace: string | null;
    group?: string | null;
    after?: string | null;
    restored?: string | null;
    token: string;
    sink: ReportSink;
    flows?: FlowLine | null;
    quotaSink?: QuotaSink;
    providerQuotas?: ProviderQuotaLine | null;
  }) {
    this.queue = fields.queue;
    this.id = fields.id;
    this.payload = fields.payload as Payload;
    this.attempt = fields.attempt;
    this.name = fields.name;
    this.pod = fields.pod;
    this.incarnation = fields.incarnation;
    this.trace = fields.trace;
    this.group = fields.group ?? null;
    this.after = fields.after ?? null;
    this.restoredJson = fields.restored ?? null;
    this.token = fields.token;
    this.sink = fields.sink;
    this.flows = fields.flows ?? null;
    this.quotaSink = fields.quotaSink ?? null;
    this.providerQuotas = fields.providerQuotas ?? null;
  }

  /**
   * What the provider call really used of provider quota `quota`
   * (`settle("openai", { input_tokens: 3412, output_tokens: 655 })`): the difference from
   * the estimate its enqueue reserved (or this run's last settlement) is given back or
   * charged; use above the limit is debt the next claims wait out. `StaleToken` when this
   * run no longer holds the task.
   */
  async settle(quota: string, used: Readonly<Record<string, number>>): Promise<void> {
    checkQuotaName(quota);
    const text = amountsJson(used, "settle", false);
    if (this.providerQuotas === null) throw new Error("settle needs a task run by a worker");
    await this.providerQuotas.settle(this.id, this.token, quota, text);
  }

  /** Aborted when the run should stop (see the module's doc). */
  get signal(): AbortSignal {
    this.controller ??= new AbortController();
    return this.controller.signal;
  }

  /** True once the task was cancelled (`Queue.cancel`): stop soon; it ends cancelled whatever the run returns. */
  get cancelled(): boolean {
    return this.wasCancelled;
  }

  /**
   * Report how far the task is: `progress(0.5)`, `progress(0.5, "half")`, or
   * `progress({ done: 3, total: 10, message })` (the fraction is then computed). Stored
   * on the task within about half a second; only the latest of a burst is written.
   */
  progress(progress: number | Progress, message?: string): void {
    const given: Progress =
      typeof progress === "number"
        ? { fraction: progress, message }
        : { ...progress, message: progress.message ?? message };
    this.sink(this.id, this.token, progressJson(given), null);
  }

  /**
   * The task's real cost in the queue's cost units (what `cost` at enqueue estimated): the
   * difference goes back into the cost rate limit's bucket, or is taken from it. The last
   * report of a run counts.
   */
  reportCost(cost: number): void {
    if (typeof cost !== "number" || !Number.isInteger(cost))
      throw new TypeError(`reportCost needs an integer, not ${String(cost)}`);
    if (cost < MIN_COST || cost > MAX_COST)
      throw new RangeError(`cost must be ${MIN_COST}..${MAX_COST}, not ${cost}`);
    this.sink(this.id, this.token, null, cost);
  }

  /**
   * The state the last `checkpoint` of an earlier attempt stored (parsed JSON); null on the
   * task's first attempt, or when no attempt checkpointed.
   */
  get restored(): unknown {
    return this.restoredJson === null ? null : (JSON.parse(this.restoredJson) as unknown);
  }

  /**
   * Store `state` (JSON, at most `MAX_CHECKPOINT_BYTES` as text) for the task's next
   * attempt, which reads it as `restored`: one fenced round trip, stored when the promise
   * resolves. `StaleToken`: this run no longer holds the task (its lease was taken back).
   * Dropped when the task finishes, unless `keep`: then it stays with the task.
   */
  async checkpoint(state: unknown, options: { keep?: boolean } = {}): Promise<void> {
    checkOptionKeys(options, CHECKPOINT_KEYS, "checkpoint");
    const text = checkpointText(state);
    if (this.flows?.checkpoint === undefined)
      throw new Error("checkpoint needs a task run by a worker");
    await this.flows.checkpoint(this.id, this.token, text, options.keep === true);
  }

  /**
   * Append `chunk` (a string, or any JSON value) to the task's output stream, marked with
   * this attempt: readers of `Queue.stream(id)` get it at once, in order. One round trip;
   * resolves to its entry id. `StaleToken`: this run no longer holds the task;
   * `OutputFull` past `MAX_OUTPUT_ENTRIES` chunks or `MAX_OUTPUT_BYTES` bytes.
   */
  async emit(chunk: unknown): Promise<string> {
    let kind = "t";
    let data: unknown = chunk;
    if (typeof chunk !== "string") {
      kind = "j";
      data = JSON.stringify(chunk);
      if (typeof data !== "string")
        throw new TypeError("an output chunk is a string or JSON, not undefined");
    }
    if (this.flows?.emit === undefined) throw new Error("emit needs a task run by a worker");
    return this.flows.emit(this.id, this.token, kind, data as string);
  }

  /**
   * Add tasks this task waits for, its children (one per page found), in one atomic call;
   * resolves to their ids. Each item is an `enqueueMany` item, checked as there. When the
   * handler returns, the task is `waiting` until every child is done, then done with the
   * result it returned; a child that ends dead or cancelled applies the task's
   * `onDepFail` (default: it ends dead). Give children ids of your own (`taskId`) so that
   * a run started again after a lost worker adds the same ones. `StaleToken`: this run no
   * longer holds the task. See docs/flows.md.
   */
  async addChildren(items: Iterable<EnqueueItem>): Promise<string[]> {
    const batch = batchRecords(items);
    if (batch.length === 0) return [];
    if (this.flows === null) throw new Error("addChildren needs a task run by a worker");
    await this.flows.addChildren(this.id, this.token, batch);
    return batch.map((r) => r.task_id);
  }

  /**
   * The results of the tasks this one waited for (`after`, or children it added), by
   * their id, in that order: handed to it as each completed, read in one round trip (its
   * claim record named them; no polling). Bounded by the queue's `max_payload_bytes` together: a result past it was
   * not handed and its id is absent. Empty for a task that waited for nothing.
   */
  async dependencyResults(): Promise<Record<string, unknown>> {
    if (this.flows === null) throw new Error("dependencyResults needs a task run by a worker");
    return this.flows.dependencyResults(this.id, this.after);
  }

  /**
   * The provider's remaining quota (as its reply headers say) and when it resets
   * (`resetAfterMs` milliseconds, or `resetAt`). At `QUOTA_LOW` (0) or below, every worker of the
   * queue stops claiming until the reset (`scope: "group"`: only this task's group), as
   * `RateLimited` would, but the task goes on: its call succeeded. Without a reset time
   * the pause is the adaptive one. Above the threshold nothing is sent.
   */
  reportQuota(quota: QuotaReport): void;
  /**
   * A provider quota's remaining units and reset, from the provider's headers
   * (`reportQuota("openai", { remaining: 0, resetAfterMs: 12_500 })`): at `QUOTA_LOW` or
   * below, that quota pauses until the reset (`PROVIDER_PAUSE_MS` without one), for every
   * queue and language. Resolves once the pause is written.
   */
  reportQuota(name: string, quota: QuotaReport): Promise<void>;
  reportQuota(first: QuotaReport | string, second?: QuotaReport): void | Promise<void> {
    if (typeof first === "string") return this.reportProviderQuota(first, second);
    const quota = first;
    checkOptionKeys(quota, QUOTA_REPORT_KEYS, "reportQuota");
    const { remaining, resetAfterMs, resetAt } = quota;
    const scope: string = quota.scope ?? "queue"; // a JavaScript caller may pass anything
    if (typeof remaining !== "number" || !Number.isFinite(remaining))
      throw new TypeError(
        `reportQuota needs remaining as a finite number, not ${String(remaining)}`,
      );
    if (scope !== "queue" && scope !== "group")
      throw new RangeError(`scope must be "queue" or "group", not ${scope}`);
    const pauseMs = quotaPauseMs(resetAfterMs, resetAt, Date.now() / 1000);
    if (remaining > QUOTA_LOW) return;
    if (this.quotaSink === null)
      throw new Error(
        "reportQuota is not available outside a worker's task: throw RateLimited instead",
      );
    this.quotaSink(
      this.id,
      this.token,
      pauseMs,
      scope === "group",
      `provider quota spent (remaining ${remaining})`,
    );
  }

  private async reportProviderQuota(name: string, quota: QuotaReport | undefined): Promise<void> {
    checkQuotaName(name);
    if (quota === undefined) throw new TypeError("reportQuota needs { remaining, ... }");
    checkOptionKeys(quota, QUOTA_REPORT_KEYS, "reportQuota");
    const { remaining, resetAfterMs, resetAt } = quota;
    if (typeof remaining !== "number" || !Number.isFinite(remaining))
      throw new TypeError(
        `reportQuota needs remaining as a finite number, not ${String(remaining)}`,
      );
    const pauseMs = quotaPauseMs(resetAfterMs, resetAt, Date.now() / 1000);
    if (remaining > QUOTA_LOW) return;
    if (this.providerQuotas === null) throw new Error("reportQuota needs a task run by a worker");
    await this.providerQuotas.pause(
      name,
      pauseMs ?? PROVIDER_PAUSE_MS,
      `provider quota spent (remaining ${remaining})`,
    );
  }

  /** @internal The worker stops the run: abort its signal with a reason named `reason`. */
  stop(reason: StopReason, message: string): void {
    if (reason === "CancelledError") this.wasCancelled = true;
    const controller = (this.controller ??= new AbortController());
    if (controller.signal.aborted) return;
    const error = new Error(message);
    error.name = reason;
    controller.abort(error);
  }
}

/**
 * The stored form of a progress report: `{"done","total","fraction","message"}` (absent
 * keys left out), as the Python worker writes it. Throws for values that are not that.
 */
export function progressJson(progress: Progress): string {
  const data: Record<string, unknown> = {};
  let fraction = progress.fraction;
  const { done, total } = progress;
  if (done !== undefined || total !== undefined) {
    for (const [name, value] of [
      ["done", done],
      ["total", total],
    ] as const) {
      if (typeof value !== "number" || !Number.isInteger(value) || value < 0) {
        throw new RangeError(`progress ${name} must be an integer >= 0, not ${String(value)}`);
      }
      const problem = numberProblem(value, `progress.${name}`);
      if (problem !== undefined) throw new RangeError(problem);
    }
    data.done = done;
    data.total = total;
    if (fraction === undefined && (total ?? 0) > 0)
      fraction = Math.min(1, (done ?? 0) / (total ?? 1));
  }
  if (fraction !== undefined) {
    if (typeof fraction !== "number")
      throw new TypeError(`progress fraction must be a number, not ${typeof fraction}`);
    if (!(Number.isFinite(fraction) && fraction >= 0 && fraction <= 1)) {
      throw new RangeError(`progress fraction must be within [0, 1], not ${fraction}`);
    }
    data.fraction = Math.round(fraction * 1e6) / 1e6;
  }
  if (progress.message !== undefined) data.message = progress.message.slice(0, MAX_MESSAGE_CHARS);
  if (Object.keys(data).length === 0)
    throw new RangeError("progress needs a fraction, done and total, or a message");
  return JSON.stringify(data);
}

/** How long a reported quota's pause lasts: until its reset (null: not given). */
export function quotaPauseMs(
  resetAfterMs: number | undefined,
  resetAt: Date | undefined,
  nowS: number,
): number | null {
  if (resetAfterMs !== undefined && resetAt !== undefined)
    throw new RangeError("give resetAfterMs or resetAt, not both");
  let seconds: number;
  if (resetAt !== undefined) {
    const given: unknown = resetAt; // a JavaScript caller may pass epoch seconds
    if (!(given instanceof Date) || !Number.isFinite(given.getTime())) {
      throw new TypeError(
        `resetAt must be a Date (for epoch seconds: new Date(s * 1000)), not ${String(given)}`,
      );
    }
    seconds = Math.max(0, given.getTime() / 1000 - nowS);
  } else if (resetAfterMs !== undefined) {
    if (typeof resetAfterMs !== "number")
      throw new TypeError(`resetAfterMs must be milliseconds, not ${typeof resetAfterMs}`);
    seconds = resetAfterMs / 1000;
  } else {
    return null;
  }
  if (!(seconds >= 0 && seconds <= MAX_DELAY_S))
    throw new RangeError(
      `the reset must be 0..${MAX_DELAY_S * 1000} ms from now, not ${String(seconds * 1000)} ms`,
    );
  return Math.trunc(seconds * 1000);
}

const current = new AsyncLocalStorage<TaskContext>();

/** The task the calling handler is running; throws outside a run. */
export function currentTask<Payload = Record<string, unknown>, Result = unknown>(): TaskContext<
  Payload,
  Result
> {
  const task = current.getStore();
  if (task === undefined) throw new Error("currentTask() is called outside a task's run");
  return task as TaskContext<Payload, Result>;
}

/** @internal Run `fn` with `task` as `currentTask()`. */
export function runWithTask<T>(task: TaskContext, fn: () => T): T {
  return current.run(task, fn);
}
