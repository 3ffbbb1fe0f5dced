/**
 * The processor for a worker the operator runs: a TaskQueue of `runtime: node` runs
 * `taskfleet-node worker --handler ./dist/handlers.js:writeArticle` (k8s/taskqueue.yaml),
 * which drains on the pod's SIGTERM through its preStop hook. `writeArticle` hands each
 * task to the same `ArticlesProcessor`, built once with its providers in a Nest
 * application context that runs no worker of its own.
 */

import "reflect-metadata";

import { Module } from "@nestjs/common";
import { NestFactory } from "@nestjs/core";
import type { TaskContext } from "taskfleet";

import type { Article } from "./articles.js";
import { ArticlesProcessor } from "./articles.processor.js";
import { LlmClient } from "./llm.client.js";
import { SettingsModule } from "./settings.module.js";

@Module({ imports: [SettingsModule], providers: [LlmClient, ArticlesProcessor] })
class WriterModule {}

let processor: Promise<ArticlesProcessor> | undefined;

export async function writeArticle(payload: Record<string, unknown>, task: TaskContext): Promise<Article> {
  processor ??= NestFactory.createApplicationContext(WriterModule, { logger: ["error", "warn"] }).then((app) => app.get(ArticlesProcessor));
  return (await processor).write(payload, task);
}
