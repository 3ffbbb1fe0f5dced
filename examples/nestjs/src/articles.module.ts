/**
 * The articles: the API that enqueues and reads them (controller and service, with the
 * queue injected) and the processor that writes them (its handler a provider's method,
 * with the provider's client injected).
 */

import { Module } from "@nestjs/common";
import { TaskfleetModule } from "taskfleet-nestjs";

import { ArticlesController } from "./articles.controller.js";
import { ArticlesProcessor } from "./articles.processor.js";
import { ArticlesService } from "./articles.service.js";
import { LlmClient } from "./llm.client.js";
import { ARTICLES_QUEUE } from "./settings.js";

@Module({
  imports: [TaskfleetModule.registerQueue({ name: ARTICLES_QUEUE })],
  controllers: [ArticlesController],
  providers: [ArticlesService, LlmClient, ArticlesProcessor],
})
export class ArticlesModule {}
