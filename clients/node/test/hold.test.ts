// The hold after a provider's rate limit: a task that starts while the pause is being
// written waits before its call and, given back, never calls the provider; after the
// resume, tasks run again (as the Python worker's async handlers and threads hold).
import assert from "node:assert/strict";
import { describe, it } from "node:test";

import type { ClaimedTask } from "../src/worker/claimed.js";
import { Execution, type Outcome } from "../src/worker/execution.js";
import { RateLimited } from "../src/worker/failures.js";
import { Flag } from "../src/worker/flag.js";
import { HandlerSet } from "../src/worker/handlers.js";

function task(id: string, payload: Record<string, unknown>): ClaimedTask {
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
    group: null,
    after: "",
    deadlineMs: null,
  };
}

/** Every ready callback and microtask runs; nothing here sleeps. */
async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

function execution(calls: number[]): { execution: Execution; outcomes: Outcome[] } {
  const outcomes: Outcome[] = [];
  const handlers = HandlerSet.of((payload: Record<string, unknown>) => {
    if (payload.limited === true) throw new RateLimited(30_000);
    calls.push(payload.n as number);
    return null;
  }, undefined);
  const ex = new Execution({
    queue: "q",
    pod: "p",
    incarnation: "i",
    concurrency: 4,
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
  });
  return { execution: ex, outcomes };
}

describe("the rate limit's hold", () => {
  it("a task started during the hold is given back without calling the provider", async () => {
    const calls: number[] = [];
    const { execution: ex, outcomes } = execution(calls);
    ex.startAll([task("limited", { limited: true })]);
    await settle();
    assert.equal(outcomes.length, 1);
    ex.startAll([task("next", { n: 1 })]);
    await settle();
    assert.deepEqual(calls, []);
    const held = ex.withdrawHeld();
    assert.deepEqual(
      held.map((r) => r.task.id),
      ["next"],
    );
    ex.forget(held);
    ex.resumeHold();
    await settle();
    assert.deepEqual(calls, []);
    assert.equal(outcomes.length, 1);
    ex.startAll([task("after", { n: 2 })]);
    await settle();
    assert.deepEqual(calls, [2]);
  });

  it("a held task not given back runs after the resume", async () => {
    const calls: number[] = [];
    const { execution: ex } = execution(calls);
    ex.startAll([task("limited", { limited: true })]);
    await settle();
    ex.startAll([task("next", { n: 1 })]);
    await settle();
    assert.deepEqual(calls, []);
    ex.resumeHold();
    await settle();
    assert.deepEqual(calls, [1]);
  });
});
