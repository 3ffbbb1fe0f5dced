import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";

import { packagedBundle } from "../src/bundle.js";
import { Scripts } from "../src/connection.js";
import { InvalidArgument, Queue, TaskExists } from "../src/index.js";
import { RedisServer } from "./redis.js";
import { idAndToken } from "../src/worker/claimed.js";

const server = new RedisServer();
before(() => server.start());
after(() => server.stop());
beforeEach(() => server.flush());

async function withQueue<T>(body: (q: Queue) => Promise<T>): Promise<T> {
  const q = new Queue("jobs", { redisUrl: server.url });
  try {
    return await body(q);
  } finally {
    await q.close();
  }
}

/** Claim what is pending and complete it, by hand from the bundle; the ids run. */
async function work(q: Queue): Promise<string[]> {
  const bundle = packagedBundle();
  const scripts = new Scripts(q.client, bundle);
  const claim = bundle.pack("claim", {
    pod: "hand",
    incarnation: "i1",
    max_tasks: 100,
    token_base: "tb",
    bound: 100,
  });
  const reply = (await scripts.run("claim", q.keys, claim)) as unknown[];
  const held = reply.slice(3).map((r) => idAndToken(r));
  const records = held.map(([task_id, token]) => ({ task_id, token, result: "" }));
  if (records.length > 0)
    await scripts.run("complete", q.keys, bundle.pack("complete", {}, records));
  return records.map((r) => r.task_id);
}

describe("after (dependencies)", () => {
  it("keeps a dependant waiting until its dependencies are done", () =>
    withQueue(async (q) => {
      const a = await q.enqueue({ n: 1 });
      const b = await q.enqueue({ n: 2 }, { after: [a], onDepFail: "ignore" });
      const waiting = await q.get(b);
      assert.equal(waiting?.state, "waiting");
      assert.deepEqual(waiting.after, [a]);
      assert.equal(waiting.onDepFail, "ignore");
      assert.equal((await q.stats()).waiting, 1);
      assert.deepEqual(await work(q), [a]);
      assert.equal((await q.get(b))?.state, "pending");
      assert.deepEqual(await work(q), [b]);
    }));

  it("puts a dependant in its dependency's flow, counted by outcome when it ends", () =>
    withQueue(async (q) => {
      const a = await q.enqueue({ n: 1 });
      const b = await q.enqueue({ n: 2 }, { after: [a] });
      assert.equal((await q.get(a))?.flow, a);
      assert.equal((await q.get(b))?.flow, a);
      assert.equal((await q.stats()).flows_done, 0);
      assert.deepEqual(await work(q), [a]);
      assert.deepEqual(await work(q), [b]);
      assert.equal((await q.stats()).flows_done, 1);
      const plain = await q.enqueue({ n: 3 });
      assert.equal((await q.get(plain))?.flow, null);
    }));

  it("enqueues a chain in one enqueueMany and fails dependants of a cancelled task", () =>
    withQueue(async (q) => {
      const ids = await q.enqueueMany([
        { payload: {}, taskId: "s1" },
        { payload: {}, taskId: "s2", after: ["s1"] },
        { payload: {}, taskId: "s3", after: ["s2"] },
      ]);
      assert.deepEqual(ids, ["s1", "s2", "s3"]);
      await q.cancel("s1");
      for (const id of ["s2", "s3"]) {
        const task = await q.get(id);
        assert.equal(task?.state, "dead");
        assert.equal(task.reason, "dependency failed");
      }
    }));

  it("refuses unknown and bad dependencies, storing nothing", () =>
    withQueue(async (q) => {
      await assert.rejects(q.enqueue({}, { after: ["nope"], taskId: "x" }), (e: unknown) => {
        assert.ok(e instanceof InvalidArgument);
        assert.match(e.message, /waits for 'nope' \(after\), which is no task of this queue/);
        return true;
      });
      assert.equal(await q.get("x"), null);
      await assert.rejects(q.enqueue({}, { after: ["a", "a"] }), /twice/);
      await assert.rejects(q.enqueue({}, { after: ["a"], delayMs: 5000 }), /cannot be combined/);
      // the Node option's name, not the Python field's
      await assert.rejects(
        q.enqueue({}, { onDepFail: "skip" as "ignore" }),
        /^InvalidArgument: onDepFail must be one of fail, ignore, cancel, not skip$/,
      );
      await assert.rejects(
        q.enqueue({}, { after: ["a"], onDepFail: "skip" as "ignore" }),
        /^InvalidArgument: onDepFail must be one of fail, ignore, cancel, not skip$/,
      );
    }));

  it("treats another after or onDepFail of an existing id as a conflict, the same as unchanged", () =>
    withQueue(async (q) => {
      const a = await q.enqueue({}, { taskId: "a" });
      const b = await q.enqueue({}, { taskId: "b" });
      await q.enqueue({}, { taskId: "c", after: [a] });
      assert.equal((await q.enqueueResult({}, { taskId: "c", after: [a] })).created, false);
      assert.equal(
        (await q.enqueueResult({}, { taskId: "c", after: [a], onDepFail: "fail" })).created,
        false,
      );
      const differs = (field: string) => (e: unknown) =>
        e instanceof TaskExists && e.field === field;
      await assert.rejects(q.enqueue({}, { taskId: "c", after: [a, b] }), differs("after"));
      await assert.rejects(q.enqueue({}, { taskId: "c" }), differs("after"));
      await assert.rejects(
        q.enqueue({}, { taskId: "c", after: [a], onDepFail: "cancel" }),
        differs("on_dep_fail"),
      );
      assert.deepEqual((await q.get("c"))?.after, [a]);
    }));
});
