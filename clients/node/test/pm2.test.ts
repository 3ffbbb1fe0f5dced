// taskfleet-node workers under pm2, started from the documented ecosystem file
// (examples/pm2/ecosystem.config.cjs) as it is: `pm2 reload` while tasks run drains each
// old process and loses nothing. pm2 runs with a PM2_HOME of its own, killed at the end.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { fileURLToPath } from "node:url";

import { Queue } from "../src/index.js";
import { RedisServer, until } from "./redis.js";
import { BIN, FIXTURES, cleanEnv, runs } from "./workers.js";

const PM2 = fileURLToPath(new URL("../../node_modules/pm2/bin/pm2", import.meta.url));
const ECOSYSTEM = fileURLToPath(
  new URL("../../../../examples/pm2/ecosystem.config.cjs", import.meta.url),
);
const TASKS = 160;
const TASK_MS = 300;

interface Pm2Process {
  pid: number;
  pm2_env: { status: string; restart_time: number };
}

describe("taskfleet-node under pm2", () => {
  const redis = new RedisServer();
  const dir = mkdtempSync(join(tmpdir(), "taskfleet-pm2-"));
  const env = cleanEnv({
    PM2_HOME: join(dir, "pm2"),
    TASKFLEET_NODE_BIN: BIN,
    TASKFLEET_PM2_NAME: "taskfleet-test",
    TASKFLEET_PM2_INSTANCES: "2",
    TASKFLEET_QUEUE: "pm2",
    TASKFLEET_HANDLER: "./worker_handlers.mjs:slow",
    TASKFLEET_CONCURRENCY: "4",
    TASKFLEET_DRAIN_TIMEOUT: "20",
  });

  function pm2(...args: string[]): Promise<string> {
    return new Promise((resolve, reject) => {
      execFile(
        process.execPath,
        [PM2, ...args],
        { env, cwd: FIXTURES, timeout: 60_000 },
        (error, stdout, stderr) => {
          if (error !== null)
            reject(new Error(`pm2 ${args.join(" ")}: ${error.message}\n${stdout}${stderr}`));
          else resolve(stdout);
        },
      );
    });
  }

  async function processes(): Promise<Pm2Process[]> {
    return JSON.parse(await pm2("jlist")) as Pm2Process[];
  }

  function logs(): string {
    const at = join(dir, "pm2", "logs");
    return readdirSync(at)
      .map((f) => readFileSync(join(at, f), "utf8"))
      .join("");
  }

  before(async () => {
    await redis.start();
    env.TASKFLEET_REDIS_URL = redis.url;
  });

  after(async () => {
    // the daemon and every worker it started, whatever the test did
    await pm2("kill").catch(() => undefined);
    await redis.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it("drains each old process on pm2 reload with tasks in flight: every task done exactly once, none lost", async () => {
    const log = join(dir, "runs.log");
    const q = new Queue("pm2", { redisUrl: redis.url });
    try {
      const ids = await q.enqueueMany(
        Array.from({ length: TASKS }, () => ({ payload: { ms: TASK_MS, log } })),
      );
      await pm2("start", ECOSYSTEM);
      await until(
        "two workers online",
        async () => (await processes()).filter((p) => p.pm2_env.status === "online").length === 2,
        30_000,
      );
      const first = new Set((await processes()).map((p) => p.pid));
      await until(
        "the first workers run tasks",
        () => runs(log).filter(([what]) => what === "end").length >= 8,
        30_000,
      );

      await pm2("reload", ECOSYSTEM);

      const now = await processes();
      assert.equal(now.length, 2);
      for (const p of now) {
        assert.ok(!first.has(p.pid), `pm2 reload replaced process ${p.pid}`);
        assert.equal(p.pm2_env.restart_time, 1);
      }
      await q.wait(ids, { timeoutMs: 60_000 });
      const stats = await q.stats();
      assert.equal(stats.done, TASKS);
      assert.equal(stats.completed, TASKS);
      assert.equal(
        stats.lost + stats.released + stats.requeued + stats.dead + stats.pending + stats.running,
        0,
      );
      const ends = runs(log).filter(([what]) => what === "end");
      assert.deepEqual(
        ends.map(([, id]) => id).sort(),
        [...ids].sort(),
        "each task ran to its end exactly once",
      );
      // the reload came while the old processes held tasks, and the new ones took over
      const drained = [...logs().matchAll(/event=drain_started inflight=(\d+)/g)].map((m) =>
        Number(m[1]),
      );
      assert.equal(drained.length, 2, logs());
      assert.ok(
        drained.some((n) => n > 0),
        `a drain began with tasks in flight: ${drained.join(", ")}`,
      );
      assert.ok(
        ends.some(([, , , pid]) => !first.has(pid)),
        "the new processes ran tasks",
      );
    } finally {
      await q.close();
    }
  });
});
