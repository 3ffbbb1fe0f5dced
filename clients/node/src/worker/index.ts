/**
 * The worker's public API: `Worker`, what a handler gets (`TaskContext`,
 * `currentTask()`), and the errors a handler throws on purpose.
 *
 * @module
 */

export { Worker, type WorkerState } from "./worker.js";
export type { FailedHow, WorkerEvents } from "./events.js";
export type { WorkerOptions } from "./settings.js";
export {
  QUOTA_LOW,
  TaskContext,
  currentTask,
  type Progress,
  type QuotaReport,
  type StopReason,
} from "./context.js";
export { PermanentFailure, RateLimited, RetryAfter } from "./failures.js";
export { HandlerSet, loadHandlers, type HandlerFn } from "./handlers.js";
export { NameInUse } from "./broker.js";
export { RedisEvicts } from "./start.js";
export { configureLogging } from "./log.js";
