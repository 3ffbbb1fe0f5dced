/**
 * The processors' workers: found among the application's providers at bootstrap, one
 * Node-client `Worker` per processor, drained when the application shuts down.
 *
 * Workers start in `onApplicationBootstrap`, once every provider (and so every
 * processor's dependencies) is ready. They drain in `onModuleDestroy`: stop claiming,
 * let held tasks finish until the drain timeout, hand back the rest. With
 * `app.enableShutdownHooks()` a SIGTERM runs that drain before the process exits; a
 * second signal hands back at once.
 *
 * @module
 */

import {
  Inject,
  Injectable,
  Logger,
  type OnApplicationBootstrap,
  type OnModuleDestroy,
} from "@nestjs/common";
import { DiscoveryService, Reflector } from "@nestjs/core";
import { type HandlerFn, type TaskContext, Worker } from "taskfleet";

import type { HandleMetadata, ProcessorMetadata } from "./decorators.js";
import type { TaskfleetModuleOptions } from "./options.js";
import { HANDLE_METADATA, PROCESSOR_METADATA, TASKFLEET_OPTIONS } from "./tokens.js";

/** A processor the module can't run; the message says what to fix. */
export class ProcessorError extends Error {
  override readonly name = "ProcessorError";
}

/** One processor's worker and how it is doing. */
export interface ProcessorWorker {
  readonly queue: string;
  /** The processor's class name. */
  readonly processor: string;
  readonly worker: Worker;
  /** `running` until `run()` settles; `exited` with its code, or `failed` with its error. */
  readonly status: "running" | "exited" | "failed";
  readonly exitCode: number | null;
  readonly error: unknown;
}

interface Found {
  readonly meta: ProcessorMetadata;
  readonly instance: object;
  readonly className: string;
}

class Running implements ProcessorWorker {
  status: "running" | "exited" | "failed" = "running";
  exitCode: number | null = null;
  error: unknown = null;
  done: Promise<void> = Promise.resolve();

  constructor(
    readonly queue: string,
    readonly processor: string,
    readonly worker: Worker,
  ) {}
}

@Injectable()
export class TaskfleetWorkers implements OnApplicationBootstrap, OnModuleDestroy {
  private readonly logger = new Logger("Taskfleet");
  private readonly running: Running[] = [];

  constructor(
    @Inject(TASKFLEET_OPTIONS) private readonly options: TaskfleetModuleOptions,
    private readonly discovery: DiscoveryService,
    private readonly reflector: Reflector,
  ) {}

  /** The workers this process runs. */
  get workers(): readonly ProcessorWorker[] {
    return this.running;
  }

  /** Every processor's worker built first (a bad one fails the bootstrap before any runs), then run. */
  onApplicationBootstrap(): void {
    if (this.options.workers === false) return;
    const built = this.processors().map((p) => this.build(p));
    for (const entry of built) {
      this.running.push(entry);
      entry.done = entry.worker.run().then(
        (code) => {
          entry.status = "exited";
          entry.exitCode = code;
          if (code !== 0)
            this.logger.error(`the worker of queue ${entry.queue} exited with code ${code}`);
        },
        (error: unknown) => {
          entry.status = "failed";
          entry.error = error;
          this.logger.error(
            `the worker of queue ${entry.queue} failed: ${error instanceof Error ? error.message : String(error)}`,
          );
        },
      );
    }
  }

  /**
   * Drains every worker at once and waits for each to hand back or finish what it held.
   * A SIGTERM or SIGINT during the drain hands back what is left at once, as the
   * worker command's second signal does (Nest's own handler ignores a second signal).
   */
  async onModuleDestroy(): Promise<void> {
    const drain = (): void => {
      for (const entry of this.running) entry.worker.drain();
    };
    drain();
    if (this.running.length === 0) return;
    process.on("SIGTERM", drain);
    process.on("SIGINT", drain);
    try {
      await Promise.all(this.running.map((entry) => entry.done));
    } finally {
      process.removeListener("SIGTERM", drain);
      process.removeListener("SIGINT", drain);
    }
  }

  private processors(): Found[] {
    const found: Found[] = [];
    const byQueue = new Map<string, string>();
    for (const wrapper of this.discovery.getProviders()) {
      const metatype: unknown = wrapper.metatype;
      if (typeof metatype !== "function" || wrapper.inject) continue;
      const meta = this.reflector.get<ProcessorMetadata | undefined>(
        PROCESSOR_METADATA,
        metatype as new () => unknown,
      );
      if (meta === undefined) continue;
      const className = (metatype as { name: string }).name;
      if (!wrapper.isDependencyTreeStatic()) {
        throw new ProcessorError(
          `processor ${className} must be a singleton: a request- or transient-scoped provider can't run a worker`,
        );
      }
      const other = byQueue.get(meta.queue);
      if (other !== undefined) {
        const both = [other, className].sort().join(" and ");
        throw new ProcessorError(
          `queue ${JSON.stringify(meta.queue)} has two processors, ${both}: give it one`,
        );
      }
      byQueue.set(meta.queue, className);
      const instance: unknown = wrapper.instance;
      if (typeof instance !== "object" || instance === null)
        throw new ProcessorError(`processor ${className} was not instantiated`);
      found.push({ meta, instance, className });
    }
    return found;
  }

  private build({ meta, instance, className }: Found): Running {
    let fallback: HandlerFn | undefined;
    const named: Record<string, HandlerFn> = {};
    for (const key of methodNames(instance)) {
      const method = (instance as Record<string, unknown>)[key];
      if (typeof method !== "function") continue;
      const handle = this.reflector.get<HandleMetadata | undefined>(
        HANDLE_METADATA,
        method as () => unknown,
      );
      if (handle === undefined) continue;
      const fn: HandlerFn = (payload: Record<string, unknown>, task: TaskContext): unknown =>
        (method as (p: Record<string, unknown>, t: TaskContext) => unknown).call(
          instance,
          payload,
          task,
        );
      if (handle.name === null) {
        if (fallback !== undefined)
          throw new ProcessorError(
            `processor ${className} has two @Handle() methods for tasks without a name`,
          );
        fallback = fn;
      } else {
        if (handle.name in named)
          throw new ProcessorError(
            `processor ${className} has two @Handle(${JSON.stringify(handle.name)}) methods`,
          );
        named[handle.name] = fn;
      }
    }
    if (fallback === undefined && Object.keys(named).length === 0) {
      throw new ProcessorError(
        `processor ${className} has no @Handle() method: decorate the methods that run its tasks`,
      );
    }
    const worker = new Worker(meta.queue, {
      ...this.options.worker,
      ...meta.options,
      redisUrl: this.options.redisUrl,
      handler: fallback,
      handlers: named,
    });
    return new Running(meta.queue, className, worker);
  }
}

/** The method names of an instance, along its prototype chain up to `Object`. */
function methodNames(instance: object): string[] {
  const names = new Set<string>();
  for (
    let proto: unknown = Object.getPrototypeOf(instance);
    proto !== null && proto !== Object.prototype;
    proto = Object.getPrototypeOf(proto)
  ) {
    for (const name of Object.getOwnPropertyNames(proto))
      if (name !== "constructor") names.add(name);
  }
  return [...names];
}
