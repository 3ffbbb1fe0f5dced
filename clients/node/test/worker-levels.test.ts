// The level of each worker in `Queue.workers()` against a real redis-server: what this
// release's register writes, a 0.1.x record (no level) and an unreadable level read as 1;
// `olderWorkers` names the live older ones only, `olderWorkersNote` says so in the words of
// the Python CLI and the operator.
import assert from "node:assert/strict";
import { after, afterEach, before, beforeEach, describe, it } from "node:test";

import {
  CURRENT_LEVEL,
  Queue,
  WORKER_LEVEL,
  olderWorkers,
  olderWorkersNote,
} from "../src/index.js";
import { Broker } from "../src/worker/broker.js";
import { RedisServer } from "./redis.js";

/** A record as a 0.1.x worker's register writes it: no level. */
function olderRecord(heartbeatMs: number, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({
    incarnation: "i0",
    heartbeat_ms: heartbeatMs,
    inflight: 0,
    concurrency: 4,
    draining: false,
    ...extra,
  });
}

describe("the workers' levels", () => {
  const server = new RedisServer();
  let queue: Queue;

  before(() => server.start());
  after(() => server.stop());
  beforeEach(async () => {
    await server.flush();
    queue = new Queue("jobs", { redisUrl: server.url });
  });
  afterEach(() => queue.close());

  it("reads this release's level, 1 for a record without one or with one it cannot read, and names the live older workers", async () => {
    const broker = new Broker("jobs", queue.client, "new-pod", "inc-1", {
      replyTimeoutMs: 5000,
      host: "",
      served: null,
    });
    try {
      await broker.register(2);
    } finally {
      broker.close();
    }
    const now = Date.now();
    const workers = queue.keys.key("workers");
    await queue.client.hset(workers, "old-pod", olderRecord(now));
    await queue.client.hset(workers, "odd-pod", olderRecord(now, { level: "two" }));
    await queue.client.hset(workers, "gone-pod", olderRecord(now - 120_000)); // silent for longer than a lease
    await queue.client.hset(workers, "text-pod", olderRecord(now, { level: "2" })); // a 0.2 worker: current

    const found = await queue.workers();
    assert.deepEqual(
      found.map((w) => [w.pod, w.level, w.alive]),
      [
        ["gone-pod", 1, false],
        ["new-pod", WORKER_LEVEL, true],
        ["odd-pod", 1, true],
        ["old-pod", 1, true],
        ["text-pod", 2, true],
      ],
    );
    assert.deepEqual([WORKER_LEVEL, CURRENT_LEVEL], [3, 2]);
    const older = olderWorkers(found);
    assert.deepEqual(older, ["odd-pod", "old-pod"]);
    assert.equal(
      olderWorkersNote(older),
      "workers odd-pod, old-pod run taskfleet 0.1.x (level 1): flows, groups, claim pauses and spend budgets are not served by them; upgrade them (docs/upgrade.md)",
    );
  });

  it("has no older workers when every live one is of this release", async () => {
    const broker = new Broker("jobs", queue.client, "new-pod", "inc-1", {
      replyTimeoutMs: 5000,
      host: "",
      served: null,
    });
    try {
      await broker.register(1);
    } finally {
      broker.close();
    }
    assert.deepEqual(olderWorkers(await queue.workers()), []);
  });

  it("names one worker, or three and counts the rest, as the Python note does", () => {
    assert.equal(
      olderWorkersNote(["old-pod"]),
      "worker old-pod runs taskfleet 0.1.x (level 1): flows, groups, claim pauses and spend budgets are not served by it; upgrade it (docs/upgrade.md)",
    );
    assert.match(
      olderWorkersNote(["a", "b", "c", "d", "e"]),
      /^workers a, b, c and 2 more run taskfleet 0\.1\.x \(level 1\): /,
    );
    assert.match(olderWorkersNote(["a"], 3), /^worker a runs taskfleet level 3 \(level 3\): /);
  });
});
