/** The settings as a provider: read from the environment once, injected where needed. */

import { Global, Module } from "@nestjs/common";

import { appSettings } from "./settings.js";

export const SETTINGS = Symbol("settings");

@Global()
@Module({
  providers: [{ provide: SETTINGS, useFactory: appSettings }],
  exports: [SETTINGS],
})
export class SettingsModule {}
