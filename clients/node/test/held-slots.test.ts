// Held slots against a real redis-server and real worker processes: a handler that never
// settles and ignores its signal keeps its slot past its timeout; the worker shows it held
// (Queue.workers(), the metric, the log) and, once every slot is stuck past the grace,
// drains, deregisters and exits 3 so that a fresh worker runs what waits.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, afterEach, before, beforeEach, describe, it } from "node:test";

import { Queue } from "../src/index.js";
import { EXIT_SLOTS_STUCK, allStuck } from "../src/worker/held.js";
import { checkSettings } from "../src/worker/settings.js";
import { workerInfo } from "../src/workers.js";
import { RedisServer, freePort, until } from "./redis.js";
import { WorkerProcess } from "./workers.js";

describe("held slots", () => {
  const server = new RedisServer();
  let dir: string;
  let queue: Queue;
  const started: WorkerProcess[] = [];

  const worker = (name: string, extra: string[] = []): WorkerProcess => {
    const w = WorkerProcess.node([
      "--queue",
      "jobs",
      "--redis-url",
      server.url,
      "--pod",
      name,
      "--runtime-dir",
      join(dir, `rt-${name}`),
      "--heartbeat-interval",
      "0.2",
      "--no-fire-schedules",
      "--handler",
      "./worker_handlers.mjs:hangFirst",
      ...extra,
    ]);
    started.push(w);
    return w;
  };
  const state = async (id: string): Promise<string | undefined> => (await queue.get(id))?.state;

  before(async () => {
    await server.start();
  });
  after(async () => {
    await server.stop();
  });
  beforeEach(async () => {
    await server.flush();
    dir = mkdtempSync(join(tmpdir(), "taskfleet-node-held-"));
    queue = new Queue("jobs", { redisUrl: server.url });
    await queue.client.hset(
      queue.keys.key("config"),
      "lease_ttl_s",
      "1",
      "backoff_base_s",
      "0",
      "backoff_max_s",
      "0",
    );
  });
  afterEach(async () => {
    await Promise.all(started.splice(0).map((w) => w.stop()));
    await queue.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("a worker is stuck only when every slot is, and a held grace must be positive", () => {
    assert.equal(allStuck(1, 2), false);
    assert.equal(allStuck(2, 2), true);
    assert.throws(
      () => checkSettings("jobs", { heldGraceMs: 0 }, "p", "i"),
      /held grace must be positive/,
    );
    assert.throws(
      () => checkSettings("jobs", { heldGraceMs: Number.NaN }, "p", "i"),
      /held grace must be a finite number/,
    );
    assert.equal(workerInfo("p", '{"incarnation":"i","heartbeat_ms":1}', 1, 1000)?.held, 0);
    assert.equal(
      workerInfo("p", '{"incarnation":"i","heartbeat_ms":1,"held":2}', 1, 1000)?.held,
      2,
    );
  });

  it("promises that never settle are shown held, then the worker exits 3 and a fresh one runs what waited", async () => {
    const port = await freePort();
    const w = worker("stuck", [
      "--concurrency",
      "2",
      "--held-grace",
      "2",
      "--metrics-port",
      String(port),
    ]);
    await w.saw(/event=worker_started/);
    const log = join(dir, "runs.log");
    const hung = [
      await queue.enqueue({ hang: true, log }, { timeoutMs: 500, maxAttempts: 2 }),
      await queue.enqueue({ hang: true, log }, { timeoutMs: 500, maxAttempts: 2 }),
    ];
    // Past the timeout both attempts failed, yet both promises run on: held, not idle.
    await until("held 2 in workers()", async () =>
      (await queue.workers()).some((x) => x.held === 2),
    );
    const [info] = await queue.workers();
    assert.equal(info?.inflight, 0);
    assert.equal(info.concurrency, 2);
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    assert.ok(text.includes('taskfleet_worker_slots_held{queue="jobs"} 2'), text);
    for (const id of hung) {
      assert.match(w.output, new RegExp(`event=slot_held task=${id} reason=timeout`));
      assert.equal((await queue.get(id))?.error, "TimeoutError: task exceeded its timeout of 0.5s");
    }
    const waiting = await queue.enqueue({ log }); // no slot can take it while both are held

    // Past the grace every slot is stuck: the worker drains, deregisters and exits 3.
    assert.equal(await w.exit(15_000), EXIT_SLOTS_STUCK, w.output);
    for (const id of hung) assert.match(w.output, new RegExp(`event=slot_stuck task=${id} `));
    assert.match(w.output, /event=worker_stuck held=2 stuck=2 concurrency=2 /);
    assert.match(w.output, /event=tasks_summary .*inflight=0 held=2 /);
    assert.equal(w.output.match(/event=slot_held /g)?.length, 2, w.output);
    assert.deepEqual(await queue.workers(), []); // deregistered cleanly, not left to go silent
    assert.equal(await state(waiting), "pending");

    // Nothing was lost: a fresh worker runs the waiting task and both retries.
    const fresh = worker("fresh", ["--concurrency", "2"]);
    const done = await queue.wait([...hung, waiting], { timeoutMs: 20_000 });
    for (const id of [...hung, waiting]) assert.equal(done[id]?.state, "done", fresh.output);
    for (const id of hung) assert.deepEqual([done[id]?.attempts, done[id]?.lost], [2, 0]);
  });

  it("one held slot leaves the worker running on the other", async () => {
    const w = worker("half", ["--concurrency", "2", "--held-grace", "0.5"]);
    await w.saw(/event=worker_started/);
    const hung = await queue.enqueue({ hang: true }, { timeoutMs: 500, maxAttempts: 1 });
    await w.saw(new RegExp(`event=slot_stuck task=${hung} `));
    const later = await queue.enqueue({});
    const done = await queue.wait([later], { timeoutMs: 20_000 });
    assert.equal(done[later]?.state, "done", w.output);
    assert.doesNotMatch(w.output, /event=worker_stuck/);
    assert.equal(w.child.exitCode, null);
    // the record says so from the heartbeat after the run ended
    await until(
      "the record shows the held slot and nothing else in flight",
      async () =>
        JSON.stringify((await queue.workers()).map((x) => [x.inflight, x.held])) === "[[0,1]]",
    );
  });
});
