// The Node worker as a real process (`taskfleet-node worker`) against a real redis-server:
// handlers from ES modules and CommonJS, the drain on SIGTERM (finished, or handed back at
// the deadline or on a second signal), SIGKILL and the lease taking the task back,
// fencing, cancellation, timeouts, metrics, a Redis outage at exit, and bad input.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, afterEach, before, beforeEach, describe, it } from "node:test";

import { packagedBundle } from "../src/bundle.js";
import { Scripts } from "../src/connection.js";
import { Queue } from "../src/index.js";
import { Broker } from "../src/worker/broker.js";
import { needsPython, python } from "./python.js";
import { RedisServer, freePort, until } from "./redis.js";
import { BIN, FIXTURES, WorkerProcess, cleanEnv, runs } from "./workers.js";
import { idAndToken } from "../src/worker/claimed.js";

const HANDLERS = [
  "--handler",
  "./worker_handlers.mjs:slow",
  "--handler",
  "stubborn=./worker_handlers.mjs:stubborn",
  "--handler",
  "./worker_handlers.mjs:registry",
];

describe("the Node worker", () => {
  const server = new RedisServer();
  let dir: string;
  let queue: Queue;
  const started: WorkerProcess[] = [];

  const worker = (name: string, extra: string[] = [], redisUrl = server.url): WorkerProcess => {
    const w = WorkerProcess.node([
      "--queue",
      "jobs",
      "--redis-url",
      redisUrl,
      "--pod",
      name,
      "--runtime-dir",
      join(dir, `rt-${name}`),
      "--heartbeat-interval",
      "0.3",
      "--no-fire-schedules",
      ...HANDLERS,
      ...extra,
    ]);
    started.push(w);
    return w;
  };
  const log = (): string => join(dir, "runs.log");
  const state = async (id: string): Promise<string | undefined> => (await queue.get(id))?.state;
  const leaseTtl = async (seconds: number): Promise<void> => {
    await queue.client.hset(queue.keys.key("config"), "lease_ttl_s", String(seconds));
  };

  before(async () => {
    await server.start();
  });
  after(async () => {
    await server.stop();
  });
  beforeEach(async () => {
    await server.flush();
    dir = mkdtempSync(join(tmpdir(), "taskfleet-node-worker-"));
    queue = new Queue("jobs", { redisUrl: server.url });
  });
  afterEach(async () => {
    await Promise.all(started.splice(0).map((w) => w.stop()));
    await queue.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("runs ES module and CommonJS handlers, by name or not; PermanentFailure is dead, RetryAfter delayed; SIGTERM drains, exit 0", async () => {
    const w = worker("w1", [
      "--handler",
      "upper=./worker_handlers.cjs:upper",
      "--concurrency",
      "4",
    ]);
    await w.saw(/event=worker_started .*concurrency=4/);
    const ids = await queue.enqueueMany([
      { payload: { ms: 10, log: log() }, taskId: "slow" },
      { payload: { text: "abc" }, name: "upper", taskId: "upper" },
      { payload: {}, name: "permanent", taskId: "permanent" },
      { payload: {}, name: "fails", maxAttempts: 1, taskId: "fails" },
      { payload: {}, name: "later", taskId: "later" },
      { payload: {}, name: "nobody", taskId: "unknown" },
    ]);
    const done = await queue.wait(
      ids.filter((id) => id !== "later"),
      { timeoutMs: 20_000 },
    );
    assert.equal(done.slow?.state, "done", w.output);
    assert.deepEqual(done.slow.result, { slept: 10 });
    assert.deepEqual(done.slow.progress, { done: 0, total: 1, fraction: 0, message: "started" });
    assert.equal(done.slow.costUsed, 7);
    assert.deepEqual(done.upper?.result, { text: "ABC" });
    assert.equal(done.permanent?.state, "dead");
    assert.equal(done.permanent.reason, "permanent");
    assert.equal(done.permanent.error, "PermanentFailure: this input can never work");
    assert.equal(done.fails?.reason, "failed");
    assert.equal(done.fails.error, "Error: boom");
    assert.equal(done.unknown?.reason, "unknown task");
    await until("RetryAfter delays the task", async () => (await state("later")) === "delayed");
    const later = await queue.get("later");
    assert.equal(later?.attempts, 0); // the start given back
    assert.equal(later.deferred, 1);
    assert.equal(later.error, "RetryAfter: upstream asks for 30 s");
    assert.ok((later.runAt?.getTime() ?? 0) - Date.now() > 20_000);
    w.kill("SIGTERM");
    assert.equal(await w.exit(), 0, w.output);
    assert.match(w.output, /event=worker_stopped completed=2 failed=2 released=0 lost=0/);
    // at info a task done is no line of its own; the tasks_summary lines count them
    assert.doesNotMatch(w.output, /event=task_done/);
    const summed = (field: string): number =>
      [...w.output.matchAll(new RegExp(`event=tasks_summary .*\\b${field}=(\\d+)`, "g"))].reduce(
        (n, m) => n + Number(m[1]),
        0,
      );
    assert.deepEqual([summed("done"), summed("failed"), summed("deferred")], [2, 2, 1], w.output);
    assert.deepEqual(await queue.workers(), []); // deregistered
    assert.equal(existsSync(join(dir, "rt-w1", "worker.json")), false);
  });

  it("a RateLimited handler pauses the whole queue's claims, the task waiting without an attempt", async () => {
    const w = worker("w9");
    await w.saw(/event=worker_started/);
    await queue.enqueue({}, { name: "limited", taskId: "limited" });
    await until("RateLimited defers the task", async () => (await state("limited")) === "delayed");
    const limited = await queue.get("limited");
    assert.equal(limited?.attempts, 0);
    assert.equal(limited.error, "RateLimited: 429 from the provider");
    const pause = await queue.client.hgetall(queue.keys.key("quota"));
    assert.ok(Number(pause.until) - Date.now() > 30_000, JSON.stringify(pause));
    assert.equal(pause.reason, "RateLimited: 429 from the provider");
    await w.saw(/event=queue_rate_limited/);
  });

  it("a RateLimited handler with scope group pauses only its task's group", async () => {
    const w = worker("w10");
    await w.saw(/event=worker_started/);
    await queue.enqueue({}, { name: "limitedGroup", taskId: "lg", group: "t1" });
    await until("RateLimited defers the task", async () => (await state("lg")) === "delayed");
    assert.equal((await queue.get("lg"))?.attempts, 0);
    const paused = await queue.client.hgetall(queue.keys.item("group", "t1"));
    assert.ok(Number(paused.until) - Date.now() > 30_000, JSON.stringify(paused));
    assert.ok(
      Number((await queue.client.hget(queue.keys.key("quota"), "until")) ?? 0) < Date.now(),
    );
    assert.ok(
      Number(await queue.client.zscore(queue.keys.key("groups_parked"), "t1")) > Date.now(),
    );
  });

  it("reportQuota at 0 pauses the queue (or the task's group) until the reset; the task succeeds", async () => {
    const w = worker("w11");
    await w.saw(/event=worker_started/);
    await queue.enqueue({ scope: "group" }, { name: "quotaSpent", taskId: "qg", group: "t1" });
    await until("the task is done", async () => (await state("qg")) === "done");
    await until(
      "its group is paused",
      async () =>
        Number(await queue.client.hget(queue.keys.item("group", "t1"), "until")) - Date.now() >
        30_000,
    );
    assert.ok(
      Number((await queue.client.hget(queue.keys.key("quota"), "until")) ?? 0) < Date.now(),
    );
    await queue.enqueue({}, { name: "quotaSpent", taskId: "qq" });
    await until("the task is done", async () => (await state("qq")) === "done");
    await until(
      "the queue is paused",
      async () =>
        Number(await queue.client.hget(queue.keys.key("quota"), "until")) - Date.now() > 30_000,
    );
    await w.saw(/event=quota_reported_spent/);
  });

  it("takes a task handed over on its wake list, finishes it within the drain deadline, claims nothing more, exits 0", async () => {
    const w = worker("w2", ["--drain-timeout", "30"]);
    await w.saw(/event=worker_started/);
    await until(
      "the worker waits for work on its wake list",
      async () => (await queue.client.zcard(queue.keys.key("idle"))) === 1,
    );
    const id = await queue.enqueue({ ms: 1500, log: log() });
    await until("the task runs", () => runs(log()).length === 1);
    // handed over by the enqueue itself (a producer's token), popped from the wake list
    assert.match(
      (await queue.client.hget(queue.keys.item("task", id), "token")) ?? "",
      /^[0-9a-f]{16}\.[0-9]+:1$/,
    );
    w.kill("SIGTERM");
    await w.saw(/event=drain_started inflight=1/);
    const after = await queue.enqueue({ ms: 1, log: log() });
    assert.equal(await w.exit(), 0, w.output);
    assert.equal(await state(id), "done");
    assert.equal(await state(after), "pending"); // a draining worker claims nothing
  });

  it("hands back at the drain deadline a task that does not fit (not an attempt), even one deaf to its signal", async () => {
    const w = worker("w3", ["--drain-timeout", "0.5", "--concurrency", "2"]);
    await w.saw(/event=worker_started/);
    const listens = await queue.enqueue({ ms: 60_000, log: log() });
    const deaf = await queue.enqueue({ ms: 60_000, log: log() }, { name: "stubborn" });
    await until("both tasks run", () => runs(log()).length === 2);
    w.kill("SIGTERM");
    assert.equal(await w.exit(15_000), 0, w.output);
    for (const id of [listens, deaf]) {
      const task = await queue.get(id);
      assert.equal(task?.state, "pending", w.output);
      assert.equal(task.attempts, 0);
    }
    assert.match(w.output, /released=2/);
    assert.equal((await queue.stats()).released, 2);
  });

  it("hands back at once on a second SIGTERM", async () => {
    const w = worker("w4", ["--drain-timeout", "600"]);
    await w.saw(/event=worker_started/);
    const id = await queue.enqueue({ ms: 60_000, log: log() }, { name: "stubborn" });
    await until("the task runs", () => runs(log()).length === 1);
    w.kill("SIGTERM");
    await w.saw(/event=drain_started/);
    w.kill("SIGTERM");
    assert.equal(await w.exit(15_000), 0, w.output);
    assert.match(w.output, /event=drain_forced inflight=1/);
    assert.equal(await state(id), "pending");
  });

  it("after a SIGKILL, another worker takes the task back when its lease expires and does it exactly once", async () => {
    await leaseTtl(1);
    const a = worker("a");
    await a.saw(/event=worker_started/);
    const id = await queue.enqueue({ ms: 300, log: log() });
    await until("a runs the task", () => runs(log()).length === 1);
    a.kill("SIGKILL");
    assert.equal(await a.exit(), null);
    const b = worker("b");
    await until("b does the task", async () => (await state(id)) === "done", 20_000);
    const task = await queue.get(id);
    assert.equal(task?.lost, 1);
    assert.equal(task.attempts, 2);
    const lines = runs(log());
    assert.deepEqual(
      lines.map(([what, , , pid]) => [what, pid]),
      [
        ["start", a.pid],
        ["start", b.pid],
        ["end", b.pid],
      ],
    );
    assert.equal((await queue.stats()).completed, 1);
    b.kill("SIGTERM");
    assert.equal(await b.exit(), 0, b.output);
  });

  it("refuses, and logs, the completion of a worker whose task was taken back meanwhile (fencing)", async () => {
    await leaseTtl(1);
    const a = worker("a");
    await a.saw(/event=worker_started/);
    const id = await queue.enqueue({ ms: 1500, log: log() }, { name: "stubborn" });
    await until("a runs the task", () => runs(log()).length === 1);
    a.kill("SIGSTOP"); // a stops beating; its lease expires
    const b = worker("b");
    try {
      await until("b does the task", async () => (await state(id)) === "done", 20_000);
    } finally {
      a.kill("SIGCONT");
    }
    await a.saw(new RegExp(`event=task_write_refused task=${id} reason=stale`));
    const stats = await queue.stats();
    assert.equal(stats.completed, 1);
    assert.equal(stats.stale, 1);
    const ends = runs(log()).filter(([what]) => what === "end");
    assert.deepEqual(ends.map(([, , , pid]) => pid).sort(), [a.pid, b.pid].sort()); // both ran; one result stored
    assert.equal((await queue.get(id))?.lost, 1);
    for (const w of [a, b]) w.kill("SIGTERM");
    assert.equal(await a.exit(), 0, a.output);
    assert.equal(await b.exit(), 0, b.output);
  });

  it("the deprecated --lease-ttl sets nothing: a warning names the queue's lease TTL, which holds for the tasks it claims", async () => {
    const w = worker("ttl", ["--lease-ttl", "7"]);
    await w.saw(/event=worker_started/);
    assert.match(
      w.output,
      /event=lease_ttl_option_ignored lease_ttl_s=30 given_s=7 .*deprecated and ignored/,
    );
    assert.equal(
      await queue.client.hget(queue.keys.key("config"), "lease_ttl_s"),
      null,
      "the queue's config is not written",
    );
    const id = await queue.enqueue({ ms: 2000, log: log() });
    await until("the task runs", () => runs(log()).length === 1);
    const [leaseUntil, now] = await Promise.all([
      queue.client.hget(queue.keys.item("task", id), "lease_until"),
      queue.client.time(),
    ]);
    const left = Number(leaseUntil) - (Number(now[0]) * 1000 + Math.floor(Number(now[1]) / 1000));
    assert.ok(
      left > 20_000 && left <= 30_000,
      `a lease of the queue's 30 s, not 7: ${String(left)} ms left`,
    );
  });

  it("a worker replaced under its name (another incarnation registered) gets nothing from its next claim and exits 2, loudly", async () => {
    // Beats far apart: the claim meets the newcomer first.
    const g = WorkerProcess.node([
      "--queue",
      "jobs",
      "--redis-url",
      server.url,
      "--pod",
      "g",
      "--runtime-dir",
      join(dir, "rt-g"),
      "--heartbeat-interval",
      "20",
      "--lease-ttl",
      "60",
      "--no-fire-schedules",
      ...HANDLERS,
    ]);
    started.push(g);
    await g.saw(/event=worker_started/);
    // the newcomer's record, as its register writes it
    const record = {
      incarnation: "newcomer",
      heartbeat_ms: Date.now(),
      inflight: 0,
      concurrency: 1,
      draining: false,
    };
    await queue.client.hset(queue.keys.key("workers"), "g", JSON.stringify(record));
    const id = await queue.enqueue({ ms: 1, log: log() });
    assert.equal(await g.exit(), 2, g.output);
    assert.match(g.output, /event=identity_taken .*by="?incarnation newcomer/);
    assert.doesNotMatch(g.output, /event=worker_failed/);
    const task = await queue.get(id);
    assert.equal(task?.state, "pending");
    assert.equal(task.attempts, 0);
    assert.equal(runs(log()).length, 0);
  });

  it("a worker frozen while a successor took its name and left registers again when resumed, writes nothing it lost, and runs on", async () => {
    await leaseTtl(60); // nothing is taken back by lease expiry here
    const r = worker("r");
    await r.saw(/event=worker_started/);
    const held = await queue.enqueue({ ms: 1500, log: log() }, { name: "stubborn" });
    await until("r runs the task", () => runs(log()).length === 1);
    const first = JSON.parse(String(await queue.client.hget(queue.keys.key("workers"), "r"))) as {
      incarnation: string;
    };
    r.kill("SIGSTOP");
    // a successor takes the name (and the task) over, finishes it and exits cleanly
    const successor = new Broker("jobs", queue.client, "r", "successor", {
      replyTimeoutMs: 5000,
      host: "",
      served: null,
    });
    try {
      assert.equal(await successor.register(1), 1);
      const [task] = (await successor.claim(1, 0)).tasks;
      assert.equal(task?.id, held);
      assert.deepEqual(
        await successor.complete([[held, task.token, JSON.stringify("by the successor")]]),
        [1],
      );
      assert.equal(await successor.deregister(false), 0);
      assert.equal(await queue.client.hget(queue.keys.key("workers"), "r"), null);
    } finally {
      r.kill("SIGCONT");
    }
    await r.saw(/event=registered_again/);
    const again = JSON.parse(String(await queue.client.hget(queue.keys.key("workers"), "r"))) as {
      incarnation: string;
    };
    assert.equal(again.incarnation, first.incarnation);
    const next = await queue.enqueue({ ms: 1, log: log() });
    const done = await queue.wait([next], { timeoutMs: 20_000 });
    assert.equal(done[next]?.state, "done", r.output);
    assert.equal(done[next].incarnation, first.incarnation);
    await until(
      "the resumed run of the taken task ends",
      () => runs(log()).filter(([what, id]) => what === "end" && id === held).length === 1,
    );
    const taken = await queue.get(held);
    assert.equal(taken?.state, "done");
    assert.equal(taken.result, "by the successor"); // the resumed run wrote nothing
    assert.doesNotMatch(r.output, /event=identity_taken/);
    r.kill("SIGTERM");
    assert.equal(await r.exit(), 0, r.output);
    assert.equal(await queue.client.hget(queue.keys.key("workers"), "r"), null);
  });

  it(
    "a worker whose pod the operator found gone from the API exits 2 instead of registering again; the loss counts once",
    needsPython,
    async () => {
      await leaseTtl(60); // nothing is taken back by lease expiry here
      const z = worker("z");
      await z.saw(/event=worker_started/);
      const held = await queue.enqueue({ ms: 3000, log: log() }, { name: "stubborn" });
      await until("z runs the task", () => runs(log()).length === 1);
      // as the operator does for a force-deleted pod: the fast path, then the sweep
      const taken = python<number[]>(
        "import json, sys\n" +
          "from taskfleet.producer.queue import Queue\n" +
          "from taskfleet_operator.sweeper import requeue_pod_workers\n" +
          "a = json.load(sys.stdin)\n" +
          "q = Queue('jobs', a['url'])\n" +
          "print(json.dumps([requeue_pod_workers(q, 'z') for _ in range(2)]))\n",
        { url: server.url },
      );
      assert.deepEqual(taken, [1, 0]);
      assert.equal(await z.exit(), 2, z.output);
      assert.match(z.output, /event=pod_gone pod=z /);
      assert.doesNotMatch(z.output, /event=registered_again/);
      assert.equal(await queue.client.hget(queue.keys.key("workers"), "z"), null);
      const task = await queue.get(held);
      assert.equal(task?.state, "pending");
      assert.equal(task.lost, 1);
      assert.equal(task.attempts, 1);
      const late = worker("z"); // a process of the gone pod starting now: refused
      assert.equal(await late.exit(), 2, late.output);
      assert.match(late.output, /its pod is gone from the Kubernetes API/);
      assert.equal(await queue.client.hget(queue.keys.key("workers"), "z"), null);
    },
  );

  it("aborts a run's signal when its task is cancelled or times out", async () => {
    const w = worker("w5", ["--concurrency", "2"]);
    await w.saw(/event=worker_started/);
    const cancelled = await queue.enqueue({ ms: 60_000, log: log() });
    const timed = await queue.enqueue(
      { ms: 60_000, log: log() },
      { timeoutMs: 500, maxAttempts: 1 },
    );
    await until("both run", () => runs(log()).length === 2);
    assert.equal(await queue.cancel(cancelled), "requested");
    const done = await queue.wait([cancelled, timed], { timeoutMs: 20_000 });
    assert.equal(done[cancelled]?.state, "cancelled", w.output);
    assert.equal(done[timed]?.state, "dead");
    assert.equal(done[timed].error, "TimeoutError: task exceeded its timeout of 0.5s");
    w.kill("SIGTERM");
    assert.equal(await w.exit(), 0, w.output);
  });

  it("is drained by `taskfleet-node drain --wait`, which returns once nothing is held", async () => {
    const w = worker("w6");
    await w.saw(/event=worker_started/);
    const id = await queue.enqueue({ ms: 800, log: log() });
    await until("the task runs", () => runs(log()).length === 1);
    const drain = new WorkerProcess(process.execPath, [
      BIN,
      "drain",
      "--wait",
      "--timeout",
      "30",
      "--runtime-dir",
      join(dir, "rt-w6"),
    ]);
    assert.equal(await drain.exit(), 0, drain.output);
    assert.equal(await state(id), "done"); // held nothing when the hook returned
    assert.equal(await w.exit(), 0, w.output);
    const missing = new WorkerProcess(process.execPath, [
      BIN,
      "drain",
      "--runtime-dir",
      join(dir, "rt-w6"),
    ]);
    assert.equal(await missing.exit(), 1);
    assert.match(missing.output, /^taskfleet-node: error: no worker runtime file at .*\n$/);
  });

  it("serves its metrics under the Python worker's names", async () => {
    const port = await freePort();
    const w = worker("w7", ["--metrics-port", String(port)]);
    await w.saw(/event=worker_started/);
    await queue.wait([await queue.enqueue({ ms: 1 })], { timeoutMs: 20_000 });
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    for (const line of [
      'taskfleet_worker_tasks_total{queue="jobs",outcome="done"} 1',
      'taskfleet_worker_slots{queue="jobs"} 1',
      'taskfleet_worker_flow_repairs_total{queue="jobs"} 0',
      'taskfleet_worker_redis_up{queue="jobs"} 1',
      'taskfleet_worker_task_run_seconds_count{queue="jobs"} 1',
      'taskfleet_worker_claim_seconds_bucket{le="+Inf",queue="jobs"}',
      "# TYPE taskfleet_worker_redis_outage_seconds_total counter",
      "process_cpu_seconds_total",
    ]) {
      assert.ok(text.includes(line), `${line} in\n${text}`);
    }
    assert.match(text, /taskfleet_worker_info\{queue="jobs",handler="[^"]+",version="[^"]+"\} 1/);
    w.kill("SIGTERM");
    assert.equal(await w.exit(), 0, w.output);
  });

  it("exits 0, bounded, when Redis is gone at the drain: the tasks come back through their leases", async () => {
    const own = new RedisServer();
    await own.start();
    const q = new Queue("jobs", { redisUrl: own.url });
    try {
      const w = worker("w8", ["--drain-timeout", "0.5"], own.url);
      await w.saw(/event=worker_started/);
      await q.enqueue({ ms: 60_000, log: log() });
      await until("the task runs", () => runs(log()).length === 1);
      await q.close();
      await own.stop();
      w.kill("SIGTERM");
      assert.equal(await w.exit(20_000), 0, w.output);
      assert.match(w.output, /event=release_failed/);
    } finally {
      await q.close();
      await own.stop();
    }
  });

  it("--processes 2: a supervisor of workers <pod>#1 and #2 restarts one that dies and drains them all for the hook", async () => {
    const w = worker("sup", ["--processes", "2", "--drain-timeout", "0.5"]);
    await until(
      "both processes registered",
      async () => (await queue.workers()).map((x) => x.pod).join() === "sup#1,sup#2",
      20_000,
    );
    const ids = [
      await queue.enqueue({ ms: 60_000, log: log() }, { taskId: "one" }),
      await queue.enqueue({ ms: 60_000, log: log() }, { taskId: "two" }),
    ];
    await until("both run", () => runs(log()).length === 2);
    const [, , , victim] = runs(log())[0] ?? [];
    assert.ok(victim !== undefined);
    process.kill(victim, "SIGKILL");
    // its restart takes back at once what it held, and runs it again
    await until("the task runs again", () => runs(log()).length === 3, 20_000);
    await w.saw(/event=process_restart process=\d in_s=0/);
    const again = runs(log())[2];
    assert.ok(again !== undefined && again[3] !== victim);
    assert.equal((await queue.get(again[1]))?.lost, 1);
    const drain = new WorkerProcess(process.execPath, [
      BIN,
      "drain",
      "--wait",
      "--timeout",
      "30",
      "--runtime-dir",
      join(dir, "rt-sup"),
    ]);
    assert.equal(await drain.exit(), 0, drain.output);
    assert.equal(await w.exit(), 0, w.output);
    assert.match(w.output, /event=supervisor_exited code=0/);
    for (const id of ids) assert.equal(await state(id), "pending"); // handed back at the deadline
    assert.deepEqual(await queue.workers(), []);
  });

  it("repairs in its housekeeping a waiting task whose dependency ended without waking it", async () => {
    const a = await queue.enqueue({ ms: 1 });
    const b = await queue.enqueue({ ms: 1 }, { after: [a] });
    // a finished as a worker that knows nothing of dependants finishes it, a minute ago
    const bundle = packagedBundle();
    const scripts = new Scripts(queue.client, bundle);
    const claim = bundle.pack("claim", {
      pod: "old",
      incarnation: "i1",
      max_tasks: 1,
      token_base: "tb",
      bound: 100,
    });
    const [, , , record] = (await scripts.run("claim", queue.keys, claim)) as unknown[];
    const [id, token] = idAndToken(record);
    assert.equal(id, a);
    await queue.client.hdel(queue.keys.item("task", a), "dependants");
    await scripts.run(
      "complete",
      queue.keys,
      bundle.pack("complete", {}, [{ task_id: a, token, result: "" }]),
    );
    await queue.client.hset(queue.keys.item("task", a), "finished_at", String(Date.now() - 60_000));
    assert.equal(await state(b), "waiting");
    const w = worker("n1");
    await w.saw(new RegExp(`flow_repaired.*${b}`));
    await until("the repaired task done", async () => (await state(b)) === "done", 20_000);
    assert.equal((await queue.stats()).flow_repairs, 1);
  });

  it("refused by Redis's password, says so in one line first (no eviction-policy line) and exits 2", async () => {
    const secured = new RedisServer();
    await secured.start();
    try {
      const admin = secured.admin();
      await admin.config("SET", "requirepass", "s3cret-pw");
      admin.disconnect();
      const wrong = `redis://:wrong-pw@127.0.0.1:${String(secured.port)}/0`;
      const none = `redis://127.0.0.1:${String(secured.port)}/0`;
      for (const [name, url] of [
        ["wrong", wrong],
        ["none", none],
      ] as const) {
        const w = worker(`auth-${name}`, [], url);
        assert.equal(await w.exit(), 2, w.output);
        assert.equal(
          w.output.match(/event=redis_auth_failed kind=authentication /g)?.length,
          1,
          w.output,
        );
        assert.doesNotMatch(w.output, /redis_eviction_policy_unknown|worker_started|worker_failed/);
        assert.doesNotMatch(w.output, /s3cret-pw|wrong-pw/);
      }
    } finally {
      await secured.stop();
    }
  });

  it("signalled at any point of its start, drains and exits 0, losing nothing", async () => {
    const ids = await Promise.all(
      Array.from({ length: 8 }, () => queue.enqueue({ ms: 100, log: log() })),
    );
    // ms after the bin's first line added its SIGTERM listener (before it, Node itself is
    // starting): through the loading of the CLI and the worker, the start's Redis calls, and after
    const offsets = [0, 150, 300, 500, 750, 1150];
    const stopped = [];
    for (const [i, ms] of offsets.entries()) {
      const name = `early-${String(i)}`;
      const env = cleanEnv({
        NODE_OPTIONS: `--import=${join(FIXTURES, "mark_stop_listener.mjs")}`,
      });
      const w = WorkerProcess.node(
        [
          "--queue",
          "jobs",
          "--redis-url",
          server.url,
          "--pod",
          name,
          "--runtime-dir",
          join(dir, `rt-${name}`),
          "--heartbeat-interval",
          "0.3",
          "--no-fire-schedules",
          ...HANDLERS,
        ],
        env,
      ); // one at a time: each start as fast as alone
      started.push(w);
      await w.saw(/test-mark: SIGTERM listener added/);
      await new Promise((r) => setTimeout(r, ms)); // a point of its start
      w.kill("SIGTERM");
      stopped.push(w);
    }
    const codes = await Promise.all(stopped.map(async (w) => [await w.exit(), w.output] as const));
    for (const [code, output] of codes) assert.equal(code, 0, output);
    for (const id of ids) {
      const task = await queue.get(id);
      assert.ok(task?.state === "done" || task?.state === "pending", JSON.stringify(task));
      assert.equal(task.lost, 0);
    }
    assert.equal(await queue.client.hlen(queue.keys.key("workers")), 0);
  });

  it("refuses bad input with one line and exit 2", async () => {
    const cases: [string[], RegExp][] = [
      [["--handler", "./worker_handlers.mjs:slow"], /missing option --queue/],
      [["--queue", "q"], /missing option --handler/],
      [
        ["--queue", "q", "--handler", "./nowhere.mjs:f"],
        /handler module '\.\/nowhere\.mjs' not found/,
      ],
      [["--queue", "q", "--handler", "./worker_handlers.mjs:nope"], /has no export 'nope'/],
      [["--queue", "q", "--handler", "./worker_handlers.mjs"], /must look like/],
      [
        ["--queue", "q", "--handler", "./worker_handlers.mjs:slow", "--concurrency", "0"],
        /concurrency must be within 1\.\.10000, got 0/,
      ],
      [
        ["--queue", "q", "--handler", "./worker_handlers.mjs:slow", "--processes", "300"],
        /invalid value for --processes: 300 is not in the range 1<=x<=256/,
      ],
      [["--queue", "bad name", "--handler", "./worker_handlers.mjs:slow"], /invalid queue name/],
      [
        ["--queue", "q", "--handler", "./worker_handlers.mjs:slow", "--redis-url", "http://x"],
        /invalid value for --redis-url/,
      ],
      [
        ["--queue", "q", "--handler", "./worker_handlers.mjs:slow", "--heartbeat-interval", "nan"],
        /invalid value for --heartbeat-interval/,
      ],
      [
        ["--queue", "q", "--handler", "./worker_handlers.mjs:slow", "--held-grace", "0"],
        /held grace must be positive, got 0/,
      ],
      [
        ["--queue", "q", "--handler", "./worker_handlers.mjs:slow", "--bogus"],
        /no such option: --bogus/,
      ],
    ];
    const outcomes = await Promise.all(
      cases.map(async ([args]) => {
        const child = new WorkerProcess(process.execPath, [
          BIN,
          "worker",
          "--runtime-dir",
          join(dir, "rt"),
          ...args,
        ]);
        return [await child.exit(), child.output] as const;
      }),
    );
    outcomes.forEach(([code, output], i) => {
      const [, expected] = cases[i] ?? [[], /$/];
      assert.equal(code, 2, output);
      assert.match(output, /^taskfleet-node: error: [^\n]+\n$/);
      assert.match(output, expected);
    });
  });
});

describe("the taskfleet-node bin", () => {
  it("says its version and refuses an unknown command (exit 2)", async () => {
    const run = (args: string[]): Promise<[number | null, string]> =>
      new Promise((resolve) => {
        const child = spawn(process.execPath, [BIN, ...args], { env: cleanEnv(), cwd: FIXTURES });
        let out = "";
        child.stdout.on("data", (c: Buffer) => (out += c.toString()));
        child.stderr.on("data", (c: Buffer) => (out += c.toString()));
        child.once("exit", (code) => {
          resolve([code, out]);
        });
      });
    const [code, out] = await run(["--version"]);
    assert.equal(code, 0);
    assert.match(out, /^taskfleet-node, version \d+\.\d+\.\d+/);
    const [bad, said] = await run(["frobnicate"]);
    assert.equal(bad, 2);
    assert.equal(
      said,
      "taskfleet-node: error: no such command 'frobnicate'; run 'taskfleet-node --help' for the commands\n",
    );
  });
});
