// Queue.configure / Queue.config against the Python package's QueueConfig: the same
// fields, defaults and bounds, refusals for the same inputs, the same bytes stored.
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";

import { InvalidArgument, Queue, defaultConfig } from "../src/index.js";
import { needsPython, python } from "./python.js";
import { RedisServer } from "./redis.js";

const snake = (name: string): string => name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
/** Node's settings (durations in ms, `...Ms`) as Python's (seconds, `..._s`). */
const asPython = (settings: Record<string, unknown>): Record<string, unknown> =>
  Object.fromEntries(
    Object.entries(settings).map(([k, v]) =>
      k.endsWith("Ms")
        ? [`${snake(k.slice(0, -2))}_s`, typeof v === "number" ? v / 1000 : v]
        : [snake(k), v],
    ),
  );

/** Inputs each client must refuse (Node option names; Python gets the stored names). */
const REFUSED: Record<string, unknown>[] = [
  { maxConcurrency: -1 },
  { maxAttempts: 0 },
  { maxAttempts: 10_001 },
  { rateLimitTasks: 0 },
  { rateLimitTasks: 1.5 },
  { leaseTtlMs: 500 },
  { backoffJitter: 1.5 },
  { backoffBaseMs: 10_000, backoffMaxMs: 5000 },
  { throttleBaseMs: 10_000, throttleMaxMs: 5000 },
  { maxPayloadBytes: 0 },
  { budgetDay: 1e9 + 1 },
  { defaultTimeoutMs: 0 },
  { groupMaxConcurrency: -1 },
];

describe("Queue.configure", () => {
  const server = new RedisServer();
  let queue: Queue;
  before(() => server.start());
  after(() => server.stop());
  beforeEach(async () => {
    await server.flush();
  });

  it("stores the whole config (unset fields go), reads it back, and refuses bad settings with one line, storing nothing", async () => {
    queue = new Queue("jobs", { redisUrl: server.url });
    try {
      const stored = await queue.configure({
        maxConcurrency: 4,
        leaseTtlMs: 60_000,
        budgetDay: 1000,
      });
      assert.equal(stored.leaseTtlMs, 60_000);
      assert.equal(stored.maxConcurrency, 4);
      assert.equal(stored.maxAttempts, 3);
      assert.deepEqual(await queue.config(), stored);
      const raw = await queue.client.hgetall(queue.keys.key("config"));
      assert.equal(raw.lease_ttl_s, "60.0");
      assert.equal(raw.max_concurrency, "4");
      assert.equal(raw.budget_day, "1000");
      assert.equal(raw.rate_limit_tasks, undefined);

      await queue.configure({ maxAttempts: 5 });
      assert.deepEqual(await queue.config(), { ...defaultConfig(), maxAttempts: 5 });

      for (const bad of [
        ...REFUSED,
        { max_concurrency: 1 },
        { maxConcurrency: "4" },
        { maxConcurrency: Number.NaN },
      ]) {
        await assert.rejects(queue.configure(bad), (error: Error) => {
          assert.ok(error instanceof InvalidArgument, String(error));
          assert.doesNotMatch(error.message, /\n/);
          return true;
        });
      }
      assert.equal((await queue.config()).maxAttempts, 5);
      await assert.rejects(
        queue.configure({ leaseTtlS: 60 } as never),
        /has no option 'leaseTtlS' \(durations are milliseconds, in options named \.\.\.Ms: 'leaseTtlMs'\)/,
      );
      await assert.rejects(
        queue.configure({ leaseTtlMs: 500 }),
        /invalid queue config: leaseTtlMs must be at least 1000 and at most 3153600000000 ms, not 500$/,
      );
    } finally {
      await queue.close();
    }
  });

  it(
    "has Python's fields and defaults, refuses what Python refuses, and stores what Python reads as the same config",
    needsPython,
    async () => {
      const pyDefaults = python<Record<string, number | null>>(
        "import json; from taskfleet.protocol.config import QueueConfig; print(json.dumps(QueueConfig().model_dump()))",
      );
      const nodeDefaults = asPython(defaultConfig());
      assert.deepEqual(nodeDefaults, pyDefaults);

      const refused = python<boolean[]>(
        [
          "import json, sys",
          "from pydantic import ValidationError",
          "from taskfleet.protocol.config import QueueConfig",
          "out = []",
          "for case in json.load(sys.stdin):",
          "    try:",
          "        QueueConfig.model_validate(case, strict=False); out.append(False)",
          "    except ValidationError:",
          "        out.append(True)",
          "print(json.dumps(out))",
        ].join("\n"),
        REFUSED.map(asPython),
      );
      assert.deepEqual(
        refused,
        REFUSED.map(() => true),
      );

      queue = new Queue("jobs", { redisUrl: server.url });
      try {
        const settings = {
          maxConcurrency: 2,
          rateLimitCost: 50,
          rateLimitPeriodMs: 500,
          leaseTtlMs: 45_000,
          backoffJitter: 0.1,
          groupRateLimitTasks: 7,
        };
        const stored = await queue.configure(settings);
        const read = python<Record<string, number | null>>(
          [
            "import json, sys",
            "from taskfleet import Queue",
            "q = Queue('jobs', redis_url=json.load(sys.stdin))",
            "print(json.dumps(q.config().model_dump())); q.close()",
          ].join("\n"),
          server.url,
        );
        assert.deepEqual(read, asPython(stored));
      } finally {
        await queue.close();
      }
    },
  );
});
