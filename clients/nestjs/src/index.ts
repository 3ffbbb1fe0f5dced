/**
 * taskfleet for NestJS: queues injected by name, processors whose handlers are
 * providers' methods, their workers started on bootstrap and drained on shutdown.
 *
 * ```ts
 * @Processor("emails", { concurrency: 4 })
 * export class EmailProcessor {
 *   constructor(private readonly mailer: Mailer) {}
 *   @Handle() async send(payload: Record<string, unknown>) { return this.mailer.send(payload); }
 * }
 * ```
 *
 * @packageDocumentation
 */

export {
  Handle,
  InjectQueue,
  Processor,
  type HandleMetadata,
  type ProcessorMetadata,
} from "./decorators.js";
export {
  HEALTH_TIMEOUT_MS,
  TaskfleetHealthIndicator,
  type QueueHealth,
  type TaskfleetHealth,
} from "./health.js";
export { TaskfleetCoreModule, TaskfleetModule } from "./module.js";
export type {
  ProcessorOptions,
  RegisterQueueOptions,
  TaskfleetModuleAsyncOptions,
  TaskfleetModuleOptions,
} from "./options.js";
export { QueueRegistry } from "./queues.js";
export { TASKFLEET_OPTIONS, getQueueToken } from "./tokens.js";
export { ProcessorError, TaskfleetWorkers, type ProcessorWorker } from "./workers.js";
