/**
 * The application: `node dist/main.js` serves the API and, unless ARTICLES_WORKER=0, runs
 * the processor's worker in the same process. In a container, exec form, so SIGTERM
 * reaches Nest: the worker drains (stops claiming, lets held articles finish within
 * ARTICLES_DRAIN_TIMEOUT_MS, hands back the rest), the queue closes, and the process exits 0.
 *
 * Settings (environment): PORT (3000), TASKFLEET_REDIS_URL (redis://127.0.0.1:6379/0),
 * ARTICLES_QUEUE (llm.articles), ARTICLES_MAX_WAITERS (64), ARTICLES_WORKER (1),
 * ARTICLES_CONCURRENCY (4), ARTICLES_DRAIN_TIMEOUT_MS (30000), LLM_URL (http://127.0.0.1:8090).
 */

import "reflect-metadata";

import { NestFactory } from "@nestjs/core";

import { AppModule } from "./app.module.js";
import { type AppSettings, ARTICLES_QUEUE, appSettings, exitOnBadSetting } from "./settings.js";

async function main(): Promise<void> {
  let settings: AppSettings;
  try {
    settings = appSettings();
  } catch (error) {
    exitOnBadSetting("api", error);
  }
  const app = await NestFactory.create(AppModule);
  // SIGTERM and SIGINT run the drain; the process then exits 0 rather than re-raising.
  app.enableShutdownHooks(["SIGTERM", "SIGINT"], { useProcessExit: true });
  await app.listen(settings.port, "0.0.0.0");
  const port = new URL(await app.getUrl()).port;
  console.log(`api listening port=${port} queue=${ARTICLES_QUEUE} worker=${settings.worker ? settings.concurrency : 0}`);
}

await main();
