/**
 * taskfleet for Node.js: enqueue, read, wait on and control tasks of taskfleet queues in
 * Redis, on the same scripts (the protocol's bundle) as the Python client and workers.
 *
 * ```ts
 * import { Queue } from "taskfleet";
 * const q = new Queue("emails", { redisUrl: "redis://localhost:6379/0" });
 * const id = await q.enqueue({ to: "a@example.com" }, { priority: 5 });
 * await q.close();
 * ```
 *
 * @packageDocumentation
 */

export {
  Queue,
  type EnqueueCallOptions,
  type EnqueueResult,
  type QueueOptions,
  type Stats,
  type WaitOptions,
} from "./queue.js";
export {
  CURRENT_LEVEL,
  WORKER_LEVEL,
  olderWorkers,
  olderWorkersNote,
  type WorkerInfo,
} from "./workers.js";
export type { EnqueueItem, EnqueueOptions } from "./encoding.js";
export { Quota, type QuotaLimits, type QuotaUnit, type QuotaUse } from "./providerquota.js";
export type { AnyPayload, JsonCompatible, JsonObject, JsonPrimitive, JsonValue } from "./json.js";
export type { FlowControlOptions } from "./flowcontrol.js";
export {
  Flow,
  chain,
  chord,
  group,
  type FlowIds,
  type FlowOutcome,
  type FlowPart,
  type FlowRecord,
} from "./flows.js";
export {
  CancelOutcome,
  type ListOptions,
  type PurgeOptions,
  type RetryOptions,
  type TaskFilter,
  type TaskPage,
} from "./control.js";
export type { OutputChunk } from "./protocol/output.js";
export { TaskState, type Attempt, type Task } from "./tasks.js";
export type { QueueEvent } from "./events.js";
export type { GroupCount, GroupSettings, StoredGroupSettings } from "./groups.js";
export type {
  BudgetLimit,
  BudgetOptions,
  BudgetPeriod,
  PauseOptions,
  QuotaState,
} from "./quotas.js";
export type { Schedule, ScheduleOptions } from "./schedules.js";
export { type QueueConfig, defaultConfig } from "./configms.js";
export {
  DependencyCycle,
  FlowTooLarge,
  InvalidArgument,
  InvalidPayload,
  InvalidRedisURL,
  NotReplicated,
  OlderWorker,
  OutputFull,
  ProtocolError,
  ScheduleNotFound,
  ScheduleOwned,
  StaleToken,
  TaskExists,
  TaskNotFound,
  TaskfleetError,
  WaitTimeout,
} from "./errors.js";
export { PROTOCOL_VERSION } from "./bundle.js";
export * as bounds from "./bounds.js";
export * from "./worker/index.js";
