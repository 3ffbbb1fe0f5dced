import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";

import { packagedBundle } from "../src/bundle.js";
import { Scripts } from "../src/connection.js";
import {
  InvalidArgument,
  InvalidPayload,
  InvalidRedisURL,
  NotReplicated,
  Queue,
  ScheduleNotFound,
  TaskExists,
  WaitTimeout,
} from "../src/index.js";
import { RedisServer, until } from "./redis.js";
import { idAndToken } from "../src/worker/claimed.js";

const server = new RedisServer();
before(() => server.start());
after(() => server.stop());
beforeEach(() => server.flush());

async function withQueue<T>(body: (q: Queue) => Promise<T>, name = "jobs"): Promise<T> {
  const q = new Queue(name, { redisUrl: server.url });
  try {
    return await body(q);
  } finally {
    await q.close();
  }
}

/** What a worker does, by hand from the bundle: claim up to `n` tasks and complete each with `result`. */
async function work(q: Queue, n: number, result = '{"ok":true}'): Promise<string[]> {
  const bundle = packagedBundle();
  const scripts = new Scripts(q.client, bundle);
  const claim = bundle.pack("claim", {
    pod: "hand",
    incarnation: "i1",
    max_tasks: n,
    token_base: "tb",
    bound: 100,
  });
  const reply = (await scripts.run("claim", q.keys, claim)) as unknown[];
  const held = reply.slice(3).map((r) => idAndToken(r));
  const records = held.map(([task_id, token]) => ({ task_id, token, result }));
  if (records.length > 0)
    await scripts.run("complete", q.keys, bundle.pack("complete", {}, records));
  return records.map((r) => r.task_id);
}

async function sweep(q: Queue): Promise<unknown> {
  const bundle = packagedBundle();
  return new Scripts(q.client, bundle).run("sweep", q.keys, bundle.pack("sweep", { bound: 1000 }));
}

