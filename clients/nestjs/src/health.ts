/**
 * A health indicator in `@nestjs/terminus`'s shape, without terminus as a dependency:
 * `isHealthy(key)` resolves to `{ [key]: { status: "up" | "down", ... } }`, the result
 * terminus's `HealthCheckService.check` takes from an indicator function. Terminus 11
 * counts a returned `down` as a failed check (HTTP 503).
 *
 * @module
 */

import { Injectable } from "@nestjs/common";

import { QueueRegistry } from "./queues.js";
import { TaskfleetWorkers } from "./workers.js";

/** How long a queue's Redis may take to answer a health check. */
export const HEALTH_TIMEOUT_MS = 2000;

/** One queue's part of the result. */
export interface QueueHealth {
  /** Whether its Redis answered within the timeout. */
  readonly redis: "up" | "down";
  /** This process's worker of the queue, if it runs one: `running`, `draining`, `exited` or `failed`. */
  readonly worker?: string;
  readonly pending?: number;
  readonly running?: number;
  /** Live workers of the queue, in every process. */
  readonly workers?: number;
  readonly error?: string;
}

/** What `isHealthy` resolves to: terminus's `HealthIndicatorResult`. */
export type TaskfleetHealth<Key extends string = string> = Record<
  Key,
  { readonly status: "up" | "down"; readonly queues: Readonly<Record<string, QueueHealth>> }
>;

@Injectable()
export class TaskfleetHealthIndicator {
  constructor(
    private readonly registry: QueueRegistry,
    private readonly workers: TaskfleetWorkers,
  ) {}

  /**
   * Up when every queue's Redis answers within `timeoutMs` and every worker of this
   * process is running; down (never a throw) with what failed, per queue.
   */
  async isHealthy<Key extends string = "taskfleet">(
    key: Key = "taskfleet" as Key,
    timeoutMs = HEALTH_TIMEOUT_MS,
  ): Promise<TaskfleetHealth<Key>> {
    const names = new Set<string>([
      ...this.registry.opened.keys(),
      ...this.workers.workers.map((w) => w.queue),
    ]);
    const checked = await Promise.all(
      [...names].sort().map(async (name): Promise<[string, QueueHealth]> => {
        const worker = this.workers.workers.find((w) => w.queue === name);
        const workerState =
          worker === undefined
            ? undefined
            : worker.status === "running" && worker.worker.draining
              ? "draining"
              : worker.status;
        try {
          const stats = await within(this.registry.open(name).stats(), timeoutMs);
          return [
            name,
            {
              redis: "up",
              worker: workerState,
              pending: stats.pending,
              running: stats.running,
              workers: stats.workers,
            },
          ];
        } catch (error) {
          return [
            name,
            {
              redis: "down",
              worker: workerState,
              error: error instanceof Error ? error.message : String(error),
            },
          ];
        }
      }),
    );
    const up = checked.every(
      ([, q]) => q.redis === "up" && (q.worker === undefined || q.worker === "running"),
    );
    const result = { status: up ? "up" : "down", queues: Object.fromEntries(checked) } as const;
    return { [key]: result } as TaskfleetHealth<Key>;
  }
}

async function within<T>(promise: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      reject(new Error(`no answer within ${ms} ms`));
    }, ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}
