/**
 * `Queue`: one named queue in Redis, for producers. The calls and semantics of the Python
 * client's `Queue` (`producer/queue.py`): every state change is one script of the
 * protocol's bundle, reads are plain commands, pipelined.
 *
 * @module
 */

import { type Bundle, packagedBundle } from "./bundle.js";
import {
  type QueueConfig as QueueConfigS,
  checkConfig,
  configFields,
  parseConfig,
} from "./config.js";
import { type QueueConfig, configFromMs, configToMs, storedCheck } from "./configms.js";
import { CONFIG_FIELDS } from "./protocol/defaults.js";
import * as control from "./control.js";
import * as flowcontrol from "./flowcontrol.js";
import * as groups from "./groups.js";
import * as quotas from "./quotas.js";
import { type Client, Scripts, connect } from "./connection.js";
import {
  type EnqueueItem,
  type EnqueueOptions,
  type TaskRecord,
  batchRecords,
  ENQUEUE_OPTION_NAMES,
  encodeTask,
  tokenBase,
  traceText,
} from "./encoding.js";
import {
  InvalidArgument,
  InvalidPayload,
  NotReplicated,
  OlderWorker,
  ProtocolError,
  ScheduleNotFound,
  ScheduleOwned,
  TaskNotFound,
  WaitTimeout,
} from "./errors.js";
import { type FlowIds, type FlowPart, type FlowRecord, buildFlow, flowRecord } from "./flows.js";
import type { AnyPayload, JsonCompatible } from "./json.js";
import { QueueKeys } from "./keys.js";
import {
  purge,
  queueStored,
  readConfig,
  readFlow,
  readSchedule,
  readSchedules,
  readStats,
  readTask,
  readWorkers,
  writeConfig,
  writeEventsCap,
} from "./protocol/reads.js";
import { type QueueEvent, events as eventStream } from "./events.js";
import { decodeEnqueue, replyList } from "./protocol/replies.js";
import type { EnqueuePlainRecord } from "./protocol/signatures.js";
import { queueMs } from "./protocol/store.js";
import { checkOptionKeys } from "./options.js";
import { parseRedisURL } from "./redisurl.js";
import {
  OWNER_API,
  type Schedule,
  type ScheduleOptions,
  dueMs,
  firstSlot,
  scheduleDef,
  scheduleFromHash,
  validateScheduleName,
} from "./schedules.js";
import { type OutputChunk, rangeOutput, readOutput, taskState } from "./protocol/output.js";
import {
  FOLLOW_TTL_MS,
  followBlock,
  followJoin,
  followRefresh,
  progressMarks,
} from "./protocol/follow.js";
import { COUNTERS, FINISHED, type Task, type TaskState, storedInt, taskFromHash } from "./tasks.js";
import * as tracing from "./tracing.js";
import { Blockers, wait } from "./waiting.js";
import { type WorkerInfo, workerInfo } from "./workers.js";

const STREAM_KEYS: ReadonlySet<string> = new Set(["since", "blockMs"]);
const FOLLOW_KEYS: ReadonlySet<string> = new Set(["intervalMs", "timeoutMs"]);

/** Housekeeping bound of the claims an enqueue makes for idle workers it hands tasks to. */
export const CLAIM_HOUSEKEEPING_BOUND = 100;

// The keys each options object takes: any other is refused (options.ts), never ignored.
const QUEUE_OPTIONS = new Set(["redisUrl"]);
const ENQUEUE_CALL_OPTIONS = new Set([...ENQUEUE_OPTION_NAMES, "traceContext"]);
const TRACE_ONLY = new Set(["traceContext"]);
const FILTER = ["reason", "olderThanMs", "newerThanMs"];
const RETRY_OPTIONS = new Set([...FILTER, "taskIds", "maxAttempts", "group"]);
const LIST_OPTIONS = new Set([...FILTER, "limit", "cursor", "group"]);
const PURGE_OPTIONS = new Set([...FILTER, "taskIds"]);
const FLOW_CONTROL_OPTIONS = new Set(["branch"]);
const WAIT_OPTIONS = new Set(["timeoutMs"]);
const PAUSE_OPTIONS = new Set(["forMs", "reason", "group"]);
const BUDGET_OPTIONS = new Set(["day", "month", "group"]);

/** The longest `close()` waits for Redis to answer QUIT. */
export const CLOSE_BOUND_MS = 1000;

/** How to reach the queue's Redis. */
export interface QueueOptions {
  /**
   * A server (`redis://[user:password@]host[:port][/db]`, `rediss://...`, `unix:///path`),
   * or with `?cluster=true` any node of a Redis Cluster; `?wait_replicas=N` makes each
   * enqueue wait for N replicas. Default `redis://localhost:6379/0`.
   */
  readonly redisUrl?: string;
}

