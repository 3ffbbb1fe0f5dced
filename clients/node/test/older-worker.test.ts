// A live worker of an older release (a record without level >= 2, as taskfleet 0.1.x
// writes it) on the queue: flows, groups, claim pauses, budgets and grouped schedules are
// refused with OlderWorker, one line, nothing stored; plain tasks still go in.
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";

import { OlderWorker, Queue, chain } from "../src/index.js";
import { RedisServer } from "./redis.js";

const server = new RedisServer();
before(() => server.start());
after(() => server.stop());
beforeEach(() => server.flush());

/** A record as a 0.1.x worker's register writes it: no level. */
function olderRecord(heartbeatMs: number): string {
  return JSON.stringify({
    incarnation: "i0",
    heartbeat_ms: heartbeatMs,
    inflight: 0,
    concurrency: 4,
    draining: false,
  });
}

function refused(feature: string): (e: unknown) => boolean {
  return (e: unknown) =>
    e instanceof OlderWorker &&
    e.pod === "old-pod" &&
    e.feature === feature &&
    e.message ===
      `worker 'old-pod' serves queue 'jobs' at level 1 (taskfleet 0.1.x): ${feature} need every worker of the queue at 0.2; upgrade the queue's workers first (docs/upgrade.md)`;
}

describe("a live older worker on the queue", () => {
  it("refuses flows, groups, pauses, budgets and grouped schedules, storing nothing", async () => {
    const q = new Queue("jobs", { redisUrl: server.url });
    try {
      await q.client.hset(q.keys.key("workers"), "old-pod", olderRecord(Date.now()));
      await assert.rejects(q.enqueue({}, { group: "tenant-1" }), refused("groups"));
      const first = await q.enqueue({ plain: true });
      await assert.rejects(q.enqueue({}, { after: [first] }), refused("flows"));
      await assert.rejects(
        q.enqueueFlow(chain({ payload: { a: 1 } }, { payload: { b: 2 } })),
        refused("flows"),
      );
      await assert.rejects(q.pauseClaims({ forMs: 60_000 }), refused("claim pauses"));
      await assert.rejects(q.setBudget({ day: 100 }), refused("spend budgets"));
      await assert.rejects(
        q.schedule("nightly", "0 3 * * *", {}, { group: "g" }),
        refused("groups"),
      );
      const stats = await q.stats();
      assert.equal(stats.pending + stats.waiting, 1); // the plain task alone
      assert.deepEqual(await q.client.hgetall(q.keys.key("quota")), {});
      assert.equal(await q.getSchedule("nightly"), null);
      await q.resumeClaims();
      await q.enqueueMany([{ payload: { x: 1 } }, { payload: { x: 2 } }]);
      assert.equal((await q.stats()).pending, 3);
    } finally {
      await q.close();
    }
  });

  it("refuses nothing once its heartbeat is older than a lease", async () => {
    const q = new Queue("jobs", { redisUrl: server.url });
    try {
      await q.client.hset(q.keys.key("workers"), "old-pod", olderRecord(Date.now() - 120_000));
      await q.enqueue({}, { group: "tenant-1" });
      await q.pauseClaims({ forMs: 60_000 });
      assert.equal((await q.stats()).pending, 1);
    } finally {
      await q.close();
    }
  });
});
