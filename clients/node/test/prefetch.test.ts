// Prefetch in the Node worker: claimed tasks beyond the free slots wait in the worker, held
// (their leases beaten), and a slot whose handler returned starts one at once. Units of
// `Execution` (no Redis), then workers against a real redis-server: prefetched tasks run,
// a drain gives them back unstarted (no attempt), a SIGKILL loses none of them (their
// leases bring them back), and with prefetch 0 a worker never holds more than its slots.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, afterEach, before, beforeEach, describe, it } from "node:test";

import { Queue, Worker } from "../src/index.js";
import type { ClaimedTask } from "../src/worker/claimed.js";
import { Execution, type Outcome, Run } from "../src/worker/execution.js";
import { Flag } from "../src/worker/flag.js";
import { RedisGate } from "../src/worker/gate.js";
import { HandlerSet } from "../src/worker/handlers.js";
import { Outbox } from "../src/worker/outcomes.js";
import { checkSettings } from "../src/worker/settings.js";
import { RedisServer, until } from "./redis.js";
import { WorkerProcess, runs } from "./workers.js";

function task(id: string): ClaimedTask {
  return {
    id,
    token: `t:${id}`,
    payload: {},
    attempts: 1,
    maxAttempts: 3,
    timeout: null,
    lost: 0,
    priority: 0,
    cost: 1,
    waited: null,
    name: null,
    trace: null,
    group: null,
    after: "",
    deadlineMs: null,
  };
}

/** Every ready callback and microtask runs; nothing here sleeps. */
async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise<void>((resolve) => setImmediate(resolve));
}

/** An execution of `concurrency` slots whose handler returns when the test says. */
function gated(
  concurrency: number,
  prefetch: number,
): {
  ex: Execution;
  outcomes: Outcome[];
  began: string[];
  finish: (id: string) => void;
} {
  const outcomes: Outcome[] = [];
  const began: string[] = [];
  const open = new Map<string, () => void>();
  const handlers = HandlerSet.of(
    (_payload: Record<string, unknown>, context: { id: string }) =>
      new Promise<null>((resolve) => {
        began.push(context.id);
        open.set(context.id, () => {
          resolve(null);
        });
      }),
    undefined,
  );
  const ex = new Execution({
    queue: "q",
    pod: "p",
    incarnation: "i",
    concurrency,
    prefetch,
    defaultTimeout: null,
    handlers,
    outbox: {
      add: (o: Outcome) => outcomes.push(o),
      get size() {
        return outcomes.length;
      },
    },
    slotFreed: new Flag(),
    changed: () => undefined,
    report: () => undefined,
  });
  const finish = (id: string): void => {
    const resolve = open.get(id);
    assert.ok(resolve !== undefined, `${id} has not begun`);
    resolve();
  };
  return { ex, outcomes, began, finish };
}