/** Options of one enqueue call. */
export interface EnqueueCallOptions<Name extends string = string> extends EnqueueOptions<Name> {
  /**
   * The producer's trace context (W3C `traceparent` and `tracestate`, as
   * OpenTelemetry's `propagation.inject` fills a carrier): stored with the task, so the
   * worker's span is a child of the producer's.
   */
  readonly traceContext?: Readonly<Record<string, string>>;
}

/** What `enqueueResult` did: `created` is false when the same task (same id, payload and options) existed. */
export interface EnqueueResult {
  readonly taskId: string;
  readonly created: boolean;
}

/** Sizes of every state, live workers, and the queue's counters. */
export type Stats = Record<
  "pending" | "delayed" | "running" | "done" | "dead" | "cancelled" | "waiting" | "workers",
  number
> &
  Record<(typeof COUNTERS)[number], number>;

/**
 * One named queue in Redis.
 *
 * ```ts
 * const q = new Queue("emails", { redisUrl: "redis://localhost:6379/0" });
 * const id = await q.enqueue({ to: "a@example.com" }, { priority: 5, delayMs: 60_000 });
 * const done = await q.wait([id], { timeoutMs: 30_000 });
 * await q.close();
 * ```
 *
 * Connections open on first use. Close the queue with `close()`, which always resolves.
 *
 * Typed, `Queue<Payload, Result, Name>` takes payloads of type `Payload` (an interface,
 * or a class with JSON fields: `JsonCompatible`), reads results as `Result`, and takes
 * task names among `Name`. Untyped, a payload is any object, checked at run time.
 */
export class Queue<Payload = AnyPayload, Result = unknown, Name extends string = string> {
  /** The queue's name. */
  readonly name: string;
  /** Its key names. */
  readonly keys: QueueKeys;
  /** The Redis client (one server or a cluster). */
  readonly client: Client;
  private readonly bundle: Bundle;
  private readonly scripts: Scripts;
  private readonly blockers: Blockers;
  private readonly replicas: number;
  private readonly waitTimeoutMs: number;
  private readonly commandTimeoutMs: number | undefined;

  /** A queue named `name` (1-200 letters, digits, `.`, `_`, `-`); `InvalidArgument` / `InvalidRedisURL` say what is wrong. */
  constructor(name: string, options: QueueOptions = {}) {
    checkOptionKeys(options, QUEUE_OPTIONS, "Queue options");
    this.bundle = packagedBundle();
    this.keys = new QueueKeys(name, this.bundle);
    this.name = name;
    const url = parseRedisURL(options.redisUrl ?? "redis://localhost:6379/0");
    this.client = connect(url);
    this.replicas = url.waitReplicas;
    this.waitTimeoutMs = url.waitTimeoutMs;
    this.commandTimeoutMs = url.redis.commandTimeout;
    this.scripts = new Scripts(this.client, this.bundle);
    this.blockers = new Blockers(this.client);
  }

  /**
   * Close every connection of the queue. Always resolves, within about a second: a
   * connected client says QUIT (bounded), any other is dropped at once.
   */
  async close(): Promise<void> {
    this.blockers.close();
    if (this.client.status === "ready") {
      let timer: NodeJS.Timeout | undefined;
      const bound = new Promise<void>((resolve) => (timer = setTimeout(resolve, CLOSE_BOUND_MS)));
      await Promise.race([this.client.quit().catch(() => undefined), bound]);
      clearTimeout(timer);
    }
    this.client.disconnect();
  }

  /** `Queue("name")`, never the URL (it may hold a password). */
  toString(): string {
    return `Queue(${JSON.stringify(this.name)})`;
  }

  private get control(): control.Control {
    return { client: this.client, scripts: this.scripts, bundle: this.bundle, keys: this.keys };
  }

  // -- producing ------------------------------------------------------------------------

  /**
   * Add a task; resolves to its id. Options (durations in milliseconds): `priority`,
   * `delayMs`, `deadline` (a `Date`) or `deadlineMs` (from now), `maxAttempts`, `taskId`,
   * `cost`, `timeoutMs`, `name` (the handler), `traceContext`. Throws `InvalidPayload` /
   * `InvalidArgument` before anything is sent, `TaskExists` when `taskId` names a task
   * with another payload or options, `NotReplicated` when `?wait_replicas` timed out.
   */
  async enqueue(
    payload: JsonCompatible<Payload>,
    options: EnqueueCallOptions<Name> = {},
  ): Promise<string> {
    return (await this.enqueueResult(payload, options)).taskId;
  }

