// A 0.2 producer's hand-off to an idle worker is a positional record: no group, no trace.
// The worker reads both from the task hash (one round trip), on a real redis-server.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { Queue } from "../src/index.js";
import { Broker } from "../src/worker/broker.js";
import { RedisServer } from "./redis.js";

describe("an older producer's hand-off", () => {
  const server = new RedisServer();
  before(async () => {
    await server.start();
  });
  after(async () => {
    await server.stop();
  });

  it("runs a grouped, traced task with its group and trace read from the task", async () => {
    const queue = new Queue("jobs", { redisUrl: server.url });
    const broker = new Broker("jobs", queue.client, "p", "i", {
      replyTimeoutMs: 5000,
      host: "",
      served: null,
    });
    try {
      await broker.register(2);
      const workers = queue.keys.key("workers");
      const record = JSON.parse((await queue.client.hget(workers, "p")) ?? "{}") as Record<
        string,
        unknown
      >;
      delete record.claim_record; // the producer writes the positional form, as 0.2 does
      await queue.client.hset(workers, "p", JSON.stringify(record));
      assert.deepEqual((await broker.claim(2, 30_000)).tasks, []);
      const id = await queue.enqueue({ handed: "over" }, { group: "tenant-a" });
      const carrier = '{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}';
      await queue.client.hset(queue.keys.item("task", id), "trace", carrier);
      const [raw] = await queue.client.lrange(queue.keys.item("wake", "p"), 0, -1);
      assert.ok(raw !== undefined && !raw.startsWith("\x013"));

      const handed = (await broker.waitForWork(1))?.tasks[0];

      assert.deepEqual(
        [handed?.id, handed?.group, handed?.trace, handed?.unread],
        [id, "tenant-a", carrier, false],
      );
    } finally {
      broker.dropBlocking();
      await queue.close();
    }
  });
});
