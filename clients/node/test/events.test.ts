// The queue's event stream read by the Node client: off until turned on, and a consumer
// SIGKILLed and restarted from its last id sees every event of 2,000 tasks exactly once,
// in order per task.
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, afterEach, before, beforeEach, describe, it } from "node:test";

import { InvalidArgument, Queue } from "../src/index.js";
import { RedisServer, until } from "./redis.js";
import { FIXTURES, WorkerProcess, cleanEnv } from "./workers.js";

const N = 2000;

function linesOf(path: string): string[][] {
  if (!existsSync(path)) return [];
  // whole lines only: a killed consumer may leave its last one half written
  return readFileSync(path, "utf8")
    .split("\n")
    .slice(0, -1)
    .map((l) => l.split(" "));
}

describe("the queue's event stream", () => {
  const server = new RedisServer();
  let dir: string;
  let queue: Queue;
  const children: ChildProcess[] = [];
  const started: WorkerProcess[] = [];

  const consumer = (since: string, out: string): ChildProcess => {
    const child = spawn(
      process.execPath,
      [join(FIXTURES, "events_consumer.mjs"), server.url, "jobs", since, out],
      { cwd: FIXTURES, env: cleanEnv(), stdio: "ignore" },
    );
    children.push(child);
    return child;
  };

  before(async () => {
    await server.start();
  });
  after(async () => {
    await server.stop();
  });
  beforeEach(async () => {
    await server.flush();
    dir = mkdtempSync(join(tmpdir(), "taskfleet-node-events-"));
    queue = new Queue("jobs", { redisUrl: server.url });
  });
  afterEach(async () => {
    for (const c of children.splice(0)) c.kill("SIGKILL");
    await Promise.all(started.splice(0).map((w) => w.stop()));
    await queue.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("writes nothing until turned on, then yields each event with its attempt", async () => {
    await queue.enqueue({});
    assert.equal(await queue.client.exists(queue.keys.key("events")), 0);
    await queue.configureEvents(true, { retention: 1000 });
    const id = await queue.enqueue({});
    await assert.rejects(queue.configureEvents(true, { retention: 0 }), InvalidArgument);
    const it = queue.events({ since: "0" });
    const first = await it.next();
    assert.ok(first.done !== true);
    assert.deepEqual(
      [first.value.event, first.value.taskId, first.value.attempt],
      ["enqueued", id, null],
    );
    await it.return(undefined);
    await assert.rejects(queue.events({ since: "yesterday" }).next(), InvalidArgument);
  });

  it("a consumer killed and restarted from its last id sees every event of 2,000 tasks once, in order per task", async () => {
    await queue.configureEvents(true, { retention: 100_000 });
    const firstOut = join(dir, "first.txt");
    const secondOut = join(dir, "second.txt");
    const first = consumer("0", firstOut);
    const ids = await queue.enqueueMany(Array.from({ length: N }, () => ({ payload: {} })));
    const w = WorkerProcess.node([
      "--queue",
      "jobs",
      "--redis-url",
      server.url,
      "--pod",
      "pod-e",
      "--runtime-dir",
      join(dir, "rt"),
      "--no-fire-schedules",
      "--concurrency",
      "8",
      "--handler",
      "./worker_handlers.mjs:echo",
    ]);
    started.push(w);
    await until("events seen", () => linesOf(firstOut).length >= N + 300, 60_000);
    first.kill("SIGKILL");
    await new Promise((r) => first.once("exit", r));
    const last = linesOf(firstOut).at(-1)?.[0] ?? "0";
    consumer(last, secondOut);
    const dones = (): number =>
      [...linesOf(firstOut), ...linesOf(secondOut)].filter((l) => l[1] === "done").length;
    await until("every done event read", () => dones() >= N, 90_000);
    const seen = [...linesOf(firstOut), ...linesOf(secondOut)];
    const streamIds = seen.map((l) => l[0] as string);
    assert.equal(new Set(streamIds).size, streamIds.length); // nothing twice
    const order = streamIds.map((s) => s.split("-").map(BigInt) as [bigint, bigint]);
    for (let i = 1; i < order.length; i++) {
      const [a, b] = [order[i - 1] as [bigint, bigint], order[i] as [bigint, bigint]];
      assert.ok(a[0] < b[0] || (a[0] === b[0] && a[1] < b[1]), "in stream order");
    }
    const byTask = new Map<string, string[]>();
    for (const [, kind, taskId] of seen) {
      const list = byTask.get(taskId as string) ?? [];
      list.push(kind as string);
      byTask.set(taskId as string, list);
    }
    assert.deepEqual([...byTask.keys()].sort(), [...ids].sort());
    for (const kinds of byTask.values()) assert.deepEqual(kinds, ["enqueued", "started", "done"]);
    assert.equal(seen.length, await queue.client.xlen(queue.keys.key("events")));
  });
});