  /** `enqueue`, resolving to the id and whether this call created the task. */
  async enqueueResult(
    payload: JsonCompatible<Payload>,
    options: EnqueueCallOptions<Name> = {},
  ): Promise<EnqueueResult> {
    checkOptionKeys(options, ENQUEUE_CALL_OPTIONS, "enqueue options");
    const { traceContext, ...taskOptions } = options;
    const record = encodeTask(payload, taskOptions);
    const [created = false] = await this.enqueueRecords([record], traceText(traceContext));
    return { taskId: record.task_id, created };
  }

  /**
   * Add many tasks atomically in one round trip; resolves to their ids in order. If any
   * item is invalid, names an id twice, or names an existing task with another payload
   * or options (`TaskExists`), nothing is stored.
   */
  async enqueueMany(
    items: Iterable<EnqueueItem<Payload, Name>>,
    options: { readonly traceContext?: Readonly<Record<string, string>> } = {},
  ): Promise<string[]> {
    checkOptionKeys(options, TRACE_ONLY, "enqueueMany options");
    const batch = batchRecords(items);
    if (batch.length === 0) return [];
    await this.enqueueRecords(batch, traceText(options.traceContext));
    return batch.map((r) => r.task_id);
  }

  /**
   * Store a flow (`chain`, `group`, `chord`, nested) in one atomic call: every task or
   * none. Resolves to its ids: every task's in the order the flow names them, and those
   * of the tasks that end it. Its tasks are one flow, named by its first task's id
   * (`Task.flow`, `Queue.flow`). A flow with no task is refused (`InvalidArgument`), and
   * each task is checked as `enqueueMany`'s items are (docs/flows.md).
   */
  async enqueueFlow(
    flow: FlowPart,
    options: { readonly traceContext?: Readonly<Record<string, string>> } = {},
  ): Promise<FlowIds> {
    checkOptionKeys(options, TRACE_ONLY, "enqueueFlow options");
    const { items, last } = buildFlow(flow);
    const batch = batchRecords(items);
    await this.enqueueRecords(batch, traceText(options.traceContext), batch[0]?.task_id ?? "");
    return { ids: batch.map((r) => r.task_id), last };
  }

  /**
   * Tasks the running task `parent` (claimed under `token`) waits for, its children, in
   * one atomic call; resolves to their ids. It is done only once they all are. A Node
   * handler calls `task.addChildren(items)`; this is the call for a run held elsewhere.
   * `StaleToken` when that run no longer holds the task (nothing stored).
   */
  async addChildren(
    parent: string,
    token: string,
    items: Iterable<EnqueueItem<Payload, Name>>,
  ): Promise<string[]> {
    const batch = batchRecords(items);
    if (batch.length === 0) return [];
    const argv = this.bundle.pack(
      "enqueue",
      { token_base: "", trace: "", parent, parent_token: token },
      batch.map((r) => ({ ...r })),
    );
    decodeEnqueue(
      await this.scripts.run("enqueue", this.keys, argv),
      batch,
      this.keys.queue,
      parent,
    );
    return batch.map((r) => r.task_id);
  }

  /**
   * Store `batch`; inside a `send <queue>` span whose context is stored with each task when
   * a tracer provider is registered and the caller gave no `traceContext` (tracing.ts).
   */
  private async enqueueRecords(
    batch: readonly TaskRecord[],
    trace: string,
    flow = "",
  ): Promise<boolean[]> {
    if (trace !== "") return this.sendRecords(batch, trace, flow);
    let traced = tracing.configured();
    if (typeof traced !== "boolean") traced = await traced;
    if (!traced) return this.sendRecords(batch, trace, flow);
    return tracing.enqueueSpan(
      this.name,
      batch.map((r) => r.task_id),
      (carrier) => this.sendRecords(batch, carrier, flow),
    );
  }

  private async sendRecords(
    batch: readonly TaskRecord[],
    trace: string,
    flow: string,
  ): Promise<boolean[]> {
    const full = (): readonly (string | Buffer)[] =>
      this.bundle.pack(
        "enqueue",
        { token_base: tokenBase(), bound: CLAIM_HOUSEKEEPING_BOUND, trace, flow },
        batch,
      );
    // plain tasks go to enqueue_plain, given only the keys they touch; it answers [0], having
    // stored nothing, when an idle worker waits for a hand-off, which enqueue alone makes
    const plain = flow === "" && batch.every(isPlain);
    const send = async (
      script: string,
      argv: readonly (string | Buffer)[],
    ): Promise<[unknown, number]> =>
      this.replicas > 0
        ? await this.scripts.runAndWait(script, this.keys, argv, this.replicas, this.waitTimeoutMs)
        : [await this.scripts.run(script, this.keys, argv), this.replicas];
    let [raw, acked] = plain
      ? await send(
          "enqueue_plain",
          this.bundle.pack("enqueue_plain", { hand_off: 1, trace }, batch.map(plainRecord)),
        )
      : await send("enqueue", full());
    if (plain && handOffLeft(raw)) [raw, acked] = await send("enqueue", full());
    const created = decodeEnqueue(raw, batch, this.keys.queue); // a refusal stored nothing: it says so, not NotReplicated
    if (acked < this.replicas) {
      throw new NotReplicated(
        acked,
        this.replicas,
        this.waitTimeoutMs,
        batch.map((r) => r.task_id),
      );
    }
    return created;
  }

