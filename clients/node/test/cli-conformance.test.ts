// The CLI's conformance cases (conformance/cli/*.json) run by `taskfleet-node`: the same
// files the Python CLI runs (tests/cli/test_cli_conformance.py), one test per case, each on
// a flushed real Redis. The format is in conformance/cli/README.md.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync, readdirSync } from "node:fs";
import { after, before, beforeEach, describe, it } from "node:test";
import { fileURLToPath } from "node:url";

import { Queue, Quota, type QuotaUse } from "../src/index.js";
import { taskJson } from "../src/cli/output.js";
import { Broker } from "../src/worker/broker.js";
import { RedisServer } from "./redis.js";
import { BIN, cleanEnv } from "./workers.js";
import type { QueueConfig as StoredConfig } from "../src/config.js";
import { configFromMs, configToMs } from "../src/configms.js";

const CASES_DIR = fileURLToPath(new URL("../../../../conformance/cli/", import.meta.url));
const PROG = "taskfleet-node";
const QUEUE = "q";

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

interface Step {
  enqueue?: {
    id: string;
    payload?: Record<string, unknown>;
    priority?: number;
    group?: string;
    delay?: number;
  };
  fail?: string[];
  reason?: string;
  error?: string;
  configure?: Record<string, number | null>;
  provider_quota?: {
    name: string;
    limits: Record<string, number>;
    period_s: number;
    max_concurrency?: number;
    pause_s?: number;
    reason?: string;
  };
}

interface Case {
  name: string;
  given?: Step[];
  argv: string[];
  exit: number;
  error?: string;
  stderr?: string[];
  stdout?: string[];
  stdout_has?: string[];
  stdout_match?: string[];
  stdout_json?: Json;
  then?: {
    unchanged?: boolean;
    stats?: Json;
    config?: Json;
    tasks?: Record<string, Json>;
    provider_quota?: Record<string, Json>;
  };
}

const camel = (name: string): string =>
  name.replace(/_([a-z])/g, (_, c: string) => c.toUpperCase());
