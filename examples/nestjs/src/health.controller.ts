/**
 * `GET /health` with `@nestjs/terminus`: 200 while the queue's Redis answers and this
 * process's worker runs, 503 (naming what failed) otherwise. A readiness probe's target.
 */

import { Controller, Get } from "@nestjs/common";
import { HealthCheck, HealthCheckService, type HealthCheckResult } from "@nestjs/terminus";
import { TaskfleetHealthIndicator } from "taskfleet-nestjs";

@Controller("health")
export class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly taskfleet: TaskfleetHealthIndicator,
  ) {}

  @Get()
  @HealthCheck()
  async check(): Promise<HealthCheckResult> {
    return this.health.check([() => this.taskfleet.isHealthy("taskfleet")]);
  }
}
