/**
 * `TaskfleetModule`: `forRoot` / `forRootAsync` once in the application's root module,
 * `registerQueue` in each module that injects a queue.
 *
 * ```ts
 * @Module({ imports: [TaskfleetModule.forRoot({ redisUrl }), TaskfleetModule.registerQueue({ name: "emails" })] })
 * ```
 *
 * @module
 */

import { type DynamicModule, Module, type Provider } from "@nestjs/common";
import { DiscoveryModule } from "@nestjs/core";

import { TaskfleetHealthIndicator } from "./health.js";
import {
  type RegisterQueueOptions,
  type TaskfleetModuleAsyncOptions,
  type TaskfleetModuleOptions,
  checkModuleOptions,
} from "./options.js";
import { QueueRegistry } from "./queues.js";
import { TASKFLEET_OPTIONS, getQueueToken } from "./tokens.js";
import { TaskfleetWorkers } from "./workers.js";

/** The global part `forRoot` adds once: options, queues, workers, health. */
@Module({})
export class TaskfleetCoreModule {
  static with(
    options: Provider,
    imports: NonNullable<DynamicModule["imports"]> = [],
  ): DynamicModule {
    const exported = [TASKFLEET_OPTIONS, QueueRegistry, TaskfleetWorkers, TaskfleetHealthIndicator];
    return {
      module: TaskfleetCoreModule,
      global: true,
      imports: [DiscoveryModule, ...imports],
      providers: [options, QueueRegistry, TaskfleetWorkers, TaskfleetHealthIndicator],
      exports: exported,
    };
  }
}

@Module({})
export class TaskfleetModule {
  /** The module with its options given; import it once, in the root module. */
  static forRoot(options: TaskfleetModuleOptions = {}): DynamicModule {
    const checked = checkModuleOptions(options);
    return {
      module: TaskfleetModule,
      imports: [TaskfleetCoreModule.with({ provide: TASKFLEET_OPTIONS, useValue: checked })],
    };
  }

  /** The module with its options from `useFactory`, which gets the providers `inject` names. */
  static forRootAsync(options: TaskfleetModuleAsyncOptions): DynamicModule {
    const provider: Provider = {
      provide: TASKFLEET_OPTIONS,
      useFactory: async (...args: never[]) => checkModuleOptions(await options.useFactory(...args)),
      inject: options.inject ?? [],
    };
    return {
      module: TaskfleetModule,
      imports: [TaskfleetCoreModule.with(provider, options.imports)],
    };
  }

  /** Queues the importing module injects with `@InjectQueue(name)`; needs `forRoot` in the application. */
  static registerQueue(...queues: RegisterQueueOptions[]): DynamicModule {
    const providers: Provider[] = queues.map((q) => ({
      provide: getQueueToken(q.name),
      useFactory: (registry: QueueRegistry) => registry.open(q.name),
      inject: [QueueRegistry],
    }));
    return { module: TaskfleetModule, providers, exports: providers };
  }
}
