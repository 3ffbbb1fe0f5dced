/** What the module takes: its options, a queue's registration, a processor's worker options. */

import type { FactoryProvider, ModuleMetadata } from "@nestjs/common";
import type { WorkerOptions } from "taskfleet";

/** A processor's worker options: the Node client's `WorkerOptions` less the handlers and the server. Times are seconds. */
export type ProcessorOptions = Omit<WorkerOptions, "handler" | "handlers" | "redisUrl">;

/** `TaskfleetModule.forRoot` options. */
export interface TaskfleetModuleOptions {
  /** The Redis server of every queue and worker (default `redis://localhost:6379/0`). */
  readonly redisUrl?: string;
  /**
   * Run the processors' workers in this process (default true). `false` for a process that
   * only enqueues and reads, such as an API whose workers run elsewhere.
   */
  readonly workers?: boolean;
  /** Worker options every processor starts from; a processor's own options win. */
  readonly worker?: ProcessorOptions;
}

/** `TaskfleetModule.forRootAsync` options: the options from a factory, with injection. */
export interface TaskfleetModuleAsyncOptions extends Pick<ModuleMetadata, "imports"> {
  readonly useFactory: (
    ...args: never[]
  ) => TaskfleetModuleOptions | Promise<TaskfleetModuleOptions>;
  readonly inject?: FactoryProvider["inject"];
}

/** `TaskfleetModule.registerQueue` options: one queue to inject by name. */
export interface RegisterQueueOptions {
  readonly name: string;
}

const MODULE_OPTION_KEYS: Record<keyof TaskfleetModuleOptions, true> = {
  redisUrl: true,
  workers: true,
  worker: true,
};

/** `options` checked: a key the module does not know is refused in one line, never ignored. */
export function checkModuleOptions(options: unknown): TaskfleetModuleOptions {
  if (typeof options !== "object" || options === null || Array.isArray(options)) {
    throw new TypeError(
      'TaskfleetModule options must be an object such as { redisUrl: "redis://host:6379/0" }',
    );
  }
  for (const key of Object.keys(options)) {
    if (!(key in MODULE_OPTION_KEYS)) {
      throw new TypeError(
        `TaskfleetModule options: unknown option ${JSON.stringify(key)} (known: ${Object.keys(MODULE_OPTION_KEYS).join(", ")})`,
      );
    }
  }
  return options;
}