const snakeKeys = (o: object): Record<string, unknown> =>
  Object.fromEntries(
    Object.entries(o).map(([k, v]) => [k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`), v]),
  );

/** `expected` is found in `actual`: objects by the keys given, arrays element by element, the rest equal. */
function subset(expected: unknown, actual: unknown, where = "$"): void {
  if (Array.isArray(expected)) {
    assert.ok(
      Array.isArray(actual) && actual.length === expected.length,
      `${where}: ${JSON.stringify(actual)}`,
    );
    expected.forEach((e, i) => {
      subset(e, (actual as unknown[])[i], `${where}[${i}]`);
    });
  } else if (expected !== null && typeof expected === "object") {
    assert.ok(
      actual !== null && typeof actual === "object" && !Array.isArray(actual),
      `${where}: expected an object, got ${JSON.stringify(actual)}`,
    );
    for (const [key, value] of Object.entries(expected)) {
      assert.ok(key in actual, `${where}: no ${key} in ${JSON.stringify(actual)}`);
      subset(value, (actual as Record<string, unknown>)[key], `${where}.${key}`);
    }
  } else {
    assert.deepEqual(
      actual,
      expected,
      `${where}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`,
    );
  }
}

/** A quota as Python's `QuotaUse.as_dict()` names its fields. */
function quotaDict(use: QuotaUse): Record<string, unknown> {
  return {
    name: use.name,
    period_ms: use.periodMs,
    max_concurrency: use.maxConcurrency,
    reserved: use.reserved,
    paused_until_ms: use.pausedUntilMs,
    window_ms: use.windowMs,
    reason: use.reason,
    units: use.units,
  };
}

async function given(steps: readonly Step[], q: Queue, redisUrl: string): Promise<void> {
  const broker = new Broker(QUEUE, q.client, "pod-a", "1", {
    replyTimeoutMs: 5000,
    host: "",
    served: null,
  });
  for (const step of steps) {
    if (step.enqueue !== undefined) {
      const { id, payload, delay, ...options } = step.enqueue; // the cases' delay: seconds
      await q.enqueue(payload ?? {}, {
        taskId: id,
        ...options,
        ...(delay === undefined ? {} : { delayMs: delay * 1000 }),
      });
    } else if (step.fail !== undefined) {
      const claimed = (await broker.claim(step.fail.length, 0)).tasks;
      assert.deepEqual(
        claimed.map((t) => t.id).sort(),
        [...step.fail].sort(),
        "fail: the tasks named are next in line",
      );
      for (const t of claimed)
        await broker.fail(t.id, t.token, step.error ?? "ValueError: bad", false, step.reason ?? "");
    } else if (step.configure !== undefined) {
      // the cases give the stored fields (seconds); the API takes milliseconds
      const stored = Object.fromEntries(
        Object.entries(step.configure).map(([k, v]) => [camel(k), v]),
      );
      await q.configure(configToMs(stored as unknown as StoredConfig));
    } else if (step.provider_quota !== undefined) {
      const spec = step.provider_quota;
      const quota = new Quota(spec.name, { redisUrl });
      try {
        await quota.configure({
          limits: spec.limits,
          periodMs: spec.period_s * 1000, // the cases' periods: seconds
          ...(spec.max_concurrency === undefined ? {} : { maxConcurrency: spec.max_concurrency }),
        });
        if (spec.pause_s !== undefined) await quota.pause(spec.pause_s * 1000, spec.reason ?? "");
      } finally {
        await quota.close();
      }
    } else {
      throw new Error(`unknown given step ${JSON.stringify(step)}`);
    }
  }
}

async function snapshot(q: Queue): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const key of (await q.client.keys("*")).sort())
    out[key] = (await q.client.dumpBuffer(key)).toString("hex");
  return out;
}

function run(
  argv: readonly string[],
  redisUrl: string,
): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [BIN, ...argv],
      { env: cleanEnv({ TASKFLEET_REDIS_URL: redisUrl }) },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === "number" ? error.code : -1;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

function lines(text: string): string[] {
  return text === "" ? [] : text.replace(/\n$/, "").split("\n");
}

const files = readdirSync(CASES_DIR)
  .filter((f) => f.endsWith(".json"))
  .sort();
const redis = new RedisServer();
before(() => redis.start());
after(() => redis.stop());
beforeEach(() => redis.flush());

for (const file of files) {
  const data = JSON.parse(readFileSync(CASES_DIR + file, "utf8")) as {
    format: number;
    cases: Case[];
  };
  describe(`the CLI conformance cases of ${file}`, () => {
    it("are in a format this runner reads", () => {
      assert.equal(data.format, 1);
    });
    for (const c of data.cases) {
      it(`taskfleet-node passes: ${c.name}`, async () => {
        const q = new Queue(QUEUE, { redisUrl: redis.url });
        try {
          await given(c.given ?? [], q, redis.url);
          const before = await snapshot(q);
          const result = await run(c.argv, redis.url);
          const what = `${c.argv.join(" ")}: ${result.stdout}${result.stderr}`;
          assert.equal(result.code, c.exit, what);
          const out = lines(result.stdout);
          const errors = lines(result.stderr);
          if (c.error !== undefined) {
            assert.equal(errors.length, 1, what);
            assert.ok(errors[0]?.startsWith(`${PROG}: error: `), what);
            assert.ok(errors[0]?.includes(c.error), what);
          } else {
            assert.deepEqual(
              errors,
              (c.stderr ?? []).map((l) => l.replaceAll("{prog}", PROG)),
              what,
            );
          }
          if (c.stdout !== undefined) assert.deepEqual(out, c.stdout, what);
          for (const line of c.stdout_has ?? [])
            assert.ok(out.includes(line), `${line} not in ${what}`);
          if (c.stdout_match !== undefined) {
            assert.equal(out.length, c.stdout_match.length, what);
            c.stdout_match.forEach((pattern, i) => {
              assert.match(out[i] ?? "", new RegExp(pattern));
            });
          }
          if (c.stdout_json !== undefined) subset(c.stdout_json, JSON.parse(result.stdout));
          const then = c.then ?? {};
          if (then.unchanged === true)
            assert.deepEqual(await snapshot(q), before, "bad input stored something");
          if (then.stats !== undefined) subset(then.stats, await q.stats());
          if (then.config !== undefined)
            subset(then.config, snakeKeys(configFromMs(await q.config()))); // the stored seconds;
          for (const [id, fields] of Object.entries(then.tasks ?? {})) {
            const found = await q.get(id);
            assert.ok(found !== null, id);
            subset(fields, taskJson(found), id);
          }
          for (const [name, fields] of Object.entries(then.provider_quota ?? {})) {
            const quota = new Quota(name, { redisUrl: redis.url });
            try {
              const use = await quota.get();
              assert.ok(use !== null, name);
              subset(fields, quotaDict(use), name);
            } finally {
              await quota.close();
            }
          }
        } finally {
          await q.close();
        }
      });
    }
  });
}

describe("taskfleet-node's own names for the Python commands", () => {
  it("list is ls and show is task, output for output", async () => {
    const q = new Queue(QUEUE, { redisUrl: redis.url });
    try {
      await q.enqueue({ n: 1 }, { taskId: "a" });
      const [ls, list, task, show] = await Promise.all([
        run(["ls", QUEUE, "pending", "--json"], redis.url),
        run(["list", QUEUE, "pending", "--json"], redis.url),
        run(["task", QUEUE, "a"], redis.url),
        run(["show", QUEUE, "a"], redis.url),
      ]);
      assert.equal(ls.code, 0, ls.stderr);
      assert.match(ls.stdout, /"id": "a"/);
      assert.deepEqual(list, ls);
      assert.equal(task.code, 0, task.stderr);
      assert.match(task.stdout, /^id +a$/m);
      assert.deepEqual(show, task);
    } finally {
      await q.close();
    }
  });

  it("stats warns on stderr when Redis may evict tasks, as taskfleet stats does", async () => {
    const q = new Queue(QUEUE, { redisUrl: redis.url });
    try {
      await q.client.call("CONFIG", ["SET", "maxmemory-policy", "allkeys-lru"]);
      const stats = await run(["stats", QUEUE], redis.url);
      assert.equal(stats.code, 0, stats.stderr);
      assert.equal(
        stats.stderr,
        `${PROG}: warning: Redis maxmemory-policy is 'allkeys-lru': a full Redis deletes tasks; set maxmemory-policy noeviction\n`,
      );
    } finally {
      await q.client.call("CONFIG", ["SET", "maxmemory-policy", "noeviction"]);
      await q.close();
    }
  });

  it("says Redis cannot be reached in one line, exit 1", async () => {
    const stats = await run(["stats", QUEUE, "--redis-url", "redis://127.0.0.1:1/0"], redis.url);
    assert.equal(stats.code, 1);
    assert.match(
      stats.stderr,
      /^taskfleet-node: error: cannot reach Redis at redis:\/\/127\.0\.0\.1:1\/0: .*\n$/,
    );
  });

  it("names every everyday command in its help", async () => {
    const help = await run(["--help"], redis.url);
    assert.equal(help.code, 0);
    for (const name of [
      "configure",
      "stats",
      "ls",
      "task",
      "cancel",
      "retry",
      "purge",
      "workers",
      "schedule",
    ]) {
      assert.match(help.stdout, new RegExp(`^  ${name} `, "m"));
    }
  });
});
