// The health indicator in a real Nest HTTP application with @nestjs/terminus: GET /health
// answers 200 while the processor's worker runs and Redis answers, 503 naming the queue
// once that redis-server is stopped, and 200 again once it is back on its port.
import "reflect-metadata";

import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { Controller, Get, type INestApplication, Module } from "@nestjs/common";
import { NestFactory } from "@nestjs/core";
import { HealthCheck, HealthCheckService, TerminusModule } from "@nestjs/terminus";
import { type Queue, configureLogging } from "taskfleet";

import {
  type QueueHealth,
  TaskfleetHealthIndicator,
  TaskfleetModule,
  getQueueToken,
} from "../src/index.js";
import { ImagesModule, QUEUE } from "./fixtures/app.js";
import { RedisServer, until } from "./redis.js";

/** A terminus health check's body, as the tests read it. */
interface HealthBody {
  status: string;
  info?: Record<string, { status: string; queues: Record<string, QueueHealth> }>;
  error?: Record<string, { status: string; queues: Record<string, QueueHealth> }>;
}

@Controller("health")
class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly taskfleet: TaskfleetHealthIndicator,
  ) {}

  @Get()
  @HealthCheck()
  check(): ReturnType<HealthCheckService["check"]> {
    return this.health.check([() => this.taskfleet.isHealthy("taskfleet", 1000)]);
  }
}

describe("the health indicator with @nestjs/terminus", () => {
  const server = new RedisServer();
  let app: INestApplication | undefined;
  let url = "";

  async function health(): Promise<{ status: number; body: HealthBody }> {
    // no keep-alive: an idle socket would hold the test process open after the suite
    const response = await fetch(`${url}/health`, { headers: { connection: "close" } });
    return { status: response.status, body: (await response.json()) as HealthBody };
  }

  before(async () => {
    configureLogging("kv", "error");
    await server.start();
    @Module({
      imports: [
        TaskfleetModule.forRoot({
          redisUrl: server.url,
          worker: { heartbeatIntervalMs: 300, fireSchedules: false, drainTimeoutMs: 1000 },
        }),
        TerminusModule,
        ImagesModule,
      ],
      controllers: [HealthController],
    })
    class HealthRoot {}
    app = await NestFactory.create(HealthRoot, { logger: false, abortOnError: false });
    await app.listen(0, "127.0.0.1");
    url = await app.getUrl();
  });

  after(async () => {
    await app?.close();
    await server.stop();
  });

  it("answers 200 while the worker runs and Redis answers, with the queue's figures", async () => {
    const queue = app?.get<Queue>(getQueueToken(QUEUE));
    assert.ok(queue);
    const id = await queue.enqueue({ n: 21 });
    assert.equal((await queue.wait([id], { timeoutMs: 10_000 }))[id]?.state, "done");
    await until("the worker's heartbeat is seen", async () => (await queue.stats()).workers === 1);
    const { status, body } = await health();
    assert.equal(status, 200, JSON.stringify(body));
    assert.equal(body.status, "ok");
    assert.deepEqual(body.info?.taskfleet?.queues[QUEUE], {
      redis: "up",
      worker: "running",
      pending: 0,
      running: 0,
      workers: 1,
    });
  });

  it("answers 503 naming the queue whose Redis is stopped, and 200 once it answers again", async () => {
    const port = server.port;
    await server.halt();
    const { status, body } = await health();
    assert.equal(status, 503, JSON.stringify(body));
    assert.equal(body.status, "error");
    const down = body.error?.taskfleet;
    assert.equal(down?.status, "down", JSON.stringify(body));
    assert.equal(down.queues[QUEUE]?.redis, "down");
    assert.equal(down.queues[QUEUE].worker, "running");

    await server.start(port);
    await until(
      "GET /health answers 200 again",
      async () => (await health()).status === 200,
      15_000,
    );
  });
});
