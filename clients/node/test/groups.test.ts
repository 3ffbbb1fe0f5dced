import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";

import { packagedBundle } from "../src/bundle.js";
import { Scripts } from "../src/connection.js";
import { InvalidArgument, Queue, TaskState } from "../src/index.js";
import { fairOrder } from "../src/protocol/groupstore.js";
import { needsPython, python } from "./python.js";
import { RedisServer } from "./redis.js";
import { idAndToken } from "../src/worker/claimed.js";

const server = new RedisServer();
before(() => server.start());
after(() => server.stop());
beforeEach(() => server.flush());

/** Claim up to `n` tasks by hand from the bundle, one call: their ids in claim order. */
async function claim(q: Queue, n: number): Promise<string[]> {
  const bundle = packagedBundle();
  const scripts = new Scripts(q.client, bundle);
  const args = bundle.pack("claim", {
    pod: "hand",
    incarnation: "i1",
    max_tasks: n,
    token_base: "tb",
    bound: 100,
  });
  const reply = (await scripts.run("claim", q.keys, args)) as unknown[];
  return reply.slice(3).map((r) => idAndToken(r)[0]);
}

describe("groups", () => {
  it("stores a task's group, and claims are fair between groups", async () => {
    const q = new Queue("jobs", { redisUrl: server.url });
    try {
      await q.enqueueMany(Array.from({ length: 50 }, (_, i) => ({ payload: { i }, group: "big" })));
      const small = await q.enqueueMany(
        [0, 1].map((i) => ({ payload: { i }, group: "tenant-42" })),
      );
      const one = await q.enqueue({ x: 1 }, { group: "tenant-42", priority: 5 });
      assert.equal((await q.get(one))?.group, "tenant-42");
      const got = await claim(q, 6);
      // served in turn: every task of the small group within the first six claims
      for (const id of [one, ...small]) assert.ok(got.includes(id), id);
      assert.equal(got[0] === one || got[1] === one, true); // its priority first in its group
    } finally {
      await q.close();
    }
  });

  it("refuses a bad group with one line, storing nothing", async () => {
    const q = new Queue("jobs", { redisUrl: server.url });
    try {
      for (const group of ["", "{tag}", "a b", "x".repeat(101)]) {
        await assert.rejects(
          q.enqueue({}, { group }),
          (e: unknown) => e instanceof InvalidArgument && !e.message.includes("\n"),
        );
      }
      await assert.rejects(
        q.enqueueMany([{ payload: {} }, { payload: {}, group: "{bad}" }]),
        /group must be 1-100 characters/,
      );
      assert.equal((await q.stats()).pending, 0);
    } finally {
      await q.close();
    }
  });

  it("cancels, retries and lists by group, as Python does", needsPython, async () => {
    const listed = (name: string): Record<string, string[]> =>
      python(
        `import json, sys
from taskfleet.producer.queue import Queue
url, name = json.load(sys.stdin)
with Queue(name, url) as q:
    print(json.dumps({s: [t.id for t in q.list(s, group="a").tasks] for s in ("pending", "delayed", "running", "dead")}))`,
        [server.url, name],
      );
    const pyCancel = (name: string): Record<string, number> =>
      python(
        `import json, sys
from taskfleet.producer.queue import Queue
url, name = json.load(sys.stdin)
with Queue(name, url) as q:
    print(json.dumps({str(k.value): v for k, v in q.cancel_group("a").items()}))`,
        [server.url, name],
      );
    const queues = [
      new Queue("jobs", { redisUrl: server.url }),
      new Queue("twin", { redisUrl: server.url }),
    ];
    try {
      for (const q of queues) {
        await q.enqueue({}, { taskId: "u1" });
        await q.enqueue({}, { taskId: "a1", group: "a" });
        await q.enqueue({}, { taskId: "b1", group: "b" });
        await q.enqueue({}, { taskId: "a3", group: "a", delayMs: 600_000 });
        await q.enqueue({}, { taskId: "a5", group: "a" });
        // a1 and b1 run and fail for good, a5 keeps running; a2, enqueued after the claim, stays pending
        const bundle = packagedBundle();
        const scripts = new Scripts(q.client, bundle);
        const args = bundle.pack("claim", {
          pod: "hand",
          incarnation: "i1",
          max_tasks: 4,
          token_base: "tb",
          bound: 100,
        });
        const reply = (await scripts.run("claim", q.keys, args)) as unknown[];
        for (const r of reply.slice(3)) {
          const [task_id, token] = idAndToken(r);
          if (task_id === "u1" || task_id === "a5") continue;
          const fail = bundle.pack("fail", {
            task_id,
            token,
            error: "boom",
            retryable: 0,
            jitter: 0,
          });
          await scripts.run("fail", q.keys, fail);
        }
        await q.enqueue({}, { taskId: "a2", group: "a" });
        await q.enqueue({}, { taskId: "a4", group: "a", priority: 5 });
      }
      const [q, twin] = queues as [Queue, Queue];
      const ids = async (
        state: "pending" | "delayed" | "running" | "dead",
        group?: string,
      ): Promise<string[]> =>
        (await q.list(state, group === undefined ? {} : { group })).tasks.map((t) => t.id);
      assert.deepEqual(await ids("pending", "a"), ["a4", "a2"]); // its own order: priority first
      assert.deepEqual(await ids("pending"), ["a4", "a2"]); // without a group: every group's
      assert.deepEqual(await ids("dead", "a"), ["a1"]);
      assert.deepEqual(await ids("running", "a"), ["a5"]);
      assert.deepEqual(await ids("dead", "b"), ["b1"]);
      assert.deepEqual(
        (await q.list("pending", { group: "a", limit: 1 })).tasks.map((t) => t.id),
        ["a4"],
      );
      const page = await q.list("pending", { group: "a", limit: 1 });
      assert.deepEqual(
        (await q.list("pending", { group: "a", cursor: page.cursor })).tasks.map((t) => t.id),
        ["a2"],
      );
      assert.deepEqual(
        {
          pending: await ids("pending", "a"),
          delayed: await ids("delayed", "a"),
          running: await ids("running", "a"),
          dead: await ids("dead", "a"),
        },
        listed("jobs"),
      );
      assert.equal(await q.retry({ group: "a", reason: "other" }), 0);
      assert.equal(await q.retry({ group: "a" }), 1);
      assert.equal((await q.get("a1"))?.state, "pending");
      assert.equal((await q.get("b1"))?.state, "dead");
      assert.equal(await twin.retry({ group: "a" }), 1);
      const counts = await q.cancelGroup("a");
      assert.deepEqual(counts, { cancelled: 4, requested: 1 }); // a1, a2, a4 pending, a3 delayed; a5 running
      assert.deepEqual(counts, pyCancel("twin"));
      assert.equal((await q.get("b1"))?.state, "dead");
      assert.equal((await q.get("u1"))?.state, "running");
      assert.deepEqual(await q.cancelGroup("a"), { requested: 1 }); // a5 runs until its worker hears
    } finally {
      for (const q of queues) await q.close();
    }
  });

  it("refuses a bad group in cancel, retry and list with Python's line", needsPython, async () => {
    const q = new Queue("jobs", { redisUrl: server.url });
    try {
      for (const group of ["", "{tag}", "a b"]) {
        const line = python<string>(
          "import json, sys\nfrom taskfleet.protocol.groups import group_problem\nprint(json.dumps(group_problem(json.load(sys.stdin))))",
          group,
        );
        const same = (e: unknown): boolean => e instanceof InvalidArgument && e.message === line;
        await assert.rejects(q.cancelGroup(group), same);
        await assert.rejects(q.retry({ group }), same);
        await assert.rejects(q.list("pending", { group }), same);
      }
    } finally {
      await q.close();
    }
  });
});