  // -- reading --------------------------------------------------------------------------

  /** The task, or null when there is none (never stored, or pruned by retention). */
  async get(taskId: string): Promise<Task<Payload, Result> | null> {
    if (typeof taskId !== "string" || !taskId.isWellFormed()) {
      throw new InvalidArgument("task_id must be a string UTF-8 can encode");
    }
    const raw = await readTask(this, taskId);
    return Object.keys(raw).length > 0
      ? (taskFromHash(raw, taskId) as Task<Payload, Result>)
      : null;
  }

  /**
   * A flow's record (`Task.flow` names it): members open and finished by how, its
   * outcome once the last one ended; null when there is none (never a flow, or expired a
   * retention after it ended). One read.
   */
  async flow(flowId: string): Promise<FlowRecord | null> {
    if (typeof flowId !== "string" || !flowId.isWellFormed()) {
      throw new InvalidArgument("flow id must be a string UTF-8 can encode");
    }
    const reply = await readFlow(this, flowId);
    return flowRecord(flowId, reply);
  }

  /**
   * The task's output chunks in order, every attempt's: what exists after `since` (a
   * chunk's `id`; "0-0": from the first), then each new one as it is written (a blocking
   * read on a connection of its own, XREAD BLOCK: no polling), until the task finishes.
   * `blockMs`: the longest one read waits before it checks whether the task finished
   * without an end entry. Ends at once for a task that does not exist and has no output.
   *
   * ```ts
   * for await (const chunk of q.stream(id)) process.stdout.write(String(chunk.data));
   * ```
   */
  async *stream(
    taskId: string,
    options: { since?: string; blockMs?: number } = {},
  ): AsyncGenerator<OutputChunk, void, undefined> {
    checkOptionKeys(options, STREAM_KEYS, "stream");
    if (typeof taskId !== "string" || !taskId.isWellFormed())
      throw new InvalidArgument("task_id must be a string UTF-8 can encode");
    let last = options.since ?? "0-0";
    if (typeof last !== "string" || last === "")
      throw new InvalidArgument("since must be a chunk's id (or '0-0')");
    const blockMs = options.blockMs ?? 1000;
    if (!Number.isInteger(blockMs) || blockMs < 10 || blockMs > 60_000)
      throw new InvalidArgument(`blockMs must be an integer 10..60000, not ${String(blockMs)}`);
    const client = this.blockers.take();
    let healthy = false;
    try {
      for (;;) {
        let entries = await readOutput(client, this.keys, taskId, last, blockMs);
        if (entries.length === 0) {
          const state = await taskState(client, this.keys, taskId);
          if (state !== null && !FINISHED.has(state as TaskState)) continue;
          entries = await rangeOutput(client, this.keys, taskId, last);
          if (entries.length === 0) break;
        }
        let ended = false;
        for (const [id, item] of entries) {
          last = id;
          if (typeof item === "string") {
            // the end entry: over, unless the task runs again (a retry)
            const state = await taskState(client, this.keys, taskId);
            if (state === null || FINISHED.has(state as TaskState)) {
              ended = true;
              break;
            }
            continue;
          }
          yield item;
        }
        if (ended) break;
      }
      healthy = true;
    } finally {
      this.blockers.give(client, healthy);
    }
  }

