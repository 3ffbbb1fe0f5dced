// Provider quotas (docs/quotas.md) shared across queues and languages, on a real
// redis-server: a Node worker's RateLimited with a quota pauses a Python worker's tasks
// that name it, in another queue, while that queue's other tasks run; a Node handler's
// settle charges what its call used; Python reads what Node configured.
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, beforeEach, describe, it } from "node:test";

import { InvalidArgument, Queue, Quota, RateLimited, Worker } from "../src/index.js";
import type { TaskContext } from "../src/worker/context.js";
import { REPOSITORY, needsPython, python } from "./python.js";
import { RedisServer } from "./redis.js";

const EST = { openai: { requests: 1, input_tokens: 300 } };

async function waitFor(check: () => Promise<boolean>, what: string, ms = 15_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe("provider quotas", () => {
  const server = new RedisServer();
  let dir = "";

  before(() => server.start());
  after(() => server.stop());
  beforeEach(async () => {
    await server.flush();
    dir = mkdtempSync(join(tmpdir(), "taskfleet-node-pq-"));
  });

  it("refuses bad limits and bad quotas with one line, storing nothing", async () => {
    const quota = new Quota("bad", { redisUrl: server.url });
    const queue = new Queue("jobs", { redisUrl: server.url });
    try {
      await assert.rejects(quota.configure({ limits: {} }), InvalidArgument);
      await assert.rejects(quota.configure({ limits: { Requests: 1 } }), /invalid quota unit/);
      assert.equal(await quota.get(), null);
      await assert.rejects(
        queue.enqueue({}, { quotas: { "open ai": { requests: 1 } } }),
        /invalid quota name/,
      );
      const many = Object.fromEntries(
        Array.from({ length: 9 }, (_, i) => [`q${i}`, { requests: 1 }]),
      );
      await assert.rejects(queue.enqueue({}, { quotas: many }), /at most 8/);
    } finally {
      await quota.close();
      await queue.close();
    }
  });

  it("settles what a Node handler's call used", async () => {
    const quota = new Quota("openai", { redisUrl: server.url });
    const queue = new Queue("qn", { redisUrl: server.url });
    await quota.configure({ limits: { input_tokens: 100_000 }, periodMs: 3_600_000 });
    const worker = new Worker("qn", {
      redisUrl: server.url,
      handler: async (_payload: Record<string, unknown>, task: TaskContext) => {
        await task.settle("openai", { input_tokens: 3412, output_tokens: 655 });
        return null;
      },
      pod: "node-pq",
      heartbeatIntervalMs: 300,
      runtimeDir: dir,
      fireSchedules: false,
    });
    const running = worker.run();
    try {
      const id = await queue.enqueue({}, { quotas: EST });
      const done = await queue.wait([id], { timeoutMs: 10_000 });
      assert.equal(done[id]?.state, "done", JSON.stringify(done[id]));
      const use = await quota.get();
      assert.deepEqual(use?.units, {
        input_tokens: { limit: 100_000, used: 3412 },
        output_tokens: { limit: 0, used: 655 },
        requests: { limit: 0, used: 1 },
      });
    } finally {
      worker.drain();
      assert.equal(await running, 0);
      await quota.close();
      await queue.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it(
    "pauses the quota for a Python worker's queue when a Node handler meets a 429; other tasks run",
    needsPython,
    async () => {
      const quota = new Quota("openai", { redisUrl: server.url });
      await quota.configure({ limits: { requests: 10_000 }, periodMs: 60_000 });
      const seen = python<{ limits: Record<string, number> }>(
        "import json,sys; from taskfleet import Quota\n" +
          "u = Quota('openai', redis_url=json.load(sys.stdin)).get()\n" +
          "print(json.dumps({'limits': {k: v.limit for k, v in u.units.items()}}))",
        server.url,
      );
      assert.deepEqual(seen.limits, { requests: 10_000 });
      const qn = new Queue("qn", { redisUrl: server.url });
      const qp = new Queue("qp", { redisUrl: server.url });
      const node = new Worker("qn", {
        redisUrl: server.url,
        handler: (payload: Record<string, unknown>) => {
          if (payload.limited === true) throw new RateLimited(30_000, "429", { quota: "openai" });
          return null;
        },
        pod: "node-pq",
        heartbeatIntervalMs: 300,
        runtimeDir: dir,
        fireSchedules: false,
      });
      const running = node.run();
      let py: ChildProcess | undefined;
      let output = "";
      try {
        const limited = await qn.enqueue({ limited: true }, { quotas: EST });
        await waitFor(async () => ((await quota.get())?.pausedUntilMs ?? 0) > 0, "the pause");
        assert.equal((await qn.get(limited))?.state, "delayed");
        py = spawn(
          join(REPOSITORY, ".venv/bin/taskfleet"),
          [
            "worker",
            "--queue",
            "qp",
            "--redis-url",
            server.url,
            "--app-dir",
            REPOSITORY,
            "--handler",
            "tests.workers.quota_handlers:call",
            "--pod",
            "python-pq",
            "--runtime-dir",
            join(dir, "py"),
            "--no-fire-schedules",
          ],
          { stdio: ["ignore", "pipe", "pipe"] },
        );
        py.stdout?.on("data", (chunk: Buffer) => (output += chunk.toString()));
        py.stderr?.on("data", (chunk: Buffer) => (output += chunk.toString()));
        const needing = await qp.enqueue({}, { quotas: EST });
        const plain = await qp.enqueue({});
        const done = await qp.wait([plain], { timeoutMs: 30_000 });
        assert.equal(done[plain]?.state, "done", output);
        assert.equal((await qp.get(needing))?.state, "delayed", output);
        await quota.resume();
        const later = await qp.wait([needing], { timeoutMs: 30_000 });
        assert.equal(later[needing]?.state, "done", output);
      } finally {
        if (py !== undefined && py.exitCode === null) {
          const exited = new Promise((resolve) => py?.once("exit", resolve));
          py.kill("SIGKILL");
          await exited;
        }
        node.drain();
        assert.equal(await running, 0);
        await quota.close();
        await qn.close();
        await qp.close();
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );
});
