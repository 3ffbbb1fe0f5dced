/** The decorators: `@InjectQueue`, `@Processor`, `@Handle`. */

import { Inject, Injectable, SetMetadata } from "@nestjs/common";

import type { ProcessorOptions } from "./options.js";
import { HANDLE_METADATA, PROCESSOR_METADATA, getQueueToken } from "./tokens.js";

/** What `@Processor` records on its class. */
export interface ProcessorMetadata {
  readonly queue: string;
  readonly options: ProcessorOptions;
}

/** What `@Handle` records on its method. */
export interface HandleMetadata {
  readonly name: string | null;
}

/** Injects the `Queue` that `TaskfleetModule.registerQueue({ name })` provides. */
export function InjectQueue(name: string): ParameterDecorator & PropertyDecorator {
  return Inject(getQueueToken(name));
}

/**
 * Marks a provider as the processor of `queue`: its `@Handle` methods run the queue's
 * tasks in a worker started with the application. The class is injectable, so list it in
 * a module's `providers` and its constructor gets what it needs.
 */
export function Processor(queue: string, options: ProcessorOptions = {}): ClassDecorator {
  const metadata: ProcessorMetadata = { queue, options };
  return (target) => {
    Injectable()(target);
    SetMetadata(PROCESSOR_METADATA, metadata)(target);
  };
}

/**
 * Marks a processor's method as a handler: `@Handle()` for tasks enqueued without a name,
 * `@Handle("resize")` for tasks enqueued with `name: "resize"`. It gets the payload and
 * the task's `TaskContext`; what it returns (JSON data) is the task's result.
 */
export function Handle(name?: string): MethodDecorator {
  const metadata: HandleMetadata = { name: name ?? null };
  return SetMetadata(HANDLE_METADATA, metadata);
}
