// Flows that can never hang, from Node: a child that would close a dependency cycle
// through its parent is refused (DependencyCycle, nothing stored), a flow's cancel and
// retry end on a cycle written by hand; a parent's policy for the children it adds
// (onDepFail without after), and a child adopted before never created again.
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";

import { packagedBundle } from "../src/bundle.js";
import { Scripts } from "../src/connection.js";
import { batchRecords } from "../src/encoding.js";
import { DependencyCycle, Queue } from "../src/index.js";
import { Broker, JOINING } from "../src/worker/broker.js";
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

/** Claim pending tasks by hand from the bundle: each claimed id with its token. */
async function claim(q: Queue, max: number): Promise<Map<string, string>> {
  const bundle = packagedBundle();
  const scripts = new Scripts(q.client, bundle);
  const args = bundle.pack("claim", {
    pod: "hand",
    incarnation: "i1",
    max_tasks: max,
    token_base: "tb",
    bound: 100,
  });
  const reply = (await scripts.run("claim", q.keys, args)) as unknown[];
  return new Map(reply.slice(3).map((r) => idAndToken(r)));
}

/** Every key of the queue with its content: equal before and after means nothing stored. */
async function snapshot(q: Queue): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  for (const key of (await q.client.keys(q.keys.pattern)).sort()) {
    const kind = await q.client.type(key);
    if (kind === "hash") out[key] = await q.client.hgetall(key);
    else if (kind === "set") out[key] = (await q.client.smembers(key)).sort();
    else if (kind === "zset") out[key] = await q.client.zrange(key, "0", "-1", "WITHSCORES");
    else if (kind === "string") out[key] = await q.client.get(key);
    else out[key] = kind;
  }
  return out;
}

describe("dependency cycles", () => {
  const cases: [string, Record<string, unknown>, string][] = [
    ["waits for its parent", { payload: {}, taskId: "c", after: ["split"] }, "c"],
    [
      "waits for a task that waits for its parent",
      { payload: {}, taskId: "c", after: ["publish"] },
      "c",
    ],
    [
      "is an existing task that waits for its parent",
      { payload: {}, taskId: "merge", after: ["split"] },
      "merge",
    ],
    ["is the parent itself", { payload: {}, taskId: "split" }, "split"],
  ];
  for (const [what, child, culprit] of cases) {
    it(`refuses a child that ${what}: DependencyCycle, nothing stored`, () =>
      withQueue(async (q) => {
        await q.enqueue({}, { taskId: "split" });
        await q.enqueue({}, { taskId: "merge", after: ["split"] });
        await q.enqueue({}, { taskId: "publish", after: ["merge"] });
        const token = (await claim(q, 1)).get("split") ?? "";
        const broker = new Broker("jobs", q.client, "p", "i", {
          replyTimeoutMs: 5000,
          host: "",
          served: null,
        });
        const before = await snapshot(q);
        const items = batchRecords([{ payload: { page: 0 }, taskId: "page-0" }, child]);
        await assert.rejects(broker.addChildren("split", token, items), (err: unknown) => {
          assert.ok(err instanceof DependencyCycle);
          assert.match(
            err.message,
            new RegExp(`task '${culprit}' would close a dependency cycle through 'split'`),
          );
          return true;
        });
        assert.deepEqual(await snapshot(q), before);
        await broker.addChildren("split", token, items.slice(0, 1));
        assert.deepEqual((await q.get("split"))?.after, ["page-0"]);
      }));
  }

  it("refuses tasks of one call that wait for each other: DependencyCycle, nothing stored", () =>
    withQueue(async (q) => {
      await assert.rejects(
        q.enqueueMany([
          { payload: {}, taskId: "a", after: ["b"] },
          { payload: {}, taskId: "b", after: ["a"] },
        ]),
        (err: unknown) => {
          assert.ok(err instanceof DependencyCycle);
          assert.match(err.message, /^task 'a' waits for 'b', a later task of the same call/);
          return true;
        },
      );
      assert.equal(await q.get("a"), null);
      assert.equal(await q.get("b"), null);
    }));

  it("cancels and retries a flow whose links were written by hand into a cycle, and returns", () =>
    withQueue(async (q) => {
      await q.enqueueMany([
        { payload: {}, taskId: "a" },
        { payload: {}, taskId: "b", after: ["a"] },
        { payload: {}, taskId: "c", after: ["b"] },
      ]);
      await q.client.zrem(q.keys.key("pending"), "a");
      await q.client.hset(q.keys.item("task", "a"), {
        state: "waiting",
        after: JSON.stringify(["c"]),
        deps_left: 1,
      });
      await q.client.hset(q.keys.item("task", "c"), "by:a", 1);
      const outcomes = await q.cancelFlow("b");
      assert.deepEqual(Object.keys(outcomes).sort(), ["a", "b", "c"]);
      for (const id of ["a", "b", "c"]) assert.equal((await q.get(id))?.state, "cancelled");
      assert.equal(await q.retryFlow("c"), 3);
      const again = await q.cancelFlow("a", { branch: true });
      assert.deepEqual(Object.keys(again).sort(), ["a", "b", "c"]);
    }));
});

