// A claim pause and the runs held before their call: reportQuota holds them as a
// RateLimited does, and once the pause is written it covers only what it pauses: a
// group's pause gives back that group's held runs, the others call (their groups from
// their claim records; a pausing task no longer held has its group read from a real
// redis-server); a queue pause, or a group pause of a task in no group, all.
import assert from "node:assert/strict";
import { after, afterEach, before, beforeEach, describe, it } from "node:test";

import { Queue } from "../src/index.js";
import { Broker } from "../src/worker/broker.js";
import type { ClaimedTask } from "../src/worker/claimed.js";
import type { QuotaSink, TaskContext } from "../src/worker/context.js";
import { Execution, type Outcome } from "../src/worker/execution.js";
import { RateLimited } from "../src/worker/failures.js";
import { Flag } from "../src/worker/flag.js";
import { HandlerSet } from "../src/worker/handlers.js";
import { type Pauses, coveredRuns } from "../src/worker/pauses.js";
import { RedisServer } from "./redis.js";

function task(
  id: string,
  payload: Record<string, unknown>,
  group: string | null = null,
): ClaimedTask {
  return {
    id,
    token: `tok-${id}`,
    payload,
    attempts: 1,
    maxAttempts: 3,
    timeout: null,
    lost: 0,
    priority: 0,
    cost: 1,
    waited: null,
    name: null,
    trace: null,
    group,
    after: "",
    deadlineMs: null,
  };
}

/** Every ready callback and microtask runs; nothing here sleeps. */
async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

/** Handlers: `limited` meets a group's 429, `reporter` reports its quota spent, others call. */
function execution(calls: string[], reportQuota?: QuotaSink): Execution {
  const handlers = HandlerSet.of((payload: Record<string, unknown>, t: TaskContext) => {
    if (payload.limited === true) throw new RateLimited(30_000, "429", { scope: "group" });
    if (payload.reporter === true) {
      t.reportQuota({ remaining: 0, resetAfterMs: 30_000, scope: "group" });
      return null;
    }
    calls.push(t.id);
    return null;
  }, undefined);
  const outcomes: Outcome[] = [];
  return new Execution({
    queue: "jobs",
    pod: "p",
    incarnation: "i",
    concurrency: 8,
    defaultTimeout: null,
    handlers,
    outbox: {
      add: (o: Outcome) => outcomes.push(o),
      get size() {
        return outcomes.length;
      },
    },
    slotFreed: new Flag(),
    changed: () => undefined,
    report: () => undefined,
    reportQuota,
  });
}

describe("a claim pause's hold", () => {
  it("reportQuota at 0 holds a run that starts before its pause is written", async () => {
    const calls: string[] = [];
    const reported: unknown[][] = [];
    const ex = execution(calls, (...args) => reported.push(args));
    ex.startAll([task("reporter", { reporter: true })]);
    await settle();
    assert.deepEqual(reported, [
      ["reporter", "tok-reporter", 30_000, true, "provider quota spent (remaining 0)"],
    ]);
    ex.startAll([task("next", {})]);
    await settle();
    assert.deepEqual(calls, []); // held before its call
    assert.deepEqual(
      ex.heldRuns().map((r) => r.task.id),
      ["next"],
    );
    ex.resumeHold();
    await settle();
    assert.deepEqual(calls, ["next"]);
  });
});

describe("the runs a written pause covers", () => {
  const server = new RedisServer();
  let queue: Queue;
  let broker: Broker;

  before(async () => {
    await server.start();
  });
  after(async () => {
    await server.stop();
  });
  beforeEach(async () => {
    await server.flush();
    queue = new Queue("jobs", { redisUrl: server.url });
    broker = new Broker("jobs", queue.client, "p", "i", {
      replyTimeoutMs: 5000,
      host: "",
      served: null,
    });
  });
  afterEach(async () => {
    await queue.close();
  });

  /** `limited` (in `group`) meets its 429 while a1, b1 (groups a, b) and n1 (none) start. */
  async function heldBehind(group: string | undefined, calls: string[]): Promise<Execution> {
    await queue.enqueueMany([
      { payload: { limited: true }, taskId: "limited", ...(group === undefined ? {} : { group }) },
      { payload: {}, taskId: "a1", group: "a" },
      { payload: {}, taskId: "b1", group: "b" },
      { payload: {}, taskId: "n1" },
    ]);
    const ex = execution(calls);
    ex.startAll([task("limited", { limited: true }, group ?? null)]);
    await settle();
    ex.startAll([task("a1", {}, "a"), task("b1", {}, "b"), task("n1", {})]);
    await settle();
    assert.deepEqual(calls, []);
    return ex;
  }

  const groupsOf = (ids: readonly string[]): Promise<string[]> => broker.groupsOf(ids);
  const unread = (): Promise<string[]> =>
    Promise.reject(new Error("no read: the records carry the groups"));
  const groupOf = (ex: Execution) => (id: string) => ex.held.get(id)?.task.group;
  const notHeld = (): undefined => undefined;

  it("a group's pause gives back that group's held runs; the others call", async () => {
    const calls: string[] = [];
    const ex = await heldBehind("a", calls);
    const pauses: Pauses = [["limited", true]];
    const covered = await coveredRuns(ex.heldRuns(), pauses, groupOf(ex), unread);
    assert.deepEqual(
      ex.withdrawHeld(covered).map((r) => r.task.id),
      ["a1"],
    );
    ex.resumeHold();
    await settle();
    assert.deepEqual(calls.sort(), ["b1", "n1"]);
  });

  it("a pausing task no longer held has its group read; the held runs' groups are their records'", async () => {
    const calls: string[] = [];
    const ex = await heldBehind("b", calls);
    const runs = ex.heldRuns();
    assert.deepEqual(
      (await coveredRuns(runs, [["limited", true]], notHeld, groupsOf)).map((r) => r.task.id),
      ["b1"],
    );
    ex.withdrawHeld(runs);
    ex.resumeHold();
    await settle();
  });

  it("a group pause of a task in no group, or a queue pause, gives back every held run", async () => {
    const calls: string[] = [];
    const ex = await heldBehind(undefined, calls);
    const all = ex.heldRuns();
    assert.deepEqual((await coveredRuns(all, [["limited", true]], groupOf(ex), unread)).length, 3);
    assert.deepEqual((await coveredRuns(all, [["limited", false]], notHeld, unread)).length, 3);
    assert.deepEqual(ex.withdrawHeld(all).length, 3);
    ex.resumeHold();
    await settle();
    assert.deepEqual(calls, []);
  });
});
