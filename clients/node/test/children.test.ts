// Children added at run time from a Node handler (`task.addChildren`): the parent ends
// done only once every child is, a failed child fails it, a dependant receives its result
// (`task.dependencyResults`), and a run that no longer holds its task adds nothing.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, afterEach, before, beforeEach, describe, it } from "node:test";

import { batchRecords } from "../src/encoding.js";
import { type HandlerFn, PermanentFailure, Queue, StaleToken, Worker } from "../src/index.js";
import { Broker } from "../src/worker/broker.js";
import { RedisServer, until } from "./redis.js";

describe("children added at run time", () => {
  const server = new RedisServer();
  let dir: string;
  let queue: Queue;
  let release: () => void = () => undefined;
  let gate: Promise<void>;

  const handlers: Record<string, HandlerFn> = {
    split: async (payload, task) => {
      const pages = Number(payload.pages);
      const ids = await task.addChildren(
        Array.from({ length: pages }, (_, i) => ({
          payload: { page: i, fail: payload.fail === i },
          name: "page",
          taskId: `${task.id}-p${i}`,
        })),
      );
      return { pages, ids };
    },
    page: async (payload) => {
      await gate;
      if (payload.fail === true) throw new PermanentFailure("page unreadable");
      return { page: payload.page };
    },
    merge: async (_payload, task) => ({ inputs: await task.dependencyResults() }),
    // adds its pages, then fails its first run for good; returns on the next
    splitOnce: async (payload, task) => {
      const pages = Number(payload.pages);
      await task.addChildren(
        Array.from({ length: pages }, (_, i) => ({
          payload: { page: i },
          name: "page",
          taskId: `${task.id}-p${i}`,
        })),
      );
      const run = (runs.get(task.id) ?? 0) + 1;
      runs.set(task.id, run);
      if (run === 1) throw new PermanentFailure("the first run fails after adding its pages");
      return { pages, run };
    },
  };
  const runs = new Map<string, number>();

  async function withWorker(body: () => Promise<void>): Promise<void> {
    const worker = new Worker("jobs", {
      redisUrl: server.url,
      handlers,
      pod: "children-worker",
      concurrency: 8,
      heartbeatIntervalMs: 300,
      runtimeDir: dir,
      fireSchedules: false,
    });
    const running = worker.run();
    try {
      await body();
    } finally {
      release();
      worker.drain();
      assert.equal(await running, 0);
    }
  }

  before(() => server.start());
  after(() => server.stop());
  beforeEach(async () => {
    await server.flush();
    dir = mkdtempSync(join(tmpdir(), "taskfleet-node-children-"));
    queue = new Queue("jobs", { redisUrl: server.url });
    gate = new Promise((resolve) => (release = resolve));
  });
  afterEach(async () => {
    await queue.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("completes the parent only after its children, and hands its result on", () =>
    withWorker(async () => {
      await queue.enqueue({ pages: 3 }, { name: "split", taskId: "doc" });
      await queue.enqueue({}, { name: "merge", taskId: "merge", after: ["doc"] });
      // the handler returned; its children are held at the gate
      await until(
        "the parent waits for its children",
        async () => (await queue.get("doc"))?.state === "waiting",
      );
      const waiting = await queue.get("doc");
      assert.deepEqual(waiting?.after, ["doc-p0", "doc-p1", "doc-p2"]);
      for (const id of waiting.after) assert.notEqual((await queue.get(id))?.state, "done");
      assert.equal((await queue.get("merge"))?.state, "waiting");
      release();
      const done = await queue.wait(["doc", "merge"], { timeoutMs: 30_000 });
      assert.equal(done.doc?.state, "done");
      assert.deepEqual(done.doc.result, { pages: 3, ids: ["doc-p0", "doc-p1", "doc-p2"] });
      for (const id of waiting.after) {
        const child = await queue.get(id);
        assert.equal(child?.state, "done");
        assert.ok(
          (child.finishedAt?.getTime() ?? Infinity) <= (done.doc.finishedAt?.getTime() ?? 0),
        );
      }
      assert.deepEqual(done.merge?.result, {
        inputs: { doc: { pages: 3, ids: ["doc-p0", "doc-p1", "doc-p2"] } },
      });
      const flow = await queue.flow("doc");
      assert.deepEqual([flow?.done, flow?.open, flow?.outcome], [5, 0, "done"]);
    }));

  it("fails the parent when a child dies (on_dep_fail fail)", () =>
    withWorker(async () => {
      release();
      await queue.enqueue({ pages: 2, fail: 1 }, { name: "split", taskId: "bad" });
      const done = await queue.wait(["bad", "bad-p0", "bad-p1"], { timeoutMs: 30_000 });
      assert.equal(done["bad-p1"]?.state, "dead");
      assert.equal(done.bad?.state, "dead");
      assert.equal(done.bad.reason, "dependency failed");
      assert.equal((await queue.flow("bad"))?.outcome, "failed");
    }));

  it("runs a retried parent again once the children its failed run added have ended, never done by their ends alone", () =>
    withWorker(async () => {
      await queue.enqueue({ pages: 2 }, { name: "splitOnce", taskId: "twice", maxAttempts: 1 });
      await until("the first run fails", async () => (await queue.get("twice"))?.state === "dead");
      assert.equal(await queue.retry({ taskIds: ["twice"] }), 1);
      assert.equal((await queue.get("twice"))?.state, "waiting"); // its pages are held at the gate
      release();
      const done = await queue.wait(["twice"], { timeoutMs: 30_000 });
      assert.equal(done.twice?.state, "done");
      assert.deepEqual(done.twice.result, { pages: 2, run: 2 });
    }));

  it("refuses children of a run that does not hold its task: StaleToken, nothing stored", async () => {
    await queue.enqueue({}, { taskId: "parent" });
    const broker = new Broker("jobs", queue.client, "p", "i", {
      replyTimeoutMs: 5000,
      host: "",
      served: null,
    });
    await assert.rejects(
      broker.addChildren(
        "parent",
        "not-its-token",
        batchRecords([{ payload: {}, taskId: "orphan" }]),
      ),
      StaleToken,
    );
    assert.equal(await queue.get("orphan"), null);
  });
});