describe("children added at run time", () => {
  const broker = (q: Queue): Broker =>
    new Broker("jobs", q.client, "p", "i", { replyTimeoutMs: 5000, host: "", served: null });
  const pages = (): ReturnType<typeof batchRecords> =>
    batchRecords([0, 1].map((i) => ({ payload: { page: i }, taskId: `p${i}`, maxAttempts: 1 })));

  it("ends a parent under onDepFail ignore done though a child failed", () =>
    withQueue(async (q) => {
      await q.enqueue({}, { taskId: "doc", onDepFail: "ignore" });
      assert.equal((await q.get("doc"))?.onDepFail, "ignore");
      const b = broker(q);
      const run = (await claim(q, 1)).get("doc") ?? "";
      await b.addChildren("doc", run, pages());
      assert.deepEqual(await b.complete([["doc", run, '"split"']]), [JOINING]);
      const kids = await claim(q, 2);
      await b.fail("p0", kids.get("p0") ?? "", "unreadable", false);
      assert.deepEqual(await b.complete([["p1", kids.get("p1") ?? "", null]]), [1]);
      const done = await q.get("doc");
      assert.equal(done?.state, "done");
      assert.equal(done.result, "split");
    }));

  it("cancels a parent under onDepFail cancel, and its children not started, when a child fails", () =>
    withQueue(async (q) => {
      await q.enqueue({}, { taskId: "doc", onDepFail: "cancel" });
      const b = broker(q);
      const run = (await claim(q, 1)).get("doc") ?? "";
      await b.addChildren("doc", run, [
        ...pages(),
        ...batchRecords([{ payload: {}, taskId: "p2" }]),
      ]);
      assert.deepEqual(await b.complete([["doc", run, null]]), [JOINING]);
      const kids = await claim(q, 2);
      await b.fail("p0", kids.get("p0") ?? "", "unreadable", false);
      const parent = await q.get("doc");
      assert.equal(parent?.state, "cancelled");
      assert.equal(parent.error, "dependency p0 ended dead");
      assert.equal((await q.get("p2"))?.state, "cancelled");
    }));

  it("never creates again a child adopted before whose record retention dropped", () =>
    withQueue(async (q) => {
      await q.configure({ doneRetentionMs: 0 });
      await q.enqueue({}, { taskId: "doc", maxAttempts: 1 });
      const b = broker(q);
      const run = (await claim(q, 1)).get("doc") ?? "";
      await b.addChildren("doc", run, pages());
      const kids = await claim(q, 2);
      assert.deepEqual(
        await b.complete([...kids].map(([id, token]): [string, string, null] => [id, token, null])),
        [1, 1],
      );
      assert.equal(await q.get("p0"), null);
      await b.fail("doc", run, "boom", false);
      const enqueued = (await q.stats()).enqueued;
      assert.equal(await q.retry({ taskIds: ["doc"] }), 1);
      const again = (await claim(q, 1)).get("doc") ?? "";
      assert.notEqual(again, "");
      await b.addChildren("doc", again, pages());
      assert.equal(await q.get("p0"), null);
      assert.equal(await q.get("p1"), null);
      assert.equal((await q.stats()).enqueued, enqueued);
      assert.deepEqual(await b.complete([["doc", again, null]]), [1]);
      assert.equal((await claim(q, 10)).size, 0);
    }));
});