  /**
   * The task now, then again each time its state or progress changes, until it has
   * finished (that last one included). Woken by the script that changes the task (a
   * blocking read of its follow stream on a connection of its own): no polling.
   * `intervalMs`: the longest one read waits before the task is read anyway (a change an
   * older worker makes wakes no one). Throws `TaskNotFound` for an unknown id and
   * `WaitTimeout` after `timeoutMs`.
   *
   * ```ts
   * for await (const t of q.follow(id)) console.log(t.state, t.progress);
   * ```
   */
  async *follow(
    taskId: string,
    options: { intervalMs?: number; timeoutMs?: number } = {},
  ): AsyncGenerator<Task<Payload, Result>, void, undefined> {
    checkOptionKeys(options, FOLLOW_KEYS, "follow");
    if (typeof taskId !== "string" || !taskId.isWellFormed())
      throw new InvalidArgument("task_id must be a string UTF-8 can encode");
    const intervalMs = options.intervalMs ?? 500;
    if (!Number.isInteger(intervalMs) || intervalMs < 10 || intervalMs > 3_600_000)
      throw new InvalidArgument(
        `intervalMs must be an integer 10..3600000, not ${String(intervalMs)}`,
      );
    const timeoutMs = options.timeoutMs ?? Infinity;
    if (typeof timeoutMs !== "number" || Number.isNaN(timeoutMs) || timeoutMs < 0)
      throw new InvalidArgument(`timeoutMs must be milliseconds, not ${String(timeoutMs)}`);
    const deadline = performance.now() + timeoutMs;
    // the follow stream outlives a refresh by FOLLOW_TTL_MS: refresh well before
    let waitMs = Math.min(intervalMs, FOLLOW_TTL_MS / 4);
    if (this.commandTimeoutMs) waitMs = Math.min(waitMs, this.commandTimeoutMs / 2);
    let last = await followJoin(this.client, this.keys, taskId);
    let seen: string | null = null;
    const blocker = this.blockers.take();
    let healthy = false;
    try {
      for (;;) {
        const marks = await progressMarks(this.client, this.keys, taskId);
        if (marks === null) throw new TaskNotFound(this.keys.queue, taskId);
        if (marks !== seen) {
          const task = await this.get(taskId);
          if (task === null) throw new TaskNotFound(this.keys.queue, taskId);
          seen = marks;
          yield task;
          if (FINISHED.has(task.state)) break;
        }
        const left = deadline - performance.now();
        if (left <= 0) throw new WaitTimeout([taskId], timeoutMs / 1000);
        if (!(await followRefresh(this.client, this.keys, taskId)))
          last = await followJoin(this.client, this.keys, taskId);
        const blockMs = Math.max(1, Math.floor(Math.min(waitMs, left)));
        const woke = await followBlock(blocker, this.keys, taskId, last, blockMs);
        if (woke !== null) last = woke;
      }
      healthy = true;
    } finally {
      // a consumer that stops mid-read may leave its read out: the connection is closed then
      this.blockers.give(blocker, healthy);
    }
  }

  /**
   * Turn the queue's event stream on (`retention`: about how many events it keeps,
   * default 100,000) or off (`false`). Off by default: the scripts then write nothing.
   */
  async configureEvents(enabled = true, options: { retention?: number } = {}): Promise<void> {
    const retention = options.retention ?? 100_000;
    if (!Number.isSafeInteger(retention) || retention < 1) {
      throw new InvalidArgument(
        `retention must be a positive number of events, not ${String(retention)}`,
      );
    }
    await writeEventsCap(this, enabled ? retention : null);
  }

  /**
   * The queue's events after `since` (a stream id; "0": every one still retained;
   * omitted: from now on), in order, for ever: `for await (const e of queue.events())`.
   * Each read blocks until events arrive. Resume with the last `id` seen.
   */
  events(options: { since?: string } = {}): AsyncGenerator<QueueEvent, void, undefined> {
    return eventStream(this, this.keys, this.blockers, options.since);
  }

  /**
   * Wait until every task is done, dead or cancelled; resolves to them by id. Woken by
   * the script that finishes each task, not by polling. Throws `WaitTimeout` listing the
   * unfinished ids after `timeoutMs` milliseconds. An id that does not exist yet counts
   * as unfinished (it is looked for again every second).
   */
  async wait(
    taskIds: Iterable<string>,
    options: WaitOptions,
  ): Promise<Record<string, Task<Payload, Result>>> {
    const timeout = waitSeconds(options);
    return (await wait(
      this.client,
      this.blockers,
      this.scripts,
      this.bundle,
      this.keys,
      taskIds,
      timeout,
      this.commandTimeoutMs,
    )) as Record<string, Task<Payload, Result>>;
  }

  /** Sizes of every state, live workers and the monotonic counters. */
  async stats(): Promise<Stats> {
    const stored = await readStats(this);
    const out: Record<string, number> = { ...stored.sizes };
    out.workers = stored.workers;
    for (const name of COUNTERS) out[name] = storedInt(stored.counters[name]) ?? 0;
    // tasks of groups wait in their group's own zset, counted apart (protocol.md 3)
    out.pending =
      (out.pending ?? 0) + Math.max(0, storedInt(stored.groupsPending ?? undefined) ?? 0);
    return out as Stats;
  }

  /** The queue's workers as their records say, by pod name, each with its `level` (`olderWorkers` picks the live ones of an older release). */
  async workers(): Promise<WorkerInfo[]> {
    const { records, leaseTtl, nowMs: now } = await readWorkers(this);
    const ttlMs =
      (Number(leaseTtl ?? "") > 0 ? Number(leaseTtl) : CONFIG_FIELDS.leaseTtlS.default) * 1000;
    const out: WorkerInfo[] = [];
    for (const [pod, text] of Object.entries(records)) {
      const found = workerInfo(pod, text, now, ttlMs);
      if (found !== null) out.push(found); // else a record this version cannot read; sweep drops it when stale
    }
    return out.sort((a, b) => (a.pod < b.pod ? -1 : a.pod > b.pod ? 1 : 0));
  }

