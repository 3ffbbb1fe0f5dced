// No read per claimed task: the Node worker (a real `taskfleet-node worker` process)
// drains grouped tasks, traced tasks and a flow's tasks whose dependencies handed them
// results while MONITOR records every command the server runs; from the first claim on,
// no client reads a hash field (HGET, HMGET): only the scripts do (source "lua"), and the
// handler that asks for its dependency results, whose one HMGET of their `in:` fields
// needs no read of its `after` first (the claim record named them). The Python worker's
// twin is tests/worker/test_claim_reads.py.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";

import { Redis } from "ioredis";

import { Queue } from "../src/index.js";
import { RedisServer, until } from "./redis.js";
import { WorkerProcess } from "./workers.js";

describe("the Node worker's claims", () => {
  const server = new RedisServer();

  before(async () => {
    await server.start();
  });
  after(async () => {
    await server.stop();
  });

  it("drains grouped, traced and flow tasks with no HGET or HMGET after the claim", async () => {
    const dir = mkdtempSync(join(tmpdir(), "taskfleet-claim-reads-"));
    const queue = new Queue("jobs", { redisUrl: server.url });
    const watcher = new Redis(server.url);
    const seen: [string, string, string][] = []; // [source, command, whole line]
    let worker: WorkerProcess | null = null;
    try {
      const traced = await queue.enqueueMany([0, 1, 2, 3].map((i) => ({ payload: { ms: 0, i } })));
      for (const id of traced)
        await queue.client.hset(
          queue.keys.item("task", id),
          "trace",
          '{"traceparent":"00-ab-cd-01"}',
        );
      const grouped = await queue.enqueueMany(
        [0, 1, 2, 3, 4, 5].map((i) => ({
          payload: { ms: 0, g: i },
          group: `tenant-${String(i % 2)}`,
        })),
      );
      const first = await queue.enqueue({ ms: 0, step: 1 });
      const second = await queue.enqueue({ ms: 0, step: 2 });
      const joined = await queue.enqueue(
        { ms: 0, step: 3 },
        { after: [first, second], group: "tenant-0", name: "inputs" },
      );
      const all = [...traced, ...grouped, first, second, joined];

      const monitor = await watcher.monitor();
      monitor.on("monitor", (_time: string, args: string[], source: string) => {
        seen.push([
          source.includes("lua") ? "lua" : source,
          String(args[0]).toUpperCase(),
          args.join(" "),
        ]);
      });
      await until("MONITOR sees commands", async () => {
        await queue.client.ping();
        return seen.length > 0;
      });
      worker = WorkerProcess.node([
        "--queue",
        "jobs",
        "--redis-url",
        server.url,
        "--pod",
        "reads",
        "--runtime-dir",
        join(dir, "rt"),
        "--heartbeat-interval",
        "0.3",
        "--no-fire-schedules",
        "--handler",
        "./worker_handlers.mjs:slow",
        "--handler",
        "inputs=./worker_handlers.mjs:inputs",
      ]);
      await worker.saw(/event=worker_started/);
      // ZCARD: the test's own polling reads no hash
      await until(
        "every task is done",
        async () => (await queue.client.zcard(queue.keys.key("done"))) === all.length,
      );
      worker.kill("SIGTERM");
      assert.equal(await worker.exit(), 0, worker.output);
      monitor.disconnect();

      const claimed = seen.findIndex(
        ([source, command, line]) =>
          source === "lua" && command === "HSET" && line.includes("state running"),
      );
      assert.ok(claimed >= 0, "no claim seen");
      const reads = seen
        .slice(claimed)
        .filter(
          ([source, command]) => source !== "lua" && (command === "HGET" || command === "HMGET"),
        );
      // the handler's own ask, nothing of the worker's
      assert.deepEqual(
        reads.map(([, command, line]) => [command, line.endsWith(` in:${first} in:${second}`)]),
        [["HMGET", true]],
      );
      const done = await queue.get(joined);
      assert.equal(done?.state, "done");
      assert.deepEqual(Object.keys(done.result as object).sort(), [first, second].sort());
    } finally {
      if (worker !== null && worker.child.exitCode === null) worker.kill("SIGKILL");
      watcher.disconnect();
      await queue.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