describe("prefetch in the worker's execution", () => {
  it("defaults to twice the concurrency, as the Python worker's; 0 turns it off", () => {
    assert.equal(checkSettings("jobs", {}, "p", "i").prefetch, 2);
    assert.equal(checkSettings("jobs", { concurrency: 8 }, "p", "i").prefetch, 16);
    assert.equal(checkSettings("jobs", { concurrency: 8, prefetch: 0 }, "p", "i").prefetch, 0);
    assert.equal(checkSettings("jobs", { concurrency: 8, prefetch: 3 }, "p", "i").prefetch, 3);
  });

  it("off (0): a claim's tasks all start, and the room is the free slots, as before", async () => {
    const { ex, began } = gated(2, 0);
    ex.typicalRunMs = 1;
    assert.equal(ex.room(), 2);
    assert.equal(ex.prefetchRoom(), 0);
    assert.deepEqual(ex.refill(2), [2, 0]);
    ex.admit([task("a"), task("b")]);
    await settle();
    assert.deepEqual(began, ["a", "b"]);
    assert.equal(ex.waitingCount, 0);
    assert.equal(ex.room(), 0);
  });

  it("applies only once runs are known short, and claims the slots plus the prefetch", () => {
    const { ex } = gated(2, 3);
    assert.equal(ex.room(), 2); // no run seen yet
    ex.typicalRunMs = 50;
    assert.equal(ex.room(), 2); // long runs
    ex.typicalRunMs = 1;
    assert.equal(ex.room(), 5);
    ex.prefetchWaitedTooLong();
    assert.equal(ex.room(), 2);
  });

  it("tasks past the free slots wait held, leases beaten, and one starts as soon as a handler returns", async () => {
    const { ex, outcomes, began, finish } = gated(2, 2);
    ex.typicalRunMs = 1;
    ex.admit([task("a"), task("b"), task("c"), task("d")]);
    await settle();
    assert.deepEqual(began, ["a", "b"]);
    assert.equal(ex.waitingCount, 2);
    assert.deepEqual([...ex.leases().keys()].sort(), ["a", "b", "c", "d"]);
    assert.equal(ex.room(), 0);
    // a completion of `a` would refill one, as a task to wait (no slot is free meanwhile)
    finish("a");
    await settle();
    assert.deepEqual(began, ["a", "b", "c"]); // no round trip: c took a's slot
    assert.equal(outcomes.length, 1);
    assert.deepEqual(ex.refill(1), [1, 1]);
    finish("b");
    await settle();
    assert.deepEqual(began, ["a", "b", "c", "d"]);
    assert.equal(ex.waitingCount, 0);
  });

  it("a drain's withdrawal gives back the waiting tasks, which never start; a lost lease drops one without holding a slot", async () => {
    const { ex, began, finish } = gated(1, 3);
    ex.typicalRunMs = 1;
    ex.admit([task("a"), task("b"), task("c"), task("d")]);
    await settle();
    ex.abandon(["b"]);
    assert.equal(ex.heldSlots.size, 0);
    assert.equal(ex.held.has("b"), false);
    ex.stopStarting();
    const withdrawn = ex.withdrawWaiting();
    assert.deepEqual(
      withdrawn.map((r) => r.task.id),
      ["c", "d"],
    );
    ex.forget(withdrawn);
    assert.deepEqual([...ex.leases().keys()], ["a"]);
    finish("a");
    await settle();
    assert.deepEqual(began, ["a"]);
    assert.equal(ex.waitingCount, 0);
  });

  it("a claim pause's give-back takes the waiting tasks (withdrawHeld), as the held runs", async () => {
    const { ex, began } = gated(1, 2);
    ex.typicalRunMs = 1;
    ex.admit([task("a"), task("b"), task("c")]);
    await settle();
    assert.deepEqual(
      ex.heldRuns().map((r) => r.task.id),
      ["b", "c"],
    );
    const back = ex.withdrawHeld(ex.heldRuns().filter((r) => r.task.id === "c"));
    assert.deepEqual(
      back.map((r) => r.task.id),
      ["c"],
    );
    assert.equal(ex.waitingCount, 1);
    assert.deepEqual(began, ["a"]);
  });
});

describe("the outbox with prefetch", () => {
  it("a write waits for the outcomes the waiting tasks are about to bring, and takes them in one call", async () => {
    const writes: string[][] = [];
    let waiting = true;
    const stop = new Flag();
    const gate = new RedisGate({
      reconnect: () => Promise.resolve(),
      reachable: () => undefined,
      backoffBaseMs: 1,
      backoffMaxMs: 1,
    });
    const outbox = new Outbox(
      (batch) => {
        writes.push(batch.map((o) => o.run.task.id));
        batch.length = 0;
        return Promise.resolve();
      },
      gate,
      new Flag(),
      () => waiting,
    );
    const outcome = (id: string): Outcome => ({
      run: new Run(task(id), 0, null),
      result: "null",
      error: null,
      verdict: null,
    });
    const serving = outbox.serve(stop);
    outbox.add(outcome("a"));
    await settle();
    assert.deepEqual(writes, []); // more are coming: held (at most OUTBOX_HOLD_MAX_MS)
    outbox.add(outcome("b"));
    waiting = false; // the last waiting task started: its slot's outcome is the last
    outbox.add(outcome("c"));
    await until("written", () => writes.length === 1);
    assert.deepEqual(writes, [["a", "b", "c"]]);
    // without tasks waiting, an outcome goes out at once
    outbox.add(outcome("d"));
    await until("written", () => writes.length === 2);
    assert.deepEqual(writes[1], ["d"]);
    stop.set();
    outbox.ready.set();
    await serving;
    await gate.close();
  });
});

interface Job {
  readonly gate?: boolean;
  readonly warm?: boolean;
}

