/** Injection tokens and metadata keys of the module. */

/** The module's options (`forRoot` / `forRootAsync`). */
export const TASKFLEET_OPTIONS = "taskfleet:options";
/** A class decorated with `@Processor`: its queue and worker options. */
export const PROCESSOR_METADATA = "taskfleet:processor";
/** A method decorated with `@Handle`: the task name it serves (null: tasks without a name). */
export const HANDLE_METADATA = "taskfleet:handle";

/** The token `registerQueue({ name })` provides the queue under; `@InjectQueue(name)` injects it. */
export function getQueueToken(name: string): string {
  return `taskfleet:queue:${name}`;
}