describe("pending across groups", () => {
  it(
    "lists every group's pending tasks in the claim's order, as Python and the claims do",
    needsPython,
    async () => {
      const q = new Queue("jobs", { redisUrl: server.url });
      try {
        await q.setGroup("c", { weight: 2 });
        for (const [group, n] of [
          ["a", 4],
          ["b", 2],
          ["c", 5],
        ] as const) {
          await q.enqueueMany(Array.from({ length: n }, (_, i) => ({ payload: { i }, group })));
        }
        await q.enqueueMany([{ payload: { u: 1 } }, { payload: { u: 2 } }]);
        const listed: string[] = [];
        let cursor: string | null = null;
        do {
          const page = await q.list(TaskState.Pending, { limit: 4, cursor });
          listed.push(...page.tasks.map((t) => t.id));
          cursor = page.cursor;
        } while (cursor !== null);
        assert.equal(new Set(listed).size, 13);
        const fromPython = python<string[]>(
          `import json, sys
from taskfleet.producer.queue import Queue
url = json.load(sys.stdin)
with Queue("jobs", url) as q:
    print(json.dumps([t.id for t in q.list("pending").tasks]))`,
          server.url,
        );
        assert.deepEqual(listed, fromPython);
        const claimed: string[] = [];
        for (let i = 0; i < 13; i++) claimed.push(...(await claim(q, 1)));
        assert.deepEqual(claimed, listed);
      } finally {
        await q.close();
      }
    },
  );

  it("orders lanes by turn and weight, the held ones last (pure)", () => {
    const lanes = [
      { group: "a", turn: 0, weight: 1, size: 3, held: false },
      { group: "b", turn: 0, weight: 2, size: 3, held: false },
      { group: "x", turn: 0, weight: 1, size: 2, held: true },
    ];
    const whole = fairOrder(lanes, 0, 100);
    assert.deepEqual(whole, [
      ["a", 0],
      ["b", 0],
      ["b", 1],
      ["a", 1],
      ["b", 2],
      ["a", 2],
      ["x", 0],
      ["x", 1],
    ]);
    assert.deepEqual(fairOrder(lanes, 2, 3), whole.slice(2, 5));
  });
});

describe("groups fair by spend", () => {
  it("setFairBy stores the unit, 'claims' removes it, and a bad unit is refused", async () => {
    const q = new Queue("jobs", { redisUrl: server.url });
    try {
      await q.setFairBy("output_tokens");
      assert.equal(await q.fairBy(), "output_tokens");
      await q.setFairBy("claims");
      assert.equal(await q.fairBy(), null);
      await assert.rejects(q.setFairBy("Output Tokens"), InvalidArgument);
      assert.equal(await q.fairBy(), null);
    } finally {
      await q.close();
    }
  });

  it("a claim charges the group its task's estimate of that unit", async () => {
    const q = new Queue("jobs", { redisUrl: server.url });
    try {
      await q.setFairBy("output_tokens");
      const est = { llm: { output_tokens: 300 } };
      const big = await q.enqueueMany(
        [0, 1, 2].map((i) => ({ payload: { i }, group: "big", quotas: est })),
      );
      const small = await q.enqueueMany(
        [0, 1, 2].map((i) => ({
          payload: { i },
          group: "small",
          quotas: { llm: { output_tokens: 100 } },
        })),
      );
      // big first (its name sorts first at equal times), then small three times: 300 > 100, 200
      assert.deepEqual(await claim(q, 4), [big[0], ...small]);
    } finally {
      await q.close();
    }
  });
});
