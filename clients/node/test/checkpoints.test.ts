// Checkpoints in the Node worker: a run stores its state (`task.checkpoint`), the next
// attempt reads it (`task.restored`) after a SIGKILL; a run that lost its lease has its
// checkpoint refused; the state goes when the task finishes, unless kept.
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, afterEach, before, beforeEach, describe, it } from "node:test";

import { Queue } from "../src/index.js";
import { RedisServer, until } from "./redis.js";
import { WorkerProcess } from "./workers.js";

describe("checkpoints of the Node worker", () => {
  const server = new RedisServer();
  let dir: string;
  let queue: Queue;
  const started: WorkerProcess[] = [];

  const worker = (name: string): WorkerProcess => {
    const w = WorkerProcess.node([
      "--queue",
      "jobs",
      "--redis-url",
      server.url,
      "--pod",
      name,
      "--runtime-dir",
      join(dir, `rt-${name}`),
      "--heartbeat-interval",
      "0.2",
      "--no-fire-schedules",
      "--handler",
      "./checkpoint_handlers.mjs:sixSteps",
    ]);
    started.push(w);
    return w;
  };
  const log = (): string => join(dir, "steps.log");
  const gate = (): string => join(dir, "gate");
  const steps = (): string[] =>
    existsSync(log()) ? readFileSync(log(), "utf8").split("\n").filter(Boolean) : [];
  const checkpointed = async (id: string, step: number): Promise<boolean> => {
    const task = await queue.get(id);
    return (task?.checkpoint as { step?: number } | null)?.step === step;
  };
  const state = async (id: string): Promise<string | undefined> => (await queue.get(id))?.state;

  before(async () => {
    await server.start();
  });
  after(async () => {
    await server.stop();
  });
  beforeEach(async () => {
    await server.flush();
    dir = mkdtempSync(join(tmpdir(), "taskfleet-node-checkpoint-"));
    queue = new Queue("jobs", { redisUrl: server.url });
  });
  afterEach(async () => {
    await Promise.all(started.splice(0).map((w) => w.stop()));
    await queue.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("starts a SIGKILLed worker's task again after its last checkpoint, and drops the checkpoint at the end", async () => {
    const a = worker("a");
    const id = await queue.enqueue({ holdAfter: 3, log: log(), gate: gate() });
    await until("step 3 checkpointed", () => checkpointed(id, 3), 20_000);
    a.kill("SIGKILL");
    assert.equal(await a.exit(), null);
    const again = worker("a"); // the pod's next incarnation takes back what the killed one held
    await until("done", async () => (await state(id)) === "done", 20_000);
    assert.deepEqual(steps(), ["1:1", "1:2", "1:3", "2:4", "2:5", "2:6"]);
    const task = await queue.get(id);
    assert.deepEqual(task?.result, { steps: 6, restored: { step: 3 } });
    assert.equal(task.checkpoint, null);
    assert.equal(await queue.client.hexists(queue.keys.item("task", id), "checkpoint"), 0);
    again.kill("SIGTERM");
    assert.equal(await again.exit(), 0, again.output);
  });

  it("refuses the checkpoint of a run that lost its lease", async () => {
    await queue.client.hset(queue.keys.key("config"), "lease_ttl_s", "1");
    const a = worker("a");
    const id = await queue.enqueue({ holdAfter: 2, log: log(), gate: gate() });
    await until("step 2 checkpointed", () => checkpointed(id, 2), 20_000);
    a.kill("SIGSTOP"); // its lease runs out; another pod takes the task back
    const b = worker("b");
    try {
      await until("b finishes it", async () => (await state(id)) === "done", 20_000);
    } finally {
      a.kill("SIGCONT");
    }
    writeFileSync(gate(), "open"); // the first run goes on to step 3: refused
    await until("the refusal", () => steps().includes("refused 1:3"), 10_000);
    assert.deepEqual(steps(), ["1:1", "1:2", "2:3", "2:4", "2:5", "2:6", "1:3", "refused 1:3"]);
    const task = await queue.get(id);
    assert.deepEqual([task?.state, task?.attempts, task?.checkpoint], ["done", 2, null]);
    for (const w of [a, b]) w.kill("SIGTERM");
    assert.equal(await a.exit(), 0, a.output);
    assert.equal(await b.exit(), 0, b.output);
  });

  it("keeps a checkpoint asked to be kept with the finished task", async () => {
    const a = worker("a");
    const id = await queue.enqueue({ keep: true, log: log(), gate: gate() });
    await until("done", async () => (await state(id)) === "done", 20_000);
    const task = await queue.get(id);
    assert.deepEqual([task?.result, task?.checkpoint], [{ steps: 6, restored: null }, { step: 6 }]);
    a.kill("SIGTERM");
    assert.equal(await a.exit(), 0, a.output);
  });
});