  // -- controlling ----------------------------------------------------------------------

  /**
   * Cancel a task: pending or delayed, it ends cancelled and never runs (`cancelled`);
   * running, its worker cancels the run and it ends cancelled (`requested`). A finished
   * task is left as it is (`done`, `dead`, `finished`); `not_found`: no such id.
   */
  async cancel(taskId: string): Promise<control.CancelOutcome> {
    const out = await control.cancel(this.control, [taskId]);
    const outcome = out[taskId];
    if (outcome === undefined) throw new ProtocolError("cancel: no outcome for the task");
    return outcome;
  }

  /** `cancel` for each id, in calls of 1000. */
  async cancelMany(taskIds: readonly string[]): Promise<Record<string, control.CancelOutcome>> {
    return control.cancel(this.control, taskIds);
  }

  /**
   * Run a delayed task now (scheduled for later, or waiting out a retry's backoff): it goes
   * to pending at its priority. `false` when it is not delayed: nothing changed.
   */
  async promote(taskId: string): Promise<boolean> {
    const out = await control.promote(this.control, [taskId]);
    return out[taskId] === true;
  }

  /** `promote` for each id, in calls of 1000: whether each was promoted. */
  async promoteMany(taskIds: readonly string[]): Promise<Record<string, boolean>> {
    return control.promote(this.control, taskIds);
  }

  /** `cancel` every unfinished task of `group` (pending, delayed, running); how many ended each way. */
  async cancelGroup(group: string): Promise<Partial<Record<control.CancelOutcome, number>>> {
    return control.cancelGroup(this.control, group);
  }

  /**
   * `cancel` every unfinished task of `taskId`'s flow (every task linked to it by
   * `after`, either way), or with `branch` of its branch (it and every task that waits for
   * it, transitively); finished ones are left as they are. Dependants are cancelled before
   * their dependencies, so they end cancelled, not dead by their policy. Resolves to each
   * member's outcome, as `cancelMany`. In calls of 200 tasks, each atomic, not the whole
   * (docs/flows.md). `TaskNotFound` for an unknown id.
   */
  async cancelFlow(
    taskId: string,
    options: flowcontrol.FlowControlOptions = {},
  ): Promise<Record<string, control.CancelOutcome>> {
    checkOptionKeys(options, FLOW_CONTROL_OPTIONS, "cancelFlow options");
    return flowcontrol.cancelFlow(this.control, taskId, options);
  }

  /**
   * Send every dead or cancelled task of `taskId`'s flow (or with `branch` its branch)
   * back, dependencies first, so that dependants wait for them again; done and unfinished
   * ones are left as they are. Resolves to how many went back. `TaskNotFound` for an
   * unknown id.
   */
  async retryFlow(taskId: string, options: flowcontrol.FlowControlOptions = {}): Promise<number> {
    checkOptionKeys(options, FLOW_CONTROL_OPTIONS, "retryFlow options");
    return flowcontrol.retryFlow(this.control, taskId, options);
  }

  /**
   * Send dead tasks back to pending with a new attempt budget: `taskIds`, or every dead
   * task matching the filters (`reason`, `olderThanMs`, `newerThanMs` in milliseconds, `group`),
   * or with no option all of them. Resolves to how many went back.
   */
  async retry(options: control.RetryOptions = {}): Promise<number> {
    checkOptionKeys(options, RETRY_OPTIONS, "retry options");
    return control.retry(this.control, options);
  }

  /**
   * A page of the tasks in `state` (of `group` only if given); pass its `cursor` back for
   * the next one (null: no more). Pending tasks of groups wait in their group's own
   * order: list them with `group`; without it, pending lists the ungrouped tasks.
   */
  async list(state: TaskState, options: control.ListOptions = {}): Promise<control.TaskPage> {
    checkOptionKeys(options, LIST_OPTIONS, "list options");
    return control.listTasks(this.control, state, options);
  }

  /** Delete finished tasks in `state` (done, dead or cancelled) now; resolves to how many. */
  async purgeTasks(state: TaskState, options: control.PurgeOptions = {}): Promise<number> {
    checkOptionKeys(options, PURGE_OPTIONS, "purgeTasks options");
    return control.drop(this.control, state, options);
  }

  /**
   * Store the queue's shared settings (`Queue.configure` / `taskfleet configure` in
   * Python): the whole config is replaced, a field left out takes its default; every
   * script reads it at its next call, so the whole fleet follows at once. Checked first
   * (unknown fields, bounds, `backoffMaxMs` >= `backoffBaseMs`, `throttleMaxMs` >=
   * `throttleBaseMs`; durations in milliseconds, stored in seconds as Python stores them): `InvalidArgument` names the field to fix and nothing is stored.
   * Resolves to the config stored, defaults filled in.
   */
  async configure(settings: Readonly<Partial<QueueConfig>>): Promise<QueueConfig> {
    const config = storedCheck(() => checkConfig(configFromMs(settings)));
    await writeConfig(this, configFields(config));
    return configToMs(config);
  }

