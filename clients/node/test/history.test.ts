// Every attempt of a task kept with it, read by the Node client: the Node worker's
// failures with their stacks (naming the handler's file and line), and a SIGKILLed
// worker's attempt told as lost with its pod.
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, afterEach, before, beforeEach, describe, it } from "node:test";

import { Queue } from "../src/index.js";
import { RedisServer, until } from "./redis.js";
import { FIXTURES, WorkerProcess, runs } from "./workers.js";

describe("a task's attempt history", () => {
  const server = new RedisServer();
  let dir: string;
  let queue: Queue;
  const started: WorkerProcess[] = [];

  const worker = (pod: string, handler: string): WorkerProcess => {
    const w = WorkerProcess.node([
      "--queue",
      "jobs",
      "--redis-url",
      server.url,
      "--pod",
      pod,
      "--runtime-dir",
      join(dir, `rt-${pod}`),
      "--heartbeat-interval",
      "0.3",
      "--no-fire-schedules",
      "--handler",
      `./worker_handlers.mjs:${handler}`,
    ]);
    started.push(w);
    return w;
  };

  before(async () => {
    await server.start();
  });
  after(async () => {
    await server.stop();
  });
  beforeEach(async () => {
    await server.flush();
    dir = mkdtempSync(join(tmpdir(), "taskfleet-node-history-"));
    queue = new Queue("jobs", { redisUrl: server.url });
    await queue.configure({ backoffBaseMs: 0, backoffMaxMs: 0, leaseTtlMs: 1000 });
  });
  afterEach(async () => {
    await Promise.all(started.splice(0).map((w) => w.stop()));
    await queue.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("shows a task that failed twice then succeeded as three attempts with pods, times, outcomes, errors and stacks", async () => {
    const id = await queue.enqueue({}, { maxAttempts: 5 });
    worker("pod-n", "failTwice");
    await until("the task is done", async () => (await queue.get(id))?.state === "done", 20_000);
    const task = await queue.get(id);
    assert.ok(task !== null);
    assert.deepEqual(
      task.history.map((a) => [a.attempt, a.pod, a.outcome]),
      [
        [1, "pod-n", "failed"],
        [2, "pod-n", "failed"],
        [3, "pod-n", "done"],
      ],
    );
    for (const a of task.history) {
      assert.ok(a.startedAt !== null && a.endedAt !== null);
      assert.ok(a.startedAt.getTime() <= a.endedAt.getTime());
    }
    assert.match(task.history[0]?.error ?? "", /^TypeError: Cannot read properties of undefined/);
    assert.equal(task.history[2]?.error, null);
    const source = readFileSync(join(FIXTURES, "worker_handlers.mjs"), "utf8").split("\n");
    const line = source.findIndex((l) => l.includes("payload.missing.field")) + 1;
    for (const a of task.history.slice(0, 2)) {
      assert.ok(a.traceback !== null && a.traceback.length <= 4096);
      assert.match(a.traceback, new RegExp(`worker_handlers\\.mjs:${String(line)}:\\d+`));
    }
    assert.equal(task.traceback, task.history[1]?.traceback);
  });

  it("shows an attempt taken back from a SIGKILLed worker as lost, with that worker's pod", async () => {
    const log = join(dir, "runs.log");
    const a = worker("pod-doomed", "slow");
    await a.saw(/event=worker_started/);
    const id = await queue.enqueue({ ms: 400, log });
    await until("the first attempt starts", () => runs(log).length === 1);
    a.kill("SIGKILL");
    await a.exit();
    worker("pod-heir", "slow");
    await until("the task is done", async () => (await queue.get(id))?.state === "done", 20_000);
    const task = await queue.get(id);
    assert.deepEqual(
      task?.history.map((h) => [h.attempt, h.pod, h.outcome]),
      [
        [1, "pod-doomed", "lost"],
        [2, "pod-heir", "done"],
      ],
    );
  });
});
