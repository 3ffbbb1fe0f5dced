import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";

import { packagedBundle } from "../src/bundle.js";
import { Scripts } from "../src/connection.js";
import { InvalidArgument, Queue, type QuotaState } from "../src/index.js";
import { needsPython, python } from "./python.js";
import { RedisServer } from "./redis.js";
import { idAndToken } from "../src/worker/claimed.js";

const server = new RedisServer();
before(() => server.start());
after(() => server.stop());
beforeEach(() => server.flush());

/** Run `body` in Python with `q`, a Queue of `jobs` on the test server; its printed JSON. */
function py<T>(body: string, input: unknown = null): T {
  const code = `import json, sys
from taskfleet.producer.queue import Queue
from taskfleet.protocol.groups import GroupSettings
url, arg = json.load(sys.stdin)
with Queue("jobs", url) as q:
    print(json.dumps(${body}))`;
  return python<T>(code, [server.url, input]);
}

/** Claim up to `n` tasks by hand from the bundle: their ids. */
async function claim(q: Queue, n: number): Promise<string[]> {
  const bundle = packagedBundle();
  const args = bundle.pack("claim", {
    pod: "hand",
    incarnation: "i1",
    max_tasks: n,
    token_base: "tb",
    bound: 100,
  });
  const reply = (await new Scripts(q.client, bundle).run("claim", q.keys, args)) as unknown[];
  return reply.slice(3).map((r) => idAndToken(r)[0]);
}

/** Node's quota in the shape of Python's `QuotaState.as_dict`, the clock-dependent part left out. */
function asDict(s: QuotaState): Record<string, unknown> {
  const period = (p: QuotaState["budget"]["day"]): Record<string, unknown> => ({
    period: p.period,
    limit: p.limit,
    spent: p.spent,
    left: p.left,
    resets_at_ms: p.resetsAtMs,
    runtime: p.runtime,
  });
  return {
    paused: s.paused,
    paused_until_ms: s.pausedUntilMs,
    streak: s.streak,
    pause_ms: s.pauseMs,
    reason: s.reason,
    pauses: s.pauses,
    budget: { day: period(s.budget.day), month: period(s.budget.month) },
  };
}

const PY_QUOTA = "{k: v for k, v in q.quota(group=arg).as_dict().items() if k != 'pause_left_ms'}";

async function withQueue(body: (q: Queue) => Promise<void>): Promise<void> {
  const q = new Queue("jobs", { redisUrl: server.url });
  try {
    await body(q);
  } finally {
    await q.close();
  }
}