  /** Whether anything of the queue is stored: its config, counters, sequence or workers (a typo'd name has none). */
  async exists(): Promise<boolean> {
    return queueStored(this);
  }

  /** The queue's shared settings as stored, defaults for what is not. */
  async config(): Promise<QueueConfig> {
    return configToMs(parseConfig(await readConfig(this)));
  }

  // -- groups and quotas ----------------------------------------------------------------
  /** Replace `group`'s own settings (left out or null: the queue's default for every group holds); the next claim follows. */
  async setGroup(group: string, settings: groups.GroupSettings): Promise<void> {
    return groups.setGroup(this.control, group, settings);
  }

  /** `group`'s own settings, null where the queue's default holds. */
  async groupSettings(group: string): Promise<groups.StoredGroupSettings> {
    return groups.groupSettings(this.control, group);
  }

  /** Make the groups fair by their settled use of `unit` of their provider quotas (null or "claims": by claims). */
  async setFairBy(unit: string | null): Promise<void> {
    return groups.setFairBy(this.control, unit);
  }

  /** The unit the groups are fair by; null: by claims. */
  async fairBy(): Promise<string | null> {
    return groups.fairBy(this.control);
  }

  /** Every group with pending or running tasks, how many of each, its own pause's end; most pending first. */
  async groups(): Promise<groups.GroupCount[]> {
    return groups.groups(this.control, await queueMs(this));
  }

  /** Stop claims for `forMs` milliseconds (left out: the adaptive pause), of `group` only if given; a longer pause is kept. Its end (epoch ms). */
  async pauseClaims(options: quotas.PauseOptions = {}): Promise<number> {
    const given: unknown = options;
    if (typeof given === "number") {
      throw new InvalidArgument(
        "pauseClaims takes { forMs } (milliseconds), not a number: pauseClaims({ forMs: 60_000 })",
      );
    }
    checkOptionKeys(options, PAUSE_OPTIONS, "pauseClaims options");
    return quotas.pauseClaims(this.control, options.forMs, options);
  }

  /** End the claim pause (`group`'s own, with a group) now and forget the rate limits met in a row. */
  async resumeClaims(options: { readonly group?: string } = {}): Promise<void> {
    return quotas.resumeClaims(this.control, options.group);
  }

  /** The spend budget at run time (`day`, `month`: cost units, 0 none, "default" the config's), `group`'s own with a group. */
  async setBudget(options: quotas.BudgetOptions): Promise<void> {
    checkOptionKeys(options, BUDGET_OPTIONS, "setBudget options");
    return quotas.setBudget(this.control, options);
  }

  /** The claim pause and the budget's spend (`group`'s own, with a group), as the scripts see them now. */
  async quota(options: { readonly group?: string } = {}): Promise<quotas.QuotaState> {
    return quotas.quota(
      this.control,
      options.group,
      configFromMs(await this.config()) as QueueConfigS,
    );
  }

  /** Delete every key of the queue (tasks, workers, config, counters, schedules). */
  async purge(): Promise<void> {
    await purge(this);
  }

  // -- schedules ------------------------------------------------------------------------

  /**
   * Create or change the schedule `name`: a task with `payload` once per slot of `cron`
   * (five fields, or six with seconds first) in zone `tz`; resolves to it as stored.
   * Changing the cron, zone or jitter starts again from the next slot after now. Throws
   * `InvalidArgument`, `InvalidPayload` or `ScheduleOwned` (a TaskQueue's spec holds it).
   */
  async schedule(
    name: string,
    cron: string,
    payload: JsonCompatible<Payload>,
    options: ScheduleOptions = {},
  ): Promise<Schedule> {
    const def = scheduleDef(name, cron, payload, options);
    const now = await queueMs(this);
    const slot = firstSlot(def.cron, def.tz, now);
    const argv = this.bundle.pack(
      "schedule_put",
      {
        name: def.name,
        owner: OWNER_API,
        take_over: 0,
        first_slot: slot ?? undefined,
        first_due_ms: slot === null ? 0 : dueMs(def.name, slot, def.jitterMs),
        paused: options.paused === true ? 1 : 0,
      },
      def.fields.map(([field, value]) => ({ field, value })),
    );
    const reply = replyList(
      "schedule_put",
      await this.scripts.run("schedule_put", this.keys, argv),
    );
    const code = Number(reply[0]);
    if (code === -1) {
      throw new InvalidPayload(
        `payload of schedule '${name}' is ${Number(reply[1])} bytes; the queue allows ${Number(reply[2])} (max_payload_bytes)`,
      );
    }
    if (code === -2) throw new ScheduleOwned(name, String(reply[1]));
    if (code === -6) throw new OlderWorker(this.keys.queue, String(reply[1]), String(reply[2]));
    const stored = await this.getSchedule(name);
    if (stored === null) throw new ProtocolError(`schedule_put: schedule ${name} is not stored`);
    return stored;
  }