describe("enqueue", () => {
  it("stores a task with every option, readable by get", () =>
    withQueue(async (q) => {
      const deadline = new Date(Date.now() + 3_600_000);
      const id = await q.enqueue(
        { to: "a@example.com", n: 1 },
        {
          priority: 7,
          maxAttempts: 4,
          cost: 3,
          timeoutMs: 30_000,
          deadline,
          name: "send",
          taskId: "t-1",
          traceContext: { traceparent: "00-abc-def-01" },
        },
      );
      assert.equal(id, "t-1");
      const task = await q.get(id);
      assert.ok(task !== null);
      assert.equal(task.state, "pending");
      assert.deepEqual(task.payload, { to: "a@example.com", n: 1 });
      assert.equal(task.name, "send");
      assert.equal(task.priority, 7);
      assert.equal(task.maxAttempts, 4);
      assert.equal(task.cost, 3);
      assert.equal(task.timeoutMs, 30_000);
      assert.equal(task.deadline?.getTime(), deadline.getTime());
      assert.equal(task.finished, false);
      const raw = await q.client.hget(q.keys.item("task", id), "trace");
      assert.equal(raw, '{"traceparent":"00-abc-def-01"}');
      assert.equal(await q.get("no-such-task"), null);
    }));

  it("delays a task and makes random ids when none is given", () =>
    withQueue(async (q) => {
      const id = await q.enqueue({}, { delayMs: 60_000 });
      assert.match(id, /^[0-9a-f]{32}$/);
      const task = await q.get(id);
      assert.equal(task?.state, "delayed");
      assert.ok(
        task.runAt !== null &&
          task.createdAt !== null &&
          task.runAt.getTime() - task.createdAt.getTime() === 60_000,
      );
    }));

  it("is idempotent for the same id and options, and refuses another payload or name", () =>
    withQueue(async (q) => {
      assert.deepEqual(await q.enqueueResult({ a: 1 }, { taskId: "x", timeoutMs: 5000 }), {
        taskId: "x",
        created: true,
      });
      assert.deepEqual(await q.enqueueResult({ a: 1 }, { taskId: "x", timeoutMs: 5000 }), {
        taskId: "x",
        created: false,
      });
      await assert.rejects(
        q.enqueue({ a: 2 }, { taskId: "x", timeoutMs: 5000 }),
        (e: unknown) => e instanceof TaskExists && e.field === "payload",
      );
      await assert.rejects(
        q.enqueue({ a: 1 }, { taskId: "x", timeoutMs: 6000 }),
        (e: unknown) => e instanceof TaskExists && e.field === "timeout",
      );
      await assert.rejects(
        q.enqueue({ a: 1 }, { taskId: "x", name: "other", timeoutMs: 5000 }),
        (e: unknown) => e instanceof TaskExists && e.field === "name",
      );
      assert.equal((await q.stats()).enqueued, 1);
    }));

  it("enqueues many atomically: one refused task stores none", () =>
    withQueue(async (q) => {
      const ids = await q.enqueueMany([
        { payload: { i: 1 } },
        { payload: { i: 2 }, priority: 5, taskId: "b" },
      ]);
      assert.equal(ids.length, 2);
      assert.equal(ids[1], "b");
      await assert.rejects(
        q.enqueueMany([
          { payload: { i: 3 }, taskId: "c" },
          { payload: { other: true }, taskId: "b" },
        ]),
        TaskExists,
      );
      assert.equal(await q.get("c"), null);
      await assert.rejects(q.enqueueMany([{ payload: {}, priority: 5000 }]), InvalidArgument);
      assert.deepEqual(await q.enqueueMany([]), []);
      assert.equal((await q.stats()).pending, 2);
    }));

  it("refuses a payload over the queue's max_payload_bytes, storing nothing", () =>
    withQueue(async (q) => {
      await q.client.hset(q.keys.key("config"), "max_payload_bytes", "20");
      await assert.rejects(
        q.enqueue({ text: "x".repeat(50) }, { taskId: "big" }),
        /payload of task big is 61 bytes; the queue allows 20/,
      );
      await assert.rejects(q.enqueue({ text: "x".repeat(50) }), InvalidPayload);
      assert.equal(await q.get("big"), null);
    }));

  it("loads a script again when the server lost it (SCRIPT FLUSH)", () =>
    withQueue(async (q) => {
      await q.enqueue({});
      await q.client.script("FLUSH");
      await q.enqueue({});
      assert.equal((await q.stats()).pending, 2);
    }));

  it("refuses a bad queue name or Redis URL with one line, never the URL", () => {
    assert.throws(() => new Queue("a:b"), /invalid queue name 'a:b'/);
    assert.throws(() => new Queue("{x}"), InvalidArgument);
    assert.throws(() => new Queue("ok", { redisUrl: "http://h" }), /must start with redis:\/\//);
    assert.throws(
      () => new Queue("ok", { redisUrl: "redis://:s3cret@h/abc" }),
      (e: unknown) => e instanceof InvalidRedisURL && !e.message.includes("s3cret"),
    );
    assert.throws(
      () => new Queue("ok", { redisUrl: "redis://h?foo=1" }),
      /unknown query parameter 'foo'/,
    );
    assert.throws(
      () => new Queue("ok", { redisUrl: "redis://h/1?cluster=true" }),
      /database 0 only/,
    );
  });
});

describe("reading and waiting", () => {
  it("counts every state and counter", () =>
    withQueue(async (q) => {
      await q.enqueueMany([{ payload: {} }, { payload: {} }, { payload: {}, delayMs: 60_000 }]);
      await work(q, 1);
      const stats = await q.stats();
      assert.equal(stats.pending, 1);
      assert.equal(stats.delayed, 1);
      assert.equal(stats.done, 1);
      assert.equal(stats.enqueued, 3);
      assert.equal(stats.completed, 1);
      assert.equal(stats.replayed, 0);
    }));

  it("waits for tasks finished by a worker, woken through the waiter list", () =>
    withQueue(async (q) => {
      const ids = await q.enqueueMany([{ payload: { n: 1 } }, { payload: { n: 2 } }]);
      const waiting = q.wait(ids, { timeoutMs: 20_000 });
      // the wait has registered on both tasks before they are worked
      await until("the wait watches both tasks", async () => {
        const marks = await Promise.all(
          ids.map((id) => q.client.hget(q.keys.item("task", id), "waiters")),
        );
        return marks.every((m) => m !== null && m !== "");
      });
      await work(q, 2, '{"answer":42}');
      const done = await waiting;
      assert.deepEqual(Object.keys(done).sort(), [...ids].sort());
      for (const id of ids) {
        assert.equal(done[id]?.state, "done");
        assert.deepEqual(done[id].result, { answer: 42 });
      }
    }));

  it("resolves at once for finished tasks and times out naming the unfinished", () =>
    withQueue(async (q) => {
      const [a = ""] = await q.enqueueMany([{ payload: {} }]);
      await work(q, 1);
      assert.equal((await q.wait([a], { timeoutMs: 5000 }))[a]?.state, "done");
      const b = await q.enqueue({});
      await assert.rejects(
        q.wait([a, b, "never-enqueued"], { timeoutMs: 200 }),
        (e: unknown) => e instanceof WaitTimeout && e.unfinished.join() === `${b},never-enqueued`,
      );
      await assert.rejects(q.wait("abc", { timeoutMs: 1000 }), /not one string/);
    }));
});

describe("controlling tasks", () => {
  it("cancels pending tasks, and says what it found for the others", () =>
    withQueue(async (q) => {
      const [a = "", b = ""] = await q.enqueueMany([{ payload: {} }, { payload: {} }]);
      assert.equal(await q.cancel(a), "cancelled");
      assert.equal(await q.cancel(a), "finished");
      await work(q, 1);
      assert.deepEqual(await q.cancelMany([b, "nope"]), { [b]: "done", nope: "not_found" });
      assert.equal((await q.get(a))?.state, "cancelled");
    }));

  it("promotes a delayed task to pending now and leaves the others as they are", () =>
    withQueue(async (q) => {
      const later = await q.enqueue({}, { delayMs: 3_600_000 });
      const ready = await q.enqueue({});
      assert.deepEqual(await q.promoteMany([later, ready, "nope"]), {
        [later]: true,
        [ready]: false,
        nope: false,
      });
      assert.equal(await q.promote(later), false);
      assert.equal((await q.get(later))?.state, "pending");
    }));

  it("lists a state in the order it is served, page by page", () =>
    withQueue(async (q) => {
      await q.enqueueMany(
        [0, 1, 2, 3, 4].map((i) => ({ payload: { i }, priority: i, taskId: `t${i}` })),
      );
      const first = await q.list("pending", { limit: 3 });
      assert.deepEqual(
        first.tasks.map((t) => t.id),
        ["t4", "t3", "t2"],
      );
      assert.ok(first.cursor !== null);
      const second = await q.list("pending", { limit: 3, cursor: first.cursor });
      assert.deepEqual(
        second.tasks.map((t) => t.id),
        ["t1", "t0"],
      );
      assert.equal(second.cursor, null);
      await assert.rejects(q.list("pending", { limit: 0 }), /limit must be 1..10000/);
      await assert.rejects(q.list("nope" as "pending"), /unknown task state 'nope'/);
    }));

  it("retries dead tasks and purges finished ones", () =>
    withQueue(async (q) => {
      const id = await q.enqueue({}, { deadlineMs: 1 });
      await until("the deadline passes and the sweep expires the task", async () => {
        await sweep(q);
        return (await q.get(id))?.state === "dead";
      });
      assert.equal((await q.get(id))?.reason, "expired");
      assert.equal((await q.list("dead", { reason: "expired" })).tasks.length, 1);
      assert.equal(await q.retry({ reason: "other" }), 0);
      assert.equal(await q.retry({ maxAttempts: 2 }), 1);
      const back = await q.get(id);
      assert.equal(back?.state, "pending");
      assert.equal(back.maxAttempts, 2);
      await work(q, 1);
      assert.equal(await q.purgeTasks("done", { taskIds: [id] }), 1);
      assert.equal(await q.get(id), null);
      await assert.rejects(q.purgeTasks("pending"), /state must be one of cancelled, dead, done/);
    }));

  it("purges every key of the queue and of no other", async () => {
    const other = new Queue("other", { redisUrl: server.url });
    try {
      await other.enqueue({});
      await withQueue(async (q) => {
        await q.enqueueMany([{ payload: {} }, { payload: {}, delayMs: 9000 }]);
        await q.schedule("s", "0 3 * * *", {});
        await q.purge();
        assert.deepEqual(await q.client.keys("tf:{jobs}:*"), []);
      });
      assert.equal((await other.stats()).pending, 1);
    } finally {
      await other.close();
    }
  });
});

describe("schedules", () => {
  it("creates, lists, pauses, resumes and deletes a schedule", () =>
    withQueue(async (q) => {
      const made = await q.schedule(
        "nightly",
        "0 3 * * *",
        { report: true },
        { tz: "Europe/Paris", jitterMs: 30_000, priority: 2 },
      );
      assert.equal(made.cron, "0 3 * * *");
      assert.equal(made.tz, "Europe/Paris");
      assert.deepEqual(made.payload, { report: true });
      assert.equal(made.priority, 2);
      assert.equal(made.paused, false);
      assert.ok(made.nextSlot !== null && made.nextSlot * 1000 > Date.now());
      assert.deepEqual(
        (await q.schedules()).map((s) => s.name),
        ["nightly"],
      );
      assert.equal(await q.pauseSchedule("nightly"), true);
      assert.equal(await q.pauseSchedule("nightly"), false);
      assert.equal((await q.getSchedule("nightly"))?.paused, true);
      assert.equal(await q.resumeSchedule("nightly"), true);
      assert.equal(await q.unschedule("nightly"), true);
      assert.equal(await q.unschedule("nightly"), false);
      assert.equal(await q.getSchedule("nightly"), null);
      await assert.rejects(q.resumeSchedule("nightly"), ScheduleNotFound);
      await assert.rejects(q.schedule("x", "not a cron", {}), InvalidArgument);
    }));
});

describe("durability", () => {
  it("waits for replicas with ?wait_replicas, and says so when too few confirm", async () => {
    const replica = new RedisServer(["--replicaof", "127.0.0.1", String(server.port)]);
    await replica.start();
    try {
      const admin = replica.admin();
      await until("the replica is in sync", async () =>
        (await admin.info("replication")).includes("master_link_status:up"),
      );
      admin.disconnect();
      const one = new Queue("jobs", {
        redisUrl: `${server.url}?wait_replicas=1&wait_timeout_ms=5000`,
      });
      const two = new Queue("jobs", {
        redisUrl: `${server.url}?wait_replicas=2&wait_timeout_ms=50`,
      });
      try {
        assert.ok(await one.enqueue({}, { taskId: "r1" }));
        await assert.rejects(
          two.enqueue({}, { taskId: "r2" }),
          (e: unknown) => e instanceof NotReplicated && e.acked === 1 && e.taskIds.join() === "r2",
        );
        assert.equal((await one.get("r2"))?.state, "pending"); // on the master all the same
        await assert.rejects(two.enqueue({ other: 1 }, { taskId: "r1" }), TaskExists); // a refusal is not NotReplicated
      } finally {
        await Promise.all([one.close(), two.close()]);
      }
    } finally {
      await replica.stop();
    }
  });
});

describe("closing", () => {
  it("resolves even when no Redis ever answered", async () => {
    const q = new Queue("jobs", { redisUrl: "redis://127.0.0.1:1/0" });
    await q.close();
  });
});
