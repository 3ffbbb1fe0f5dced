// The module in a real Nest application against a real redis-server: 500 tasks through a
// processor whose handlers use injected providers; SIGTERM to the application's process
// drains and exits 0 with nothing lost; the health indicator; what is missing or wrong
// fails the bootstrap with one line.
import "reflect-metadata";

import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, afterEach, before, beforeEach, describe, it } from "node:test";
import { fileURLToPath } from "node:url";

import { Module, type INestApplicationContext } from "@nestjs/common";
import { NestFactory } from "@nestjs/core";
import { type Queue, configureLogging } from "taskfleet";

import {
  Handle,
  Processor,
  TaskfleetHealthIndicator,
  TaskfleetModule,
  TaskfleetWorkers,
  getQueueToken,
} from "../src/index.js";
import { AsyncRootModule, Counter, ImagesModule, QUEUE, rootModule } from "./fixtures/app.js";
import { RedisServer, freePort, until } from "./redis.js";

const MAIN = fileURLToPath(new URL("./fixtures/main.js", import.meta.url));

/** The application as its own process; its output kept for the assertion messages. */
class AppProcess {
  output = "";
  readonly child: ChildProcess;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;

  constructor(env: Record<string, string>) {
    this.child = spawn(process.execPath, [MAIN], {
      env: { ...process.env, ...env },
      stdio: ["ignore", "pipe", "pipe"],
    });
    this.child.stdout?.on("data", (chunk: Buffer) => (this.output += chunk.toString()));
    this.child.stderr?.on("data", (chunk: Buffer) => (this.output += chunk.toString()));
    this.exited = new Promise((resolve) =>
      this.child.once("exit", (code, signal) => {
        resolve({ code, signal });
      }),
    );
  }

  async saw(pattern: RegExp): Promise<void> {
    await until(
      `the application printed ${String(pattern)}:\n${this.output}`,
      () => {
        if (this.child.exitCode !== null)
          throw new Error(`the application exited ${this.child.exitCode}:\n${this.output}`);
        return pattern.test(this.output);
      },
      20_000,
    );
  }

  async exit(deadlineMs = 20_000): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<"late">(
      (resolve) =>
        (timer = setTimeout(() => {
          resolve("late");
        }, deadlineMs)),
    );
    const result = await Promise.race([this.exited, late]);
    clearTimeout(timer);
    if (result === "late") {
      this.child.kill("SIGKILL");
      throw new Error(`the application did not exit within ${deadlineMs} ms:\n${this.output}`);
    }
    return result;
  }

  stop(): void {
    if (this.child.exitCode === null && this.child.signalCode === null) this.child.kill("SIGKILL");
  }
}

async function context(module: new () => unknown): Promise<INestApplicationContext> {
  return NestFactory.createApplicationContext(module, { logger: false, abortOnError: false });
}