  /** The schedule `name`, or null. */
  async getSchedule(name: string): Promise<Schedule | null> {
    validateScheduleName(name);
    const raw = await readSchedule(this, name);
    return Object.keys(raw).length > 0 ? scheduleFromHash(raw) : null;
  }

  /** Every schedule of the queue, sorted by name. */
  async schedules(): Promise<Schedule[]> {
    return (await readSchedules(this)).map((hash) => scheduleFromHash(hash));
  }

  /** Delete the schedule `name`; false if there was none. Tasks it fired stay. */
  async unschedule(name: string): Promise<boolean> {
    validateScheduleName(name);
    const argv = this.bundle.pack("schedule_delete", { name, owner: OWNER_API, take_over: 0 });
    const reply = replyList(
      "schedule_delete",
      await this.scripts.run("schedule_delete", this.keys, argv),
    );
    if (Number(reply[0]) === -2) throw new ScheduleOwned(name, String(reply[1]));
    return Number(reply[0]) === 1;
  }

  /** Stop firing `name` (false if it was paused); slots that pass are not fired. */
  async pauseSchedule(name: string): Promise<boolean> {
    validateScheduleName(name);
    return this.pause(name, true, null, 0);
  }

  /** Fire `name` again from its first slot after now (false if it was active). */
  async resumeSchedule(name: string): Promise<boolean> {
    const found = await this.getSchedule(name);
    if (found === null) throw new ScheduleNotFound(name);
    const now = await queueMs(this);
    const slot = firstSlot(found.cron, found.tz, now);
    const due = slot === null ? 0 : dueMs(name, slot, found.jitterMs);
    return this.pause(name, false, slot, due);
  }

  private async pause(
    name: string,
    paused: boolean,
    slot: number | null,
    dueAt: number,
  ): Promise<boolean> {
    const argv = this.bundle.pack("schedule_pause", {
      name,
      paused: paused ? 1 : 0,
      owner: OWNER_API,
      next_slot: slot ?? undefined,
      next_due_ms: dueAt,
    });
    const reply = replyList(
      "schedule_pause",
      await this.scripts.run("schedule_pause", this.keys, argv),
    );
    const code = Number(reply[0]);
    if (code === -1) throw new ScheduleNotFound(name);
    if (code === -2) throw new ScheduleOwned(name, String(reply[1]));
    return code === 1;
  }
}

/** A task enqueue_plain takes: no after, on_dep_fail, group or quotas. */
function isPlain(r: TaskRecord): boolean {
  return r.after === "" && r.on_dep_fail === "" && r.group === "" && r.quotas === "";
}

/** A plain task's fields as enqueue_plain's records name them. */
function plainRecord(r: TaskRecord): EnqueuePlainRecord {
  const { task_id, payload, priority, delay_ms, deadline, max_attempts, cost, timeout_s } = r;
  return { task_id, payload, priority, delay_ms, deadline, max_attempts, cost, timeout_s };
}

/** enqueue_plain's [0]: nothing stored, an idle worker waits for the hand-off enqueue makes. */
function handOffLeft(raw: unknown): boolean {
  return Array.isArray(raw) && raw.length === 1 && Number(raw[0]) === 0;
}

/** The options of `Queue.wait`. */
export interface WaitOptions {
  /** How long to wait, in milliseconds, before `WaitTimeout`. */
  readonly timeoutMs: number;
}

/** `wait`'s options as the seconds the wait loop takes; a bare number (once seconds) is refused. */
function waitSeconds(options: unknown): number {
  if (typeof options === "number") {
    throw new InvalidArgument(
      `wait takes { timeoutMs } (milliseconds), not a number: wait(ids, { timeoutMs: 30_000 })`,
    );
  }
  checkOptionKeys(options, WAIT_OPTIONS, "wait options");
  const timeoutMs: unknown = (options as Partial<WaitOptions> | undefined)?.timeoutMs;
  if (typeof timeoutMs !== "number" || Number.isNaN(timeoutMs)) {
    throw new InvalidArgument(
      `wait needs timeoutMs, a number of milliseconds, not ${String(timeoutMs)}`,
    );
  }
  // Infinity waits for ever; a negative wait is a misread, never an instant timeout
  if (timeoutMs < 0)
    throw new InvalidArgument(`wait timeoutMs must be >= 0 milliseconds, not ${timeoutMs}`);
  return timeoutMs / 1000;
}
