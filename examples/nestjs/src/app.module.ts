/**
 * The application: the settings, taskfleet's module with its options from them
 * (`forRootAsync`), terminus for `GET /health`, and the articles.
 */

import { Module } from "@nestjs/common";
import { TerminusModule } from "@nestjs/terminus";
import { TaskfleetModule } from "taskfleet-nestjs";

import { ArticlesModule } from "./articles.module.js";
import { HealthController } from "./health.controller.js";
import { SETTINGS, SettingsModule } from "./settings.module.js";
import type { AppSettings } from "./settings.js";

@Module({
  imports: [
    SettingsModule,
    TaskfleetModule.forRootAsync({
      inject: [SETTINGS],
      useFactory: (settings: AppSettings) => ({
        redisUrl: settings.redisUrl,
        workers: settings.worker,
        worker: { concurrency: settings.concurrency, drainTimeoutMs: settings.drainTimeoutMs },
      }),
    }),
    TerminusModule,
    ArticlesModule,
  ],
  controllers: [HealthController],
})
export class AppModule {}
