// The Node producer and the Python client on one queue: a real `taskfleet worker` process
// runs what Node enqueues, and Node reads and waits on what a Python producer enqueues.
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import { Queue } from "../src/index.js";
import { REPOSITORY, needsPython, python } from "./python.js";
import { RedisServer } from "./redis.js";

const FIXTURES = join(REPOSITORY, "clients/node/test/fixtures");
const QUEUE = "cross";

describe("with the Python client on one queue", needsPython, () => {
  const server = new RedisServer();
  const runtime = mkdtempSync(join(tmpdir(), "taskfleet-node-worker-"));
  let worker: ChildProcess | undefined;
  let output = "";
  let queue: Queue;

  before(async () => {
    await server.start();
    queue = new Queue(QUEUE, { redisUrl: server.url });
    const env = Object.fromEntries(
      Object.entries(process.env).filter(([k]) => !k.startsWith("TASKFLEET_")),
    );
    worker = spawn(
      join(REPOSITORY, ".venv/bin/taskfleet"),
      [
        "worker",
        "--queue",
        QUEUE,
        "--redis-url",
        server.url,
        "--app-dir",
        FIXTURES,
        "--handler",
        "cross_handlers:default",
        "--handler",
        "shout=cross_handlers:shout",
        "--concurrency",
        "4",
        "--pod",
        "python-worker",
        "--runtime-dir",
        runtime,
        "--no-fire-schedules",
      ],
      { env: { ...env, PYTHONUNBUFFERED: "1" }, stdio: ["ignore", "pipe", "pipe"] },
    );
    worker.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString()));
    worker.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString()));
  });

  after(async () => {
    await queue.close();
    if (worker !== undefined && worker.exitCode === null) {
      const exited = new Promise((resolve) => worker?.once("exit", resolve));
      worker.kill("SIGKILL");
      await exited;
    }
    await server.stop();
    rmSync(runtime, { recursive: true, force: true });
  });

  it("runs what Node enqueues on a Python worker: plain, named, prioritised, delayed; an unknown name dead", async () => {
    const ids = await queue.enqueueMany([
      ...Array.from({ length: 10 }, (_, i) => ({ payload: { i, text: "é😀" }, priority: i % 3 })),
      { payload: { text: "hello" }, name: "shout", taskId: "named" },
      { payload: { later: true }, delayMs: 300, taskId: "delayed" },
      { payload: {}, name: "nobody-serves-this", taskId: "orphan" },
    ]);
    const done = await queue.wait(ids, { timeoutMs: 60_000 });
    for (let i = 0; i < 10; i++) {
      const task = done[ids[i] ?? ""];
      assert.equal(task?.state, "done", output);
      assert.deepEqual(task.result, { seen: { i, text: "é😀" } });
    }
    assert.deepEqual(done.named?.result, { text: "HELLO" });
    assert.equal(done.named.name, "shout");
    assert.deepEqual(done.delayed?.result, { seen: { later: true } });
    assert.equal(done.orphan?.state, "dead");
    assert.equal(done.orphan.reason, "unknown task");
    const workers = await queue.workers();
    assert.deepEqual(
      workers.map((w) => [w.pod, w.alive, w.level]),
      [["python-worker", true, 3]],
    ); // level 3: its record says what it serves
  });

  it("reads and waits on what a Python producer enqueues, and stores the same bytes for the same task", async () => {
    const ids = python<string[]>(
      "import json, sys\nfrom taskfleet import Queue\n" +
        "url = json.load(sys.stdin)\n" +
        `with Queue('${QUEUE}', url) as q:\n` +
        "    ids = [q.enqueue({'b': [1, 2.5], 'a': 'é'}, task_id='from-python', priority=3, timeout=30, max_attempts=2, cost=4),\n" +
        "           q.enqueue({'text': 'py'}, task='shout')]\n" +
        "print(json.dumps(ids))",
      server.url,
    );
    const done = await queue.wait(ids, { timeoutMs: 60_000 });
    const first = done["from-python"];
    assert.equal(first?.state, "done", output);
    assert.deepEqual(first.payload, { b: [1, 2.5], a: "é" });
    assert.deepEqual(first.result, { seen: { b: [1, 2.5], a: "é" } });
    assert.equal(first.priority, 3);
    assert.equal(first.timeoutMs, 30_000);
    assert.equal(first.maxAttempts, 2);
    assert.equal(first.cost, 4);
    assert.deepEqual(done[ids[1] ?? ""]?.result, { text: "PY" });
    // the same id, payload and options from Node: the same task (nothing changes)
    const again = await queue.enqueueResult(
      { a: "é", b: [1, 2.5] },
      { taskId: "from-python", priority: 3, timeoutMs: 30_000, maxAttempts: 2, cost: 4 },
    );
    assert.deepEqual(again, { taskId: "from-python", created: false });
    // and the other way round: Python enqueueing Node's task again changes nothing
    await queue.enqueue(
      { z: 1, y: [true, null] },
      { taskId: "from-node", name: "shout", timeoutMs: 2500 },
    );
    const created = python<boolean>(
      "import json, sys\nfrom taskfleet import Queue\n" +
        `with Queue('${QUEUE}', json.load(sys.stdin)) as q:\n` +
        "    print(json.dumps(q.enqueue_result({'y': [True, None], 'z': 1}, task_id='from-node', task='shout', timeout=2.5).created))",
      server.url,
    );
    assert.equal(created, false);
  });

  it("leaves the Python worker to drain and exit 0 on SIGTERM", async () => {
    assert.ok(worker !== undefined);
    const exited = new Promise<number | null>((resolve) =>
      worker?.once("exit", (code) => {
        resolve(code);
      }),
    );
    worker.kill("SIGTERM");
    assert.equal(await exited, 0, output);
  });
});