describe("the NestJS module", () => {
  const server = new RedisServer();
  let dir: string;
  const apps: INestApplicationContext[] = [];
  const processes: AppProcess[] = [];

  before(async () => {
    configureLogging("kv", "warning");
    await server.start();
    process.env.TASKFLEET_REDIS_URL = server.url;
  });
  after(async () => {
    await server.stop();
  });
  beforeEach(async () => {
    await server.flush();
    dir = mkdtempSync(join(tmpdir(), "taskfleet-nestjs-"));
  });
  afterEach(async () => {
    for (const p of processes.splice(0)) p.stop();
    await Promise.all(apps.splice(0).map((app) => app.close()));
    rmSync(dir, { recursive: true, force: true });
  });

  it("runs 500 tasks through a processor whose handlers use injected providers, with options from forRootAsync", async () => {
    const app = await context(AsyncRootModule);
    apps.push(app);
    const queue = app.get<Queue>(getQueueToken(QUEUE));
    const ids = await queue.enqueueMany(
      Array.from({ length: 500 }, (_, n) => ({ payload: { n } })),
    );
    const done = await queue.wait(ids, { timeoutMs: 60_000 });
    ids.forEach((id, n) => {
      const task = done[id];
      assert.equal(task?.state, "done", `task ${n}: ${JSON.stringify(task)}`);
      assert.deepEqual(task.result, { double: n * 2, label: "counted", runs: 1, queue: QUEUE });
    });
    const counter = app.get(Counter);
    assert.equal(counter.seen.size, 500);
    assert.ok(
      [...counter.seen.values()].every((runs) => runs === 1),
      "a task ran twice",
    );
    const [worker] = app.get(TaskfleetWorkers).workers;
    assert.equal(
      worker?.worker.settings.concurrency,
      8,
      "the worker options came from the factory",
    );

    const health = await app.get(TaskfleetHealthIndicator).isHealthy("queues");
    assert.equal(health.queues.status, "up", JSON.stringify(health));
    assert.equal(health.queues.queues[QUEUE]?.worker, "running");
    assert.equal(health.queues.queues[QUEUE].workers, 1);

    apps.pop();
    await app.close();
    assert.equal(worker.status, "exited");
    assert.equal(worker.exitCode, 0);
  });

  it("a Nest application process working through 500 tasks drains on SIGTERM and exits 0; a second one finishes what it handed back, none lost or run twice", async () => {
    const log = join(dir, "runs.log");
    const first = new AppProcess({ TASKFLEET_REDIS_URL: server.url, LOG: log });
    processes.push(first);
    await first.saw(/app ready/);
    const producer = await context(rootModule({ redisUrl: server.url, workers: false }));
    apps.push(producer);
    const queue = producer.get<Queue>(getQueueToken(QUEUE));
    // 100 ms each, and every hundredth one a minute: the drain's 1 s lets the short ones
    // it holds finish and hands the long ones back.
    const ids = await queue.enqueueMany(
      Array.from({ length: 500 }, (_, n) => ({
        payload: { ms: n % 100 === 50 ? 60_000 : 100 },
        name: "sleep",
      })),
    );
    const long = ids.filter((_, n) => n % 100 === 50);
    await until(
      "the application has finished 100 tasks and holds a long one",
      async () => {
        const stats = await queue.stats();
        const held = await Promise.all(long.map(async (id) => (await queue.get(id))?.state));
        return stats.done >= 100 && held.includes("running");
      },
      30_000,
    );

    first.child.kill("SIGTERM");
    assert.deepEqual(await first.exit(), { code: 0, signal: null }, first.output);
    assert.match(first.output, /event=drain_started/);
    const states = new Map<string, number>();
    for (const id of ids) {
      const state = (await queue.get(id))?.state ?? "missing";
      states.set(state, (states.get(state) ?? 0) + 1);
    }
    const doneBefore = states.get("done") ?? 0;
    const pendingBefore = states.get("pending") ?? 0;
    assert.equal(
      doneBefore + pendingBefore,
      500,
      `every task done or pending: ${JSON.stringify([...states])}`,
    );
    assert.ok(pendingBefore > 0, "the SIGTERM came while tasks were left");
    assert.ok(doneBefore >= 100);
    const handedBack = await Promise.all(long.map(async (id) => (await queue.get(id))?.attempts));
    assert.ok(
      long.every((_, i) => handedBack[i] === 0),
      `a hand-back is not an attempt: ${JSON.stringify(handedBack)}`,
    );
    assert.equal((await queue.stats()).running, 0);

    // a second application finishes the rest; each task ran to its end exactly once
    const second = new AppProcess({
      TASKFLEET_REDIS_URL: server.url,
      LOG: log,
      SLEEP_CAP_MS: "10",
    });
    processes.push(second);
    const done = await queue.wait(ids, { timeoutMs: 40_000 });
    for (const id of ids) assert.equal(done[id]?.state, "done", second.output);
    const finished = readFileSync(log, "utf8").trim().split("\n").sort();
    assert.deepEqual(finished, [...ids].sort());
    second.child.kill("SIGTERM");
    assert.deepEqual(await second.exit(), { code: 0, signal: null }, second.output);
  });

  it("a second SIGTERM during the drain hands back at once: exit 0 well before the drain timeout", async () => {
    const app = new AppProcess({ TASKFLEET_REDIS_URL: server.url, DRAIN_TIMEOUT: "60" });
    processes.push(app);
    await app.saw(/app ready/);
    const producer = await context(rootModule({ redisUrl: server.url, workers: false }));
    apps.push(producer);
    const queue = producer.get<Queue>(getQueueToken(QUEUE));
    const long = await queue.enqueueMany(
      Array.from({ length: 4 }, () => ({ payload: { ms: 60_000 }, name: "sleep" })),
    );
    await until(
      "the application holds the 4 tasks",
      async () => (await queue.stats()).running === 4,
    );

    app.child.kill("SIGTERM");
    await app.saw(/event=drain_started/);
    const second = Date.now();
    app.child.kill("SIGTERM");
    assert.deepEqual(await app.exit(15_000), { code: 0, signal: null }, app.output);
    assert.ok(Date.now() - second < 15_000);
    assert.match(app.output, /event=drain_forced/);
    for (const id of long)
      assert.equal((await queue.get(id))?.state, "pending", `task ${id} handed back`);
  });

  it("with workers: false, the application only enqueues: no worker runs and the tasks wait", async () => {
    const app = await context(rootModule({ redisUrl: server.url, workers: false }));
    apps.push(app);
    const queue = app.get<Queue>(getQueueToken(QUEUE));
    const id = await queue.enqueue({ n: 1 });
    assert.deepEqual(app.get(TaskfleetWorkers).workers, []);
    assert.equal((await queue.stats()).workers, 0);
    assert.equal((await queue.get(id))?.state, "pending");
  });

  it("the health indicator says down, naming the queue, when its Redis does not answer", async () => {
    const closed = `redis://127.0.0.1:${await freePort()}/0`;
    const app = await context(rootModule({ redisUrl: closed, workers: false }));
    apps.push(app);
    const health = await app.get(TaskfleetHealthIndicator).isHealthy("taskfleet", 500);
    assert.equal(health.taskfleet.status, "down");
    assert.equal(health.taskfleet.queues[QUEUE]?.redis, "down");
  });

  it("a processor without a @Handle method fails the bootstrap with one line", async () => {
    @Processor("empty")
    class EmptyProcessor {
      work(): string {
        return "never run";
      }
    }
    @Module({
      imports: [TaskfleetModule.forRoot({ redisUrl: server.url })],
      providers: [EmptyProcessor],
    })
    class Root {}
    await assert.rejects(context(Root), /processor EmptyProcessor has no @Handle\(\) method/);
  });

  it("two processors of one queue fail the bootstrap, naming both", async () => {
    @Processor(QUEUE)
    class Other {
      @Handle()
      run(): string {
        return "other";
      }
    }
    @Module({
      imports: [TaskfleetModule.forRoot({ redisUrl: server.url }), ImagesModule],
      providers: [Other],
    })
    class Root {}
    await assert.rejects(
      context(Root),
      /queue "images" has two processors, ImagesProcessor and Other/,
    );
  });

  it("a processor's bad worker option fails the bootstrap with the worker's one line", async () => {
    @Processor("bad", { concurrency: 0 })
    class BadProcessor {
      @Handle()
      run(): string {
        return "never";
      }
    }
    @Module({
      imports: [TaskfleetModule.forRoot({ redisUrl: server.url })],
      providers: [BadProcessor],
    })
    class Root {}
    await assert.rejects(context(Root), /concurrency must be within 1\.\./);
  });

  it("registerQueue without forRoot fails to build the application", async () => {
    @Module({ imports: [TaskfleetModule.registerQueue({ name: QUEUE })] })
    class Root {}
    await assert.rejects(context(Root), /QueueRegistry/);
  });

  it("forRoot refuses an option it does not know in one line", () => {
    assert.throws(
      () => TaskfleetModule.forRoot({ redisUrl: server.url, attempts: 3 } as never),
      /TaskfleetModule options: unknown option "attempts"/,
    );
    assert.ok(!existsSync(join(dir, "runs.log")));
  });
});
