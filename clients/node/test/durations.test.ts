import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";

import {
  type EnqueueCallOptions,
  InvalidArgument,
  Quota,
  Queue,
  RateLimited,
  RetryAfter,
  WaitTimeout,
  Worker,
  currentTask,
} from "../src/index.js";
import { checkSettings } from "../src/worker/settings.js";
import { packagedBundle } from "../src/bundle.js";
import { Scripts } from "../src/connection.js";
import { RedisServer, until } from "./redis.js";

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

async function sweep(q: Queue): Promise<unknown> {
  const bundle = packagedBundle();
  return new Scripts(q.client, bundle).run("sweep", q.keys, bundle.pack("sweep", { bound: 1000 }));
}

/** Rejects with an InvalidArgument whose one line matches `message`. */
async function refused(call: Promise<unknown>, message: RegExp): Promise<void> {
  await assert.rejects(
    call,
    (e: unknown) =>
      e instanceof InvalidArgument && !e.message.includes("\n") && message.test(e.message),
  );
}

// untyped calls, as JavaScript or an `any` would make them
const untyped = (options: Record<string, unknown>): Record<string, never> =>
  options as Record<string, never>;

describe("durations in milliseconds", () => {
  it("runs a task enqueued with delayMs: 60000 one minute after it was created", () =>
    withQueue(async (q) => {
      const task = await q.get(await q.enqueue({}, { delayMs: 60_000 }));
      assert.equal(task?.state, "delayed");
      assert.ok(task.runAt !== null && task.createdAt !== null);
      assert.equal(task.runAt.getTime() - task.createdAt.getTime(), 60_000);
    }));

  it("converts timeoutMs and deadlineMs to what the scripts store", () =>
    withQueue(async (q) => {
      const task = await q.get(await q.enqueue({}, { timeoutMs: 2500, deadlineMs: 90_000 }));
      assert.equal(task?.timeoutMs, 2500);
      const raw = await q.client.hget(q.keys.item("task", task.id), "timeout");
      assert.equal(raw, "2.5");
      assert.ok(task.deadline !== null && task.createdAt !== null);
      assert.equal(task.deadline.getTime() - task.createdAt.getTime(), 90_000);
      const [item] = await q.enqueueMany([{ payload: {}, delayMs: 1500 }]);
      const later = await q.get(item ?? "");
      assert.equal((later?.runAt?.getTime() ?? 0) - (later?.createdAt?.getTime() ?? 0), 1500);
    }));

  it("refuses delay: 60000, a seconds name, with one line naming delayMs, and stores nothing", () =>
    withQueue(async (q) => {
      await refused(
        q.enqueue({}, untyped({ delay: 60_000 })),
        /enqueue options has no option 'delay' \(durations are milliseconds, in options named \.\.\.Ms: 'delayMs'\)/,
      );
      await refused(q.enqueue({}, untyped({ timeout: 30 })), /no option 'timeout' .*'timeoutMs'/);
      await refused(
        q.enqueue({}, untyped({ deadline: 60 })),
        /deadline must be a Date, not number \(for a time from now: deadlineMs, in milliseconds\)/,
      );
      await refused(
        q.enqueueMany([{ payload: {}, ...untyped({ delay: 60 }) }]),
        /unknown enqueue field\(s\): delay \(.*'delayMs'\)/,
      );
      await refused(
        q.enqueue({}, { deadline: new Date(Date.now() + 1000), deadlineMs: 1000 }),
        /not both/,
      );
      assert.equal((await q.stats()).delayed + (await q.stats()).pending, 0);
    }));

  it("refuses the options a BullMQ user types, each naming taskfleet's own", () =>
    withQueue(async (q) => {
      const hints: [string, RegExp][] = [
        ["attempts", /attempts'? \(taskfleet's is 'maxAttempts'/],
        ["jobId", /jobId'? \(taskfleet's is 'taskId'/],
        ["backoff", /backoff'? \(.*configure\(\{ backoffBaseMs, backoffMaxMs \}\)/],
        ["removeOnComplete", /removeOnComplete'? \(.*doneRetentionMs/],
        ["removeOnFail", /removeOnFail'? \(.*deadRetentionMs/],
        ["repeat", /repeat'? \(.*queue\.schedule\(name, cron, payload\)/],
        ["lifo", /lifo'? \(taskfleet has no LIFO order; use 'priority'/],
      ];
      for (const [key, message] of hints) {
        await refused(q.enqueue({}, untyped({ [key]: 3 })), message);
        await refused(q.enqueueMany([{ payload: {}, ...untyped({ [key]: 3 }) }]), message);
      }
      assert.equal((await q.stats()).pending, 0);
    }));

  it("converts every Worker duration from milliseconds to the seconds its loops use, and refuses the old names", () => {
    const settings = checkSettings(
      "jobs",
      {
        drainTimeoutMs: 1500,
        heartbeatIntervalMs: 250,
        leaseTtlMs: 60_000,
        taskTimeoutMs: 30_000,
        heldGraceMs: 90_000,
        idleWaitMs: 500,
      },
      "p",
      "i",
    );
    assert.deepEqual(
      [
        settings.drainTimeout,
        settings.heartbeatInterval,
        settings.leaseTtl,
        settings.taskTimeout,
        settings.heldGrace,
        settings.idleWait,
      ],
      [1.5, 0.25, 60, 30, 90, 0.5],
    );
    const defaults = checkSettings("jobs", {}, "p", "i");
    assert.deepEqual(
      [defaults.drainTimeout, defaults.heartbeatInterval, defaults.idleWait],
      [30, 5, 1],
    );
    for (const old of [
      "drainTimeout",
      "heartbeatInterval",
      "leaseTtl",
      "taskTimeout",
      "heldGrace",
      "idleWait",
    ]) {
      assert.throws(
        () => checkSettings("jobs", untyped({ [old]: 30 }), "p", "i"),
        (e: unknown) =>
          e instanceof InvalidArgument &&
          e.message.includes(
            `no option '${old}' (durations are milliseconds, in options named ...Ms: '${old}Ms')`,
          ),
        old,
      );
    }
  });

  it("waits timeoutMs milliseconds, and refuses a bare number or the old timeout name", () =>
    withQueue(async (q) => {
      const id = await q.enqueue({});
      await refused(
        q.wait([id], 30 as never),
        /wait takes \{ timeoutMs \} \(milliseconds\), not a number/,
      );
      await refused(
        q.wait([id], untyped({ timeout: 30 }) as never),
        /no option 'timeout' .*'timeoutMs'/,
      );
      await refused(
        q.wait([id], { timeoutMs: -1 }),
        /^wait timeoutMs must be >= 0 milliseconds, not -1$/,
      );
      await refused(
        q.configure({ backoffBaseMs: -5 }),
        /^invalid queue config: backoffBaseMs must be at least 0 and at most \d+ ms, not -5$/,
      );
      const started = performance.now();
      await assert.rejects(
        q.wait([id], { timeoutMs: 200 }),
        (e: unknown) => e instanceof WaitTimeout && e.unfinished.join() === id,
      );
      const took = performance.now() - started;
      assert.ok(took >= 150 && took < 5000, `waited ${took} ms`);
    }));

  it("pauses claims for forMs and filters by olderThanMs, refusing the old seconds forms", () =>
    withQueue(async (q) => {
      const before = Date.now();
      const end = await q.pauseClaims({ forMs: 60_000 });
      assert.ok(
        end - before >= 59_000 && end - before <= 61_000,
        `pause ends ${end - before} ms from now`,
      );
      await refused(
        q.pauseClaims(60 as never),
        /pauseClaims takes \{ forMs \} \(milliseconds\), not a number/,
      );
      await refused(
        q.list("dead", untyped({ olderThan: 60 })),
        /no option 'olderThan' .*'olderThanMs'/,
      );
      await refused(
        q.list("dead", { olderThanMs: -1 }),
        /olderThanMs must be 0\.\.3153600000000 ms, not -1/,
      );
      await q.resumeClaims();
      const id = await q.enqueue({}, { deadlineMs: 1 });
      await until("the sweep expires the task", async () => {
        await sweep(q);
        return (await q.get(id))?.state === "dead";
      });
      assert.equal(await q.retry({ olderThanMs: 3_600_000 }), 0);
      // 1000 read as seconds would never match within the deadline
      await until(
        "the dead task is older than 1000 ms",
        async () => (await q.retry({ olderThanMs: 1000 })) === 1,
      );
    }));

  it("retries a task whose handler threw new RetryAfter(60000) one minute later, not 16.7 hours", () =>
    withQueue(async (q) => {
      const stored = await handled(q, () => {
        throw new RetryAfter(60_000, "upstream busy");
      });
      assert.equal(stored.task.state, "delayed");
      assert.equal(stored.task.deferred, 1);
      const due = (stored.task.runAt?.getTime() ?? 0) - stored.thrownAt;
      assert.ok(due >= 55_000 && due <= 65_000, `due ${due} ms after the throw`);
    }));

  it("pauses the queue a RateLimited(60000) handler met for one minute, and its group or quota alike", () =>
    withQueue(async (q) => {
      const plain = await handled(q, () => {
        throw new RateLimited(60_000, "429");
      });
      const pause = await q.client.hget(q.keys.key("quota"), "until");
      assertAboutAMinute(Number(pause) - plain.thrownAt, "the queue's pause");
      await q.resumeClaims();
      await server.flush();
      const grouped = await handled(
        q,
        () => {
          throw new RateLimited(60_000, "429", { scope: "group" });
        },
        { group: "t1" },
      );
      const groupPause = await q.client.hget(q.keys.item("group", "t1"), "until");
      assertAboutAMinute(Number(groupPause) - grouped.thrownAt, "the group's pause");
      await server.flush();
      const openai = new Quota("openai", { redisUrl: server.url });
      try {
        await openai.configure({ limits: { requests: 1000 }, periodMs: 60_000 });
        const quota = await handled(
          q,
          () => {
            throw new RateLimited(60_000, "429", { quota: "openai" });
          },
          { quotas: { openai: { requests: 1 } } },
        );
        const state = await openai.get();
        assertAboutAMinute((state?.pausedUntilMs ?? 0) - quota.thrownAt, "the quota's pause");
      } finally {
        await openai.close();
      }
    }));

  it("pauses for reportQuota's resetAfterMs: 60000 one minute", () =>
    withQueue(async (q) => {
      const reported = await handled(q, () => {
        currentTask().reportQuota({ remaining: 0, resetAfterMs: 60_000 });
        return "ok";
      });
      assert.equal(reported.task.state, "done");
      const pause = await q.client.hget(q.keys.key("quota"), "until");
      assertAboutAMinute(Number(pause) - reported.thrownAt, "the reported pause");
    }));

  it("refuses a negative, non-finite or unnumbered handler delay with one line naming milliseconds", () => {
    for (const bad of [-1, Number.NaN, Infinity, 4e12]) {
      assert.throws(
        () => new RetryAfter(bad),
        (e: unknown) =>
          e instanceof RangeError &&
          e.message === `RetryAfter delayMs must be 0..3153600000000 ms, not ${String(bad)}`,
      );
      assert.throws(
        () => new RateLimited(bad),
        (e: unknown) =>
          e instanceof RangeError &&
          /^RateLimited retryAfterMs must be 0\.\.\d+ ms, not /.test(e.message),
      );
    }
    assert.throws(
      () => new RetryAfter("60s" as unknown as number),
      /^TypeError: RetryAfter delayMs must be milliseconds \(a number\), not string$/,
    );
    assert.equal(new RetryAfter(1500).delayMs, 1500);
    assert.equal(new RateLimited(1500).retryAfterMs, 1500);
    assert.equal(new RateLimited(1500).message, "rate limited, retry after 1500 ms");
  });
});

/** Within a second or so of one minute (a minute read as seconds would be 16.7 hours). */
function assertAboutAMinute(ms: number, what: string): void {
  assert.ok(ms >= 55_000 && ms <= 65_000, `${what} lasts ${ms} ms`);
}

/**
 * Run one task with `handler` on a worker in this process; resolves once the task is
 * no longer pending or running, with the stored task and when the handler ran (epoch ms).
 */
async function handled(
  q: Queue,
  handler: () => unknown,
  options: EnqueueCallOptions = {},
): Promise<{ task: NonNullable<Awaited<ReturnType<Queue["get"]>>>; thrownAt: number }> {
  let thrownAt = 0;
  const worker = new Worker("jobs", {
    redisUrl: server.url,
    pod: "durations",
    fireSchedules: false,
    handler: () => {
      thrownAt = Date.now();
      return handler();
    },
  });
  const running = worker.run();
  try {
    const id = await q.enqueue({}, options);
    const outcome = async (): Promise<Awaited<ReturnType<Queue["get"]>>> => {
      const task = await q.get(id);
      return task !== null && thrownAt > 0 && !["pending", "running"].includes(task.state)
        ? task
        : null;
    };
    await until("the handler's outcome is stored", async () => (await outcome()) !== null);
    const task = await outcome();
    assert.ok(task !== null);
    return { task, thrownAt };
  } finally {
    worker.drain();
    assert.equal(await running, 0);
  }
}
