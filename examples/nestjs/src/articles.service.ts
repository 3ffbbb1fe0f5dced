/**
 * The API's side of the queue: the `Queue` injected by `@InjectQueue`, which the module
 * opens once for the application and closes when it shuts down.
 */

import { Inject, Injectable } from "@nestjs/common";
import type { Queue, Task } from "taskfleet";
import { WaitTimeout } from "taskfleet";
import { InjectQueue } from "taskfleet-nestjs";

import { type ArticleRequest, estimateTokens } from "./articles.js";
import { SETTINGS } from "./settings.module.js";
import { ARTICLES_QUEUE, type AppSettings } from "./settings.js";

/** A task as the API shows it. */
export interface ArticleView {
  readonly id: string;
  readonly state: string;
  readonly attempts: number;
  /** What the worker last reported: `{done, total, fraction, message}`. */
  readonly progress: unknown;
  readonly result: unknown;
  readonly error: string | null;
  readonly reason: string | null;
  /** Tokens reserved at enqueue (the estimate) and used (what the worker reported). */
  readonly tokens: { readonly reserved: number; readonly used: number | null };
  readonly createdAt: string | null;
  readonly startedAt: string | null;
  readonly finishedAt: string | null;
}

export function view(task: Task): ArticleView {
  return {
    id: task.id,
    state: task.state,
    attempts: task.attempts,
    progress: task.progress,
    result: task.result,
    error: task.error,
    reason: task.reason,
    tokens: { reserved: task.cost, used: task.costUsed },
    createdAt: task.createdAt?.toISOString() ?? null,
    startedAt: task.startedAt?.toISOString() ?? null,
    finishedAt: task.finishedAt?.toISOString() ?? null,
  };
}

@Injectable()
export class ArticlesService {
  private waiters = 0;

  constructor(
    @InjectQueue(ARTICLES_QUEUE) private readonly queue: Queue,
    @Inject(SETTINGS) private readonly settings: AppSettings,
  ) {}

  /**
   * Enqueue an article; resolves to its task id. The task's cost is the most tokens the
   * call may use, so the queue's rate limit (requests and tokens per period) holds it
   * back until the budget has room; the worker reports the real count after the call.
   * With `taskId` (the client's Idempotency-Key) a repeated request is the same task.
   */
  async enqueue(request: ArticleRequest, taskId?: string): Promise<string> {
    return this.queue.enqueue({ topic: request.topic, maxTokens: request.maxTokens }, { cost: estimateTokens(request), taskId });
  }

  /**
   * The task, or null when there is none. With `wait` > 0, resolves once it has finished
   * or after `wait` seconds: woken by the worker that finishes it (taskfleet's waiter
   * lists), without polling. Each wait holds a connection: past `maxWaiters` at once, the
   * state is answered at once.
   */
  async get(taskId: string, wait: number): Promise<ArticleView | null> {
    const task = await this.queue.get(taskId);
    if (task === null) return null;
    if (task.finished || wait <= 0 || this.waiters >= this.settings.maxWaiters) return view(task);
    this.waiters += 1;
    try {
      const finished = (await this.queue.wait([taskId], { timeoutMs: wait * 1000 }))[taskId];
      return finished === undefined ? view(task) : view(finished);
    } catch (error) {
      if (!(error instanceof WaitTimeout)) throw error;
      const latest = await this.queue.get(taskId);
      return latest === null ? null : view(latest);
    } finally {
      this.waiters -= 1;
    }
  }
}
