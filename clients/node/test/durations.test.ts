import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";

import { InvalidArgument, Queue, WaitTimeout } from "../src/index.js";
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
});