describe("group settings and quotas", () => {
  it("sets and reads a group's own settings as Python does", needsPython, () =>
    withQueue(async (q) => {
      assert.deepEqual(await q.groupSettings("a"), {
        weight: null,
        maxConcurrency: null,
        rateLimitTasks: null,
        rateLimitCost: null,
      });
      await q.setGroup("a", { weight: 2.5, maxConcurrency: 3 });
      const fromPy = py<Record<string, unknown>>(
        "(lambda s: [s.weight, s.max_concurrency, s.rate_limit_tasks, s.rate_limit_cost])(q.group_settings('a'))",
      );
      assert.deepEqual(fromPy, [2.5, 3, null, null]);
      py("q.set_group('b', GroupSettings(rate_limit_tasks=7, rate_limit_cost=9)) or 0");
      assert.deepEqual(await q.groupSettings("b"), {
        weight: null,
        maxConcurrency: null,
        rateLimitTasks: 7,
        rateLimitCost: 9,
      });
      await q.setGroup("b", {}); // replaced: none of its own
      assert.deepEqual(await q.groupSettings("b"), {
        weight: null,
        maxConcurrency: null,
        rateLimitTasks: null,
        rateLimitCost: null,
      });
      for (const [settings, field] of [
        [{ weight: 0 }, "weight"],
        [{ weight: 1001 }, "weight"],
        [{ maxConcurrency: -1 }, "max_concurrency"],
        [{ rateLimitTasks: 0 }, "rate_limit_tasks"],
        [{ rateLimitCost: 1.5 }, "rate_limit_cost"],
      ] as const) {
        await assert.rejects(
          q.setGroup("a", settings),
          (e: unknown) => e instanceof InvalidArgument && e.message.startsWith(`${field} must be`),
        );
      }
      assert.equal((await q.groupSettings("a")).weight, 2.5); // nothing stored
    }),
  );

  it("lists the groups with tasks, as Python does", needsPython, () =>
    withQueue(async (q) => {
      assert.deepEqual(await q.groups(), []);
      await q.enqueueMany([1, 2, 3].map((i) => ({ payload: { i }, group: "big" })));
      await q.enqueueMany([{ payload: {}, group: "small" }, { payload: {} }]);
      await claim(q, 2);
      const mine = await q.groups();
      const theirs = py<unknown[]>(
        "[[c.group, c.pending, c.running, c.paused_until_ms] for c in q.groups()]",
      );
      assert.deepEqual(
        mine.map((c) => [c.group, c.pending, c.running, c.pausedUntilMs]),
        theirs,
      );
      assert.equal(
        mine.reduce((n, c) => n + c.pending + c.running, 0),
        4,
      );
    }),
  );

  it("pauses and resumes one group's claims, read as Python reads them", needsPython, () =>
    withQueue(async (q) => {
      const [a] = await q.enqueueMany([{ payload: {}, group: "a" }]);
      const [b] = await q.enqueueMany([{ payload: {}, group: "b" }]);
      const until = await q.pauseClaims({ forMs: 600_000, group: "a", reason: "provider 429" });
      const state = await q.quota({ group: "a" });
      assert.equal(state.paused, true);
      assert.equal(state.pausedUntilMs, until);
      assert.equal(state.reason, "provider 429");
      assert.deepEqual(asDict(state), py(PY_QUOTA, "a"));
      assert.equal((await q.quota()).paused, false); // the queue's own pause is not on
      assert.equal((await q.groups()).find((c) => c.group === "a")?.pausedUntilMs, until);
      assert.deepEqual(await claim(q, 10), [b]); // the other group is claimed as before
      await q.resumeClaims({ group: "a" });
      assert.equal((await q.quota({ group: "a" })).paused, false);
      assert.deepEqual(await claim(q, 10), [a]);
      await assert.rejects(q.pauseClaims({ forMs: -1 }), /forMs must be >= 0, not -1/);
      await assert.rejects(
        q.pauseClaims({ forMs: 1000, group: "{x}" }),
        /group must be 1-100 characters/,
      );
      await assert.rejects(q.resumeClaims({ group: "" }), /group must be 1-100 characters/);
    }),
  );

  it("sets a group's budget and the queue's, read as Python reads them", needsPython, () =>
    withQueue(async (q) => {
      await q.configure({ groupBudgetDay: 40 });
      assert.equal((await q.quota({ group: "a" })).budget.day.limit, 40);
      await q.setBudget({ day: 5, month: 100, group: "a" });
      const state = await q.quota({ group: "a" });
      assert.deepEqual(
        [state.budget.day.limit, state.budget.day.runtime, state.budget.month.limit],
        [5, true, 100],
      );
      assert.deepEqual(asDict(state), py(PY_QUOTA, "a"));
      assert.equal((await q.quota()).budget.day.limit, null); // the queue's budget is apart
      await q.setBudget({ day: "default", group: "a" });
      assert.deepEqual(asDict(await q.quota({ group: "a" })), py(PY_QUOTA, "a"));
      assert.equal((await q.quota({ group: "a" })).budget.day.limit, 40);
      await q.setBudget({ month: 7 });
      assert.deepEqual(asDict(await q.quota()), py(PY_QUOTA, null));
      await assert.rejects(
        q.setBudget({ day: -1 }),
        /day must be an int within 0..1000000000 or 'default'/,
      );
      await assert.rejects(q.setBudget({ day: 1, group: "a b" }), /group must be 1-100 characters/);
    }),
  );
});
