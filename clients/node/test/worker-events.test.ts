// A worker's own events (`worker.on`), against a real redis-server: two workers in this
// process share 1,000 tasks (some retried, some dead); every run's events come once, from
// the worker that ran it, and a listener that throws or rejects stops nothing.
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";

import { PermanentFailure, Queue, Worker } from "../src/index.js";
import { RedisServer, until } from "./redis.js";

interface Job {
  readonly i: number;
}
interface Done {
  readonly i: number;
}

const N = 1000;

/** Every tenth task is dead at once; every tenth but one fails its first attempt. */
function kind(i: number): "dead" | "retried" | "plain" {
  if (i % 10 === 0) return "dead";
  if (i % 10 === 1) return "retried";
  return "plain";
}

describe("a worker's events", () => {
  const server = new RedisServer();
  before(() => server.start());
  after(() => server.stop());
  beforeEach(() => server.flush());

  it("emits active, progress and one outcome event per run, none missed and none twice, across two workers", async () => {
    const q = new Queue<Job, Done>("events", { redisUrl: server.url });
    await q.configure({ backoffBaseMs: 0, backoffMaxMs: 0, maxAttempts: 3 });
    const seen: string[] = [];
    const byWorker = new Map<string, Set<string>>();
    const drained: string[] = [];
    const note = (pod: string, line: string): void => {
      seen.push(line);
      const mine = byWorker.get(pod) ?? new Set<string>();
      mine.add(line.split(" ")[1] ?? "");
      byWorker.set(pod, mine);
    };
    const workers = ["events-a", "events-b"].map((pod) => {
      const w = new Worker<Job, Done>("events", {
        redisUrl: server.url,
        pod,
        concurrency: 16,
        heartbeatIntervalMs: 300,
        fireSchedules: false,
        handler: (job, task) => {
          task.progress(0.5, `half of ${job.i}`);
          if (kind(job.i) === "dead") throw new PermanentFailure("no");
          if (kind(job.i) === "retried" && task.attempt === 1) throw new Error("once");
          return { i: job.i };
        },
      });
      w.on("active", (task) => {
        note(pod, `active ${task.id} ${task.attempt}`);
      });
      w.on("progress", (task, progress) => {
        assert.equal(progress.message, `half of ${task.payload.i}`);
        note(pod, `progress ${task.id} ${task.attempt} ${progress.fraction}`);
      });
      w.on("completed", (task, result) => {
        assert.deepEqual(result, { i: task.payload.i });
        note(pod, `completed ${task.id} ${task.attempt}`);
      });
      w.on("failed", (task, error, how) => {
        note(pod, `failed ${task.id} ${task.attempt} ${how.dead ? "dead" : "retry"} ${error}`);
      });
      // listeners that fail: the worker and the listeners after them go on
      w.on("completed", () => {
        throw new Error("a listener's bug");
      });
      w.on("failed", () => Promise.reject(new Error("an async listener's bug")));
      w.on("completed", (task) => {
        note(pod, `after-throw ${task.id}`);
      });
      w.once("drained", () => {
        drained.push(pod);
      });
      return w;
    });
    const running = workers.map((w) => w.run());
    try {
      const ids = await q.enqueueMany(
        Array.from({ length: N }, (_, i) => ({ payload: { i }, taskId: `t${i}` })),
      );
      const done = await q.wait(ids, { timeoutMs: 60_000 });
      for (let i = 0; i < N; i++)
        assert.equal(done[`t${i}`]?.state, kind(i) === "dead" ? "dead" : "done");
    } finally {
      for (const w of workers) w.drain();
      assert.deepEqual(await Promise.all(running), [0, 0]);
      await q.close();
    }

    const expected: string[] = [];
    for (let i = 0; i < N; i++) {
      const id = `t${i}`;
      const runs = kind(i) === "retried" ? 2 : 1;
      for (let attempt = 1; attempt <= runs; attempt++) {
        expected.push(`active ${id} ${attempt}`, `progress ${id} ${attempt} 0.5`);
      }
      if (kind(i) === "dead") expected.push(`failed ${id} 1 dead PermanentFailure: no`);
      if (kind(i) === "retried") expected.push(`failed ${id} 1 retry Error: once`);
      if (kind(i) !== "dead") expected.push(`completed ${id} ${runs}`, `after-throw ${id}`);
    }
    // none missed, none twice: the same multiset of lines
    assert.deepEqual([...seen].sort(), expected.sort());
    // each run's events came from one worker, and both workers ran tasks
    const a = byWorker.get("events-a") ?? new Set();
    const b = byWorker.get("events-b") ?? new Set();
    assert.ok(a.size > 0 && b.size > 0, `both ran tasks: ${a.size} and ${b.size}`);
    for (const line of seen) {
      if (!line.startsWith("completed")) continue;
      const id = line.split(" ")[1] ?? "";
      assert.ok(a.has(id) !== b.has(id) || kind(Number(id.slice(1))) === "retried", id);
    }
    assert.deepEqual(drained.sort(), ["events-a", "events-b"]);
  });

  it("never says completed for a parent whose child failed: failed and dead while it ran, waiting-children then dead on the queue's stream after", async () => {
    const q = new Queue("joins", { redisUrl: server.url });
    await q.configureEvents(true, { retention: 1000 });
    let release: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const seen: string[] = [];
    const w = new Worker("joins", {
      redisUrl: server.url,
      pod: "joins",
      concurrency: 4,
      heartbeatIntervalMs: 300,
      fireSchedules: false,
      handlers: {
        // its child is cancelled before it returns: it ends dead at its complete
        early: async (_payload, task) => {
          const [kid] = await task.addChildren([{ payload: {}, name: "kid", delayMs: 60_000 }]);
          await q.cancel(kid ?? "");
          return "early result";
        },
        // returns while its child runs; the child then fails: it ends dead while waiting
        late: async (_payload, task) => {
          await task.addChildren([{ payload: { fail: true }, name: "kid" }]);
          return "late result";
        },
        kid: async (payload) => {
          await gate;
          if (payload.fail === true) throw new PermanentFailure("the child fails");
          return null;
        },
      },
    });
    w.on("completed", (task) => seen.push(`completed ${task.id}`));
    w.on("failed", (task, _error, how) => seen.push(`failed ${task.id} ${how.dead ? "dead" : ""}`));
    w.on("waiting-children", (task, result) =>
      seen.push(`waiting-children ${task.id} ${String(result)}`),
    );
    const running = w.run();
    try {
      const early = await q.enqueue({}, { name: "early", taskId: "early" });
      const late = await q.enqueue({}, { name: "late", taskId: "late" });
      await until("the early parent ends", async () => (await q.get(early))?.state === "dead");
      assert.equal((await q.get(early))?.reason, "dependency failed");
      await until("the late parent waits", async () => (await q.get(late))?.state === "waiting");
      release();
      await until("the late parent ends", async () => (await q.get(late))?.state === "dead");
      assert.equal((await q.get(late))?.reason, "dependency failed");
    } finally {
      release();
      w.drain();
      assert.equal(await running, 0);
    }
    const mine = seen.filter((line) => /^\S+ (early|late)\b/.test(line)).sort();
    assert.deepEqual(mine, ["failed early dead", "waiting-children late late result"]);
    const ends: string[] = [];
    for await (const e of q.events({ since: "0" })) {
      if (
        (e.taskId === "early" || e.taskId === "late") &&
        e.event !== "enqueued" &&
        e.event !== "started"
      )
        ends.push(`${e.event} ${e.taskId}`);
      if (ends.length === 2) break;
    }
    assert.deepEqual(ends.sort(), ["dead early", "dead late"]);
    await q.close();
  });

  it("keeps a listener's types: the payload and the result of the worker", () => {
    const w = new Worker<Job, Done>("events", { handler: (job) => ({ i: job.i }) });
    // @ts-expect-error no such event
    w.on("finished", () => undefined);
    // @ts-expect-error a completed listener gets the Result type, not a string
    w.on("completed", (_task, result: string) => result);
    w.on("failed", (task, error, how) => [task.payload.i, error.length, how.dead]);
    assert.equal(w.listenerCount("failed"), 1);
    const listener = (): void => undefined;
    w.on("drained", listener).off("drained", listener);
    assert.equal(w.listenerCount("drained"), 0);
  });
});
