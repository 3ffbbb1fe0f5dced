// The protocol's number rule in the Node client (docs/protocol.md, section 1), options
// objects refused for keys they do not take, and what a thrown non-Error is stored as:
// with a real redis-server and a real worker process.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, afterEach, before, beforeEach, describe, it } from "node:test";

import {
  type EnqueueItem,
  InvalidArgument,
  InvalidPayload,
  Queue,
  TaskfleetError,
  chain,
} from "../src/index.js";
import { RedisServer } from "./redis.js";
import { WorkerProcess } from "./workers.js";

const REFUSED: [string, Record<string, unknown>, RegExp][] = [
  [
    "2^53",
    { n: 2 ** 53 },
    /payload\.n: integer 9007199254740992 is outside ±\(2\^53-1\); send it as a string$/,
  ],
  [
    "2^63+1",
    { items: [{}, {}, {}, { id: 2 ** 63 + 1 }] },
    /payload\.items\[3\]\.id: integer 9223372036854775808 is outside/,
  ],
  ["-2^53", { n: -(2 ** 53) }, /payload\.n: integer -9007199254740992 is outside/],
  [
    "1e400",
    { n: Number("1e400") },
    /payload\.n: Infinity is not a finite number; JSON cannot carry it$/,
  ],
  ["NaN", { "a b": [NaN] }, /payload\["a b"\]\[0\]: NaN is not a finite number/],
];

describe("the number rule, options and thrown values, on a real server", () => {
  const server = new RedisServer();
  let queue: Queue;
  let dir: string;
  const started: WorkerProcess[] = [];

  before(async () => {
    await server.start();
  });
  after(async () => {
    await server.stop();
  });
  beforeEach(async () => {
    await server.flush();
    dir = mkdtempSync(join(tmpdir(), "taskfleet-node-numbers-"));
    queue = new Queue("jobs", { redisUrl: server.url });
  });
  afterEach(async () => {
    await Promise.all(started.splice(0).map((w) => w.stop()));
    await queue.close();
    rmSync(dir, { recursive: true, force: true });
  });

  for (const [what, payload, message] of REFUSED) {
    it(`refuses ${what} in a payload with its path, whatever the call, and stores nothing`, async () => {
      await assert.rejects(
        queue.enqueue(payload),
        (e: unknown) => e instanceof InvalidPayload && message.test(e.message),
      );
      await assert.rejects(queue.enqueueMany([{ payload: {} }, { payload }]), message);
      await assert.rejects(queue.enqueueFlow(chain({ payload: {} }, { payload })), message);
      await assert.rejects(queue.schedule("nightly", "0 3 * * *", payload), message);
      assert.equal(await queue.client.dbsize(), 0);
    });
  }

  it("stores the largest safe integers, 1e21 and long digits in strings as given", async () => {
    const payload = { max: 2 ** 53 - 1, min: -(2 ** 53 - 1), big: 1e21, id: "9223372036854775809" };
    const task = await queue.get(await queue.enqueue(payload));
    assert.deepEqual(task?.payload, payload);
  });

  it("refuses an unknown or symbol option key, naming it and the option likely meant; nothing stored", async () => {
    const options = { priorty: 5 } as unknown as { priority: number };
    await assert.rejects(
      queue.enqueue({}, options),
      (e: unknown) =>
        e instanceof InvalidArgument &&
        e instanceof TaskfleetError &&
        /enqueue options has no option 'priorty' \(did you mean 'priority'\?\)/.test(e.message),
    );
    const symbolic = { [Symbol("priority")]: 5 } as unknown as { priority: number };
    await assert.rejects(
      queue.enqueue({}, symbolic),
      /enqueue options takes no symbol keys, not Symbol\(priority\)/,
    );
    await assert.rejects(
      queue.enqueueMany([{ payload: {}, maxAtempts: 2 } as unknown as EnqueueItem]),
      /unknown enqueue field\(s\): maxAtempts \(did you mean 'maxAttempts'\?\)/,
    );
    await assert.rejects(
      queue.enqueueMany([{ payload: {} }], { tracecontext: {} } as unknown as object),
      /did you mean 'traceContext'/,
    );
    await assert.rejects(
      queue.schedule("n", "0 3 * * *", {}, { timezone: "UTC" } as unknown as object),
      /schedule options has no option 'timezone'/,
    );
    await assert.rejects(
      queue.list("dead", { limt: 5 } as unknown as object),
      /did you mean 'limit'/,
    );
    assert.throws(
      () => new Queue("jobs", { redis_url: server.url } as unknown as object),
      /did you mean 'redisUrl'/,
    );
    assert.equal(await queue.client.dbsize(), 0);
  });

  it("fails a task whose result or progress breaks the rule, stores a thrown non-Error usefully, and runs on", async () => {
    const w = WorkerProcess.node([
      "--queue",
      "jobs",
      "--redis-url",
      server.url,
      "--pod",
      "w1",
      "--runtime-dir",
      join(dir, "rt"),
      "--no-fire-schedules",
      "--handler",
      "./worker_handlers.mjs:registry",
    ]);
    started.push(w);
    const asks = [
      "big result",
      "infinite result",
      "big progress",
      "object",
      "undefined",
      "empty error",
      "fine",
    ];
    const ids = await queue.enqueueMany(
      asks.map((ask) => ({
        payload: { ask },
        name: "numbers",
        maxAttempts: 1,
        taskId: ask.replace(" ", "-"),
      })),
    );
    const done = await queue.wait(ids, { timeoutMs: 20_000 });
    const error = (id: string): string | null | undefined => done[id]?.error;
    assert.equal(
      error("big-result"),
      "TypeError: result.id: integer 9223372036854775808 is outside ±(2^53-1); send it as a string",
      w.output,
    );
    assert.equal(
      error("infinite-result"),
      "TypeError: result[1]: Infinity is not a finite number; JSON cannot carry it",
    );
    assert.match(
      error("big-progress") ?? "",
      /^RangeError: progress\.total: integer 1152921504606846976 is outside/,
    );
    assert.equal(error("object"), 'Error: object thrown: {"code":42,"detail":"quota"}');
    assert.equal(error("undefined"), "Error: undefined thrown");
    assert.equal(error("empty-error"), "Error");
    for (const id of ids.slice(0, -1)) assert.equal(done[id]?.state, "dead", id);
    assert.equal(done.fine?.state, "done");
    assert.equal(done["big-result"]?.result, null);
  });

  it("refuses to run a stored payload holding an integer past the rule (an older writer's): the task goes dead, not rounded", async () => {
    const id = await queue.enqueue({ id: 1 }, { name: "numbers" });
    // as an older writer (or a hand edit) stored it
    await queue.client.hset(
      queue.keys.item("task", id),
      "payload",
      '\x01numbers\x01{"id":9223372036854775809}',
    );
    const w = WorkerProcess.node([
      "--queue",
      "jobs",
      "--redis-url",
      server.url,
      "--pod",
      "w2",
      "--runtime-dir",
      join(dir, "rt2"),
      "--no-fire-schedules",
      "--handler",
      "./worker_handlers.mjs:registry",
    ]);
    started.push(w);
    const task = (await queue.wait([id], { timeoutMs: 20_000 }))[id];
    assert.equal(task?.state, "dead", w.output);
    assert.equal(task.reason, "bad payload");
    assert.match(task.error ?? "", /payload: integer 9223372036854775809 is outside ±\(2\^53-1\)/);
  });
});
