/**
 * The API: `node dist/main.js` (exec form in a container, so SIGTERM reaches it: Nest
 * closes the HTTP server and the queue's connections, then the process exits).
 *
 * Settings (environment): PORT (3000), TASKFLEET_REDIS_URL (redis://127.0.0.1:6379/0),
 * ARTICLES_QUEUE (llm.articles), ARTICLES_MAX_WAITERS (64).
 */

import "reflect-metadata";

import { NestFactory } from "@nestjs/core";

import { AppModule } from "./app.module.js";
import { type ApiSettings, apiSettings, exitOnBadSetting } from "./settings.js";

async function main(): Promise<void> {
  let settings: ApiSettings;
  try {
    settings = apiSettings();
  } catch (error) {
    exitOnBadSetting("api", error);
  }
  const app = await NestFactory.create(AppModule);
  app.enableShutdownHooks();
  await app.listen(settings.port, "0.0.0.0");
  console.log(`api listening port=${new URL(await app.getUrl()).port} queue=${settings.queue}`);
}

await main();
