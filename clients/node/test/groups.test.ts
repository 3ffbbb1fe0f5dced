import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";

import { packagedBundle } from "../src/bundle.js";
import { Scripts } from "../src/connection.js";
import { InvalidArgument, Queue } from "../src/index.js";
import { RedisServer } from "./redis.js";

const server = new RedisServer();
before(() => server.start());
after(() => server.stop());
beforeEach(() => server.flush());

/** Claim up to `n` tasks by hand from the bundle, one call: their ids in claim order. */
async function claim(q: Queue, n: number): Promise<string[]> {
  const bundle = packagedBundle();
  const scripts = new Scripts(q.client, bundle);
  const args = bundle.pack("claim", { pod: "hand", incarnation: "i1", max_tasks: n, token_base: "tb", bound: 100 });
  const reply = (await scripts.run("claim", q.keys.scriptKeys, args)) as unknown[];
  return reply.slice(3).map((r) => String(r).split("\0")[0] ?? "");
}

describe("groups", () => {
  it("stores a task's group, and claims are fair between groups", async () => {
    const q = new Queue("jobs", { redisUrl: server.url });
    try {
      await q.enqueueMany(Array.from({ length: 50 }, (_, i) => ({ payload: { i }, group: "big" })));
      const small = await q.enqueueMany([0, 1].map((i) => ({ payload: { i }, group: "tenant-42" })));
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
        await assert.rejects(q.enqueue({}, { group }), (e: unknown) => e instanceof InvalidArgument && !e.message.includes("\n"));
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
});
