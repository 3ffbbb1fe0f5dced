// The Node worker with Python on one queue: a Python producer's tasks run by a Node
// worker, Python's `taskfleet drain` draining a Node worker, and a mixed fleet (one
// Python worker process, Node worker processes) doing every task exactly once through a
// drain and a SIGKILL.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, afterEach, before, beforeEach, describe, it } from "node:test";

import { Queue } from "../src/index.js";
import { REPOSITORY, needsPython, python } from "./python.js";
import { RedisServer, until } from "./redis.js";
import { FIXTURES, WorkerProcess, cleanEnv, runs } from "./workers.js";

const TASKFLEET = join(REPOSITORY, ".venv/bin/taskfleet");

describe("the Node worker with Python on one queue", needsPython, () => {
  const server = new RedisServer();
  let dir: string;
  let queue: Queue;
  const started: WorkerProcess[] = [];

  const nodeWorker = (name: string, handler: string, extra: string[] = []): WorkerProcess => {
    const w = WorkerProcess.node([
      "--queue",
      "mixed",
      "--redis-url",
      server.url,
      "--pod",
      name,
      "--runtime-dir",
      join(dir, `rt-${name}`),
      "--heartbeat-interval",
      "0.3",
      "--no-fire-schedules",
      "--handler",
      handler,
      ...extra,
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
    dir = mkdtempSync(join(tmpdir(), "taskfleet-node-cross-"));
    queue = new Queue("mixed", { redisUrl: server.url });
  });
  afterEach(async () => {
    await Promise.all(started.splice(0).map((w) => w.stop()));
    await queue.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("runs a Python producer's tasks, named or not, and Python's `taskfleet drain` drains it", async () => {
    const w = nodeWorker("node-1", "./worker_handlers.mjs:echo", [
      "--handler",
      "upper=./worker_handlers.cjs:upper",
      "--concurrency",
      "4",
    ]);
    await w.saw(/event=worker_started/);
    const results = python<Record<string, unknown>>(
      "import json, sys\nfrom taskfleet import Queue\n" +
        "url = json.load(sys.stdin)\n" +
        "with Queue('mixed', url) as q:\n" +
        "    ids = [q.enqueue({'n': i, 'text': 'é'}, priority=i % 3) for i in range(5)]\n" +
        "    ids.append(q.enqueue({'text': 'py'}, task='upper', task_id='named'))\n" +
        "    done = q.wait(ids, timeout=30)\n" +
        "    print(json.dumps({t.id: [t.state.value, t.result] for t in done.values()}))",
      server.url,
    );
    assert.deepEqual(results.named, ["done", { text: "PY" }], w.output);
    assert.equal(Object.values(results).filter((r) => (r as [string])[0] === "done").length, 6);
    const drain = new WorkerProcess(
      TASKFLEET,
      ["drain", "--wait", "--timeout", "30", "--runtime-dir", join(dir, "rt-node-1")],
      cleanEnv(),
    );
    assert.equal(await drain.exit(), 0, drain.output);
    assert.equal(await w.exit(), 0, w.output);
  });

  it("shares a queue with a Python worker: every task done exactly once through a drain and a SIGKILL", async () => {
    const log = join(dir, "runs.log");
    await queue.client.hset(queue.keys.key("config"), "lease_ttl_s", "1");
    const py = new WorkerProcess(
      TASKFLEET,
      [
        "worker",
        "--queue",
        "mixed",
        "--redis-url",
        server.url,
        "--app-dir",
        FIXTURES,
        "--handler",
        "worker_handlers:work",
        "--pod",
        "python-1",
        "--concurrency",
        "2",
        "--heartbeat-interval",
        "0.3",
        "--runtime-dir",
        join(dir, "rt-python-1"),
        "--no-fire-schedules",
      ],
      cleanEnv({ PYTHONUNBUFFERED: "1" }),
    );
    started.push(py);
    const first = nodeWorker("node-1", "./worker_handlers.mjs:work", ["--concurrency", "2"]);
    const killed = nodeWorker("node-2", "./worker_handlers.mjs:work", ["--concurrency", "2"]);
    await Promise.all([
      py.saw(/event=worker_started/),
      first.saw(/event=worker_started/),
      killed.saw(/event=worker_started/),
    ]);
    const ids = await queue.enqueueMany(
      Array.from({ length: 120 }, (_, i) => ({ payload: { i, ms: 20, log }, taskId: `t${i}` })),
    );
    await until("a third is done", () => runs(log).length >= 40, 30_000);
    first.kill("SIGTERM"); // drains: what it holds finishes, nothing is lost
    killed.kill("SIGKILL"); // what it holds comes back when the leases expire
    const replacement = nodeWorker("node-3", "./worker_handlers.mjs:work", ["--concurrency", "2"]);
    assert.equal(await first.exit(), 0, first.output);
    const done = await queue.wait(ids, { timeoutMs: 60_000 });
    for (const id of ids)
      assert.equal(done[id]?.state, "done", `${id}\n${py.output}\n${replacement.output}`);
    const stats = await queue.stats();
    assert.equal(stats.completed, ids.length); // one stored completion each
    const by = new Set(Object.values(done).map((t) => (t.result as { by: string }).by));
    assert.deepEqual([...by].sort(), ["node", "python"]);
    // every run that ended without being taken back is the one stored
    const ends = runs(log).filter(([what]) => what === "end");
    const counted = new Map<string, number>();
    for (const [, id] of ends) counted.set(id, (counted.get(id) ?? 0) + 1);
    for (const id of ids) assert.ok((counted.get(id) ?? 0) >= 1, id);
    // a SIGTERM before node has loaded the command would kill it, not drain it: on a busy
    // machine the replacement may still be starting when the tasks are all done
    await replacement.saw(/event=worker_started/);
    for (const w of [py, replacement]) w.kill("SIGTERM");
    assert.equal(await py.exit(), 0, py.output);
    assert.equal(await replacement.exit(), 0, replacement.output);
  });
});
