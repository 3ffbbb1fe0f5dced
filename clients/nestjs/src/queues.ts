/** The application's queues: one `Queue` per name, closed when the application shuts down. */

import { Inject, Injectable, type OnApplicationShutdown } from "@nestjs/common";
import { Queue } from "taskfleet";

import type { TaskfleetModuleOptions } from "./options.js";
import { TASKFLEET_OPTIONS } from "./tokens.js";

@Injectable()
export class QueueRegistry implements OnApplicationShutdown {
  private readonly queues = new Map<string, Queue>();

  constructor(@Inject(TASKFLEET_OPTIONS) private readonly options: TaskfleetModuleOptions) {}

  /** The queue named `name`, opened on first use; every module that registers it shares it. */
  open(name: string): Queue {
    let queue = this.queues.get(name);
    if (queue === undefined) {
      queue = new Queue(name, { redisUrl: this.options.redisUrl });
      this.queues.set(name, queue);
    }
    return queue;
  }

  /** The queues opened so far, by name. */
  get opened(): ReadonlyMap<string, Queue> {
    return this.queues;
  }

  /**
   * Closed last: `onApplicationShutdown` runs after every `onModuleDestroy`, so after the
   * workers' drain, and handlers may enqueue until their worker has drained.
   */
  async onApplicationShutdown(): Promise<void> {
    const queues = [...this.queues.values()];
    this.queues.clear();
    await Promise.all(queues.map((q) => q.close()));
  }
}