describe("prefetch against a real redis-server", () => {
  const server = new RedisServer();
  let dir: string;
  const started: WorkerProcess[] = [];
  before(() => server.start());
  after(() => server.stop());
  beforeEach(async () => {
    await server.flush();
    dir = mkdtempSync(join(tmpdir(), "taskfleet-node-prefetch-"));
  });
  // In-process workers and queues a test opened: drained and closed after it, whatever
  // happened (a failed assertion must not leave a worker running the file forever).
  const live: Promise<number>[] = [];
  const liveWorkers: Worker<Job>[] = [];
  const queues: Queue<Job>[] = [];
  afterEach(async () => {
    await Promise.all(started.splice(0).map((w) => w.stop()));
    for (const w of liveWorkers.splice(0)) {
      w.drain();
      w.drain(); // the second skips to the release at once
    }
    await Promise.all(live.splice(0));
    await Promise.all(queues.splice(0).map((q) => q.close()));
    rmSync(dir, { recursive: true, force: true });
  });

  function openQueue(): Queue<Job> {
    const q = new Queue<Job>("pf", { redisUrl: server.url });
    queues.push(q);
    return q;
  }

  function runWorker(w: Worker<Job>): Promise<number> {
    const running = w.run();
    liveWorkers.push(w);
    live.push(running);
    return running;
  }

  /** 50 quick tasks done: the worker's runs are known short (the condition for prefetch). */
  async function warmUp(q: Queue<Job>, payload: Record<string, unknown> = {}): Promise<void> {
    const ids = await q.enqueueMany(Array.from({ length: 50 }, () => ({ payload })));
    await until(
      "the warm-up tasks are done",
      async () => (await Promise.all(ids.map((id) => q.get(id)))).every((t) => t?.state === "done"),
      20_000,
    );
  }

  /**
   * A worker of one slot and prefetch 3 whose slot runs a gated task while three tasks wait
   * behind it, claimed.
   */
  async function heldBehindGate(pod: string): Promise<{
    q: Queue<Job>;
    w: Worker<Job>;
    running: Promise<number>;
    ran: string[];
    open: () => void;
    gatedId: string;
    behind: string[];
  }> {
    const q = openQueue();
    let open = (): void => undefined;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const ran: string[] = [];
    const w = new Worker<Job>("pf", {
      redisUrl: server.url,
      pod,
      concurrency: 1,
      prefetch: 3,
      heartbeatIntervalMs: 300,
      drainTimeoutMs: 30_000,
      fireSchedules: false,
      handler: async (job, context) => {
        if (job.gate === true) {
          ran.push(context.id);
          await gate;
        } else if (job.warm !== true) {
          ran.push(context.id);
        }
        return null;
      },
    });
    const running = runWorker(w);
    await warmUp(q, { warm: true });
    const [gatedId = "", ...behind] = await q.enqueueMany([
      { payload: { gate: true } },
      { payload: {} },
      { payload: {} },
      { payload: {} },
    ]);
    await until(
      "the gated task runs and three wait behind it, claimed",
      () => ran.includes(gatedId) && w.execution.waitingCount === 3,
    );
    for (const id of behind) assert.equal((await q.get(id))?.state, "running");
    assert.deepEqual(ran, [gatedId]);
    return { q, w, running, ran, open, gatedId, behind };
  }

  it("prefetched tasks run, each once, as soon as the slot frees", async () => {
    const { q, w, running, ran, open, gatedId, behind } = await heldBehindGate("pf-run");
    open();
    await until("all done", async () =>
      (await Promise.all([gatedId, ...behind].map((id) => q.get(id)))).every(
        (t) => t?.state === "done",
      ),
    );
    assert.deepEqual(ran, [gatedId, ...behind]);
    for (const id of behind) assert.equal((await q.get(id))?.attempts, 1);
    w.drain();
    assert.equal(await running, 0);
    await q.close();
  });

  it("a prefetched task cancelled while it waits ends cancelled without its handler being called", async () => {
    const { q, w, running, ran, open, gatedId, behind } = await heldBehindGate("pf-cancel");
    const [cancelled = "", ...others] = behind;
    await q.cancel(cancelled);
    await until(
      "the waiting task ends cancelled",
      async () => (await q.get(cancelled))?.state === "cancelled",
    );
    assert.equal(w.execution.waitingCount, 2);
    open();
    await until("the others are done", async () =>
      (await Promise.all([gatedId, ...others].map((id) => q.get(id)))).every(
        (t) => t?.state === "done",
      ),
    );
    assert.deepEqual(ran, [gatedId, ...others]); // its handler never ran
    w.drain();
    assert.equal(await running, 0);
    assert.equal((await q.stats()).cancelled, 1);
    await q.close();
  });

  it("a drain gives the prefetched tasks back at once, untouched (no attempt, no history), and waits for the running one", async () => {
    const { q, w, running, ran, open, gatedId, behind } = await heldBehindGate("pf-drain");
    w.drain();
    await until("the waiting tasks are back in the queue", async () =>
      (await Promise.all(behind.map((id) => q.get(id)))).every((t) => t?.state === "pending"),
    );
    assert.equal((await q.get(gatedId))?.state, "running"); // still running: waited for
    open();
    assert.equal(await running, 0);
    assert.equal((await q.get(gatedId))?.state, "done");
    for (const id of behind) {
      const t = await q.get(id);
      assert.equal(t?.state, "pending");
      assert.equal(t.attempts, 0);
      assert.equal(t.lost, 0);
      assert.deepEqual(t.history, []);
    }
    assert.deepEqual(ran, [gatedId]);
    assert.equal(w.counters.released, 3);
    assert.equal((await q.stats()).released, 3);
    await q.close();
  });

  it("after a SIGKILL, the prefetched tasks come back through their leases and run once elsewhere", async () => {
    const q = openQueue();
    await q.client.hset(q.keys.key("config"), "lease_ttl_s", "1");
    const log = join(dir, "runs.log");
    const worker = (pod: string): WorkerProcess => {
      const w = WorkerProcess.node([
        "--queue",
        "pf",
        "--redis-url",
        server.url,
        "--pod",
        pod,
        "--runtime-dir",
        join(dir, `rt-${pod}`),
        "--heartbeat-interval",
        "0.3",
        "--no-fire-schedules",
        "--handler",
        "./worker_handlers.mjs:slow",
        "--concurrency",
        "1",
        "--prefetch",
        "3",
        "--drain-timeout",
        "0.5",
      ]);
      started.push(w);
      return w;
    };
    const a = worker("pf-a");
    await a.saw(/event=worker_started .*prefetch=3/);
    await warmUp(q, { ms: 0 });
    const [gatedId = "", ...behind] = await q.enqueueMany([
      { payload: { ms: 60_000, log } as Job },
      ...[1, 2, 3].map(() => ({ payload: { ms: 0, log } as Job })),
    ]);
    await until("a runs the long task and holds three behind it", async () => {
      if (!runs(log).some(([what, id]) => what === "start" && id === gatedId)) return false;
      const held = await Promise.all(behind.map((id) => q.get(id)));
      return held.every((t) => t?.state === "running");
    });
    a.kill("SIGKILL");
    assert.equal(await a.exit(), null);
    const b = worker("pf-b");
    await until(
      "b does the three, the long task running again",
      async () => {
        const ts = await Promise.all(behind.map((id) => q.get(id)));
        return ts.every((t) => t?.state === "done");
      },
      20_000,
    );
    for (const id of behind) {
      const t = await q.get(id);
      assert.equal(t?.lost, 1, "taken back from a's lease");
      const lines = runs(log).filter(([, tid]) => tid === id);
      assert.deepEqual(
        lines.map(([what, , , pid]) => [what, pid]),
        [
          ["start", b.pid],
          ["end", b.pid],
        ],
      );
    }
    await until(
      "b runs the long task too",
      () => runs(log).filter(([what, id]) => what === "start" && id === gatedId).length === 2,
    );
    b.kill("SIGTERM");
    assert.equal(await b.exit(), 0, b.output);
    assert.equal((await q.get(gatedId))?.state, "pending"); // handed back at b's drain deadline
    await q.close();
  });

  /**
   * A worker of 4 slots draining two warm-up batches on a queue of the given config: the
   * most tasks it held at once (running and waiting), and the worker itself.
   */
  async function mostHeld(
    pod: string,
    prefetch: number,
    config: { maxConcurrency?: number },
  ): Promise<{ most: number; worker: Worker<Job> }> {
    const q = openQueue();
    await q.configure(config);
    const w = new Worker<Job>("pf", {
      redisUrl: server.url,
      pod,
      concurrency: 4,
      prefetch,
      heartbeatIntervalMs: 300,
      fireSchedules: false,
      handler: () => null,
    });
    let most = 0;
    w.on("active", () => {
      most = Math.max(most, w.execution.held.size + w.execution.waitingCount);
    });
    const running = runWorker(w);
    await warmUp(q);
    await warmUp(q);
    w.drain();
    assert.equal(await running, 0);
    assert.equal((await q.stats()).completed, 100);
    await q.close();
    return { most, worker: w };
  }

  it("under a fleet-wide max_concurrency nothing is prefetched, and the queue drains", async () => {
    const { most } = await mostHeld("pf-limited", 4, { maxConcurrency: 2 });
    assert.ok(most >= 1 && most <= 2, `held at most ${most}`);
  });

  it("with prefetch 0, a worker never holds more tasks than its slots, and drains all", async () => {
    const { most, worker } = await mostHeld("pf-zero", 0, {});
    assert.ok(most >= 1 && most <= 4, `held at most ${most}`);
    assert.equal(worker.execution.typicalRunMs, null); // not even measured
  });

  it("with prefetch 0, a worker never holds more tasks than its slots, and drains all", async () => {
    const q = openQueue();
    const w = new Worker<Job>("pf", {
      redisUrl: server.url,
      pod: "pf-zero",
      concurrency: 4,
      prefetch: 0,
      heartbeatIntervalMs: 300,
      fireSchedules: false,
      handler: () => null,
    });
    let most = 0;
    w.on("active", () => {
      most = Math.max(most, w.execution.held.size + w.execution.waitingCount);
    });
    const running = runWorker(w);
    await warmUp(q);
    await warmUp(q);
    assert.ok(most >= 1 && most <= 4, `held at most ${most}`);
    assert.equal(w.execution.typicalRunMs, null); // not even measured
    w.drain();
    assert.equal(await running, 0);
    assert.equal((await q.stats()).completed, 100);
    await q.close();
  });
});
