// Following a task: `for await (const t of q.follow(id))` yields the task at each change
// of its state or progress, woken by the script that changed it (no poll: the interval
// here is ten minutes), until it has finished; from a Node worker and from a Python one.
import assert from "node:assert/strict";
import { appendFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, afterEach, before, beforeEach, describe, it } from "node:test";

import { InvalidArgument, Queue, TaskNotFound, WaitTimeout } from "../src/index.js";
import { REPOSITORY, needsPython } from "./python.js";
import { RedisServer } from "./redis.js";
import { FIXTURES, WorkerProcess, cleanEnv } from "./workers.js";

/** Read a generator to its end. */
async function drain(items: AsyncGenerator): Promise<void> {
  for (let r = await items.next(); r.done !== true; r = await items.next());
}

describe("following a task", () => {
  const server = new RedisServer();
  let dir: string;
  let queue: Queue;
  const started: WorkerProcess[] = [];
  const common = (name: string): string[] => [
    "--queue",
    "jobs",
    "--redis-url",
    server.url,
    "--pod",
    name,
    "--runtime-dir",
    join(dir, `rt-${name}`),
    "--heartbeat-interval",
    "0.3",
    "--no-fire-schedules",
  ];

  before(async () => {
    await server.start();
  });
  after(async () => {
    await server.stop();
  });
  beforeEach(async () => {
    await server.flush();
    dir = mkdtempSync(join(tmpdir(), "taskfleet-node-follow-"));
    queue = new Queue("jobs", { redisUrl: server.url });
  });
  afterEach(async () => {
    await Promise.all(started.splice(0).map((w) => w.stop()));
    await queue.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Follow the task; let the handler go on once each step has been seen. */
  const followSteps = async (id: string, gate: string): Promise<[number[], unknown]> => {
    const steps: number[] = [];
    let last: unknown = null;
    for await (const t of queue.follow(id, { intervalMs: 600_000, timeoutMs: 30_000 })) {
      const done = (t.progress as { done?: number } | null)?.done;
      if (t.state === "running" && done !== undefined && !steps.includes(done)) {
        steps.push(done); // a report may come again: the same step
        appendFileSync(gate, `${String(done)}\n`);
      }
      last = t;
    }
    return [steps, last];
  };

  it("from a Node worker: every progress step, then the end", async () => {
    const gate = join(dir, "gate");
    const id = await queue.enqueue({ gate });
    started.push(
      WorkerProcess.node([...common("node-1"), "--handler", "./output_handlers.mjs:stepping"]),
    );
    const [steps, last] = await followSteps(id, gate);
    assert.deepEqual(steps, [1, 2, 3]);
    assert.equal((last as { state: string }).state, "done");
    assert.equal((last as { result: unknown }).result, "stepped");
  });

  it("from a Python worker: the same", needsPython, async () => {
    const gate = join(dir, "gate");
    const id = await queue.enqueue({ gate });
    started.push(
      new WorkerProcess(
        join(REPOSITORY, ".venv/bin/taskfleet"),
        [
          "worker",
          ...common("python-1"),
          "--app-dir",
          FIXTURES,
          "--handler",
          "output_handlers:stepping",
        ],
        cleanEnv({ PYTHONUNBUFFERED: "1" }),
      ),
    );
    const [steps, last] = await followSteps(id, gate);
    assert.deepEqual(steps, [1, 2, 3]);
    assert.equal((last as { state: string }).state, "done");
  });

  it("a finished task once; an unknown id, a timeout and bad options throw", async () => {
    const id = await queue.enqueue({});
    await queue.cancel(id);
    const seen = [];
    for await (const t of queue.follow(id)) seen.push(t.state);
    assert.deepEqual(seen, ["cancelled"]);
    await assert.rejects(async () => {
      await queue.follow("nobody").next();
    }, TaskNotFound);
    const waiting = await queue.enqueue({});
    await assert.rejects(async () => {
      await drain(queue.follow(waiting, { timeoutMs: 50 }));
    }, WaitTimeout);
    await assert.rejects(async () => {
      await queue.follow(waiting, { intervalMs: 1 }).next();
    }, InvalidArgument);
  });
});
