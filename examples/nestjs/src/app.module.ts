import { Module } from "@nestjs/common";

import { ArticlesController } from "./articles.controller.js";
import { ArticlesService, SETTINGS } from "./articles.service.js";
import { apiSettings } from "./settings.js";

@Module({
  controllers: [ArticlesController],
  providers: [{ provide: SETTINGS, useFactory: apiSettings }, ArticlesService],
})
export class AppModule {}
