import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";

import type { Redis } from "ioredis";

import { packagedBundle } from "../src/bundle.js";
import { Scripts } from "../src/connection.js";
import { CHANGE_BATCH } from "../src/flowcontrol.js";
import {
  type EnqueueItem,
  InvalidArgument,
  Queue,
  TaskNotFound,
  chain,
  group,
} from "../src/index.js";
import { needsPython, python } from "./python.js";
import { RedisServer } from "./redis.js";
import { idAndToken } from "../src/worker/claimed.js";

const server = new RedisServer();
before(() => server.start());
after(() => server.stop());
beforeEach(() => server.flush());

async function withQueue<T>(name: string, body: (q: Queue) => Promise<T>): Promise<T> {
  const q = new Queue(name, { redisUrl: server.url });
  try {
    return await body(q);
  } finally {
    await q.close();
  }
}

/** Claim at most `max` pending tasks by hand from the bundle; complete them unless `hold`. The ids claimed. */
async function work(q: Queue, max = 100, hold = false): Promise<string[]> {
  const bundle = packagedBundle();
  const scripts = new Scripts(q.client, bundle);
  const claim = bundle.pack("claim", {
    pod: "hand",
    incarnation: "i1",
    max_tasks: max,
    token_base: "tb",
    bound: 100,
  });
  const reply = (await scripts.run("claim", q.keys, claim)) as unknown[];
  const held = reply.slice(3).map((r) => idAndToken(r));
  const records = held.map(([task_id, token]) => ({ task_id, token, result: "" }));
  if (records.length > 0 && !hold)
    await scripts.run("complete", q.keys, bundle.pack("complete", {}, records));
  return records.map((r) => r.task_id);
}

/** Work the queue until nothing is pending; every id run, in rounds. */
async function drain(q: Queue): Promise<string[][]> {
  const rounds: string[][] = [];
  for (let ran = await work(q); ran.length > 0; ran = await work(q)) rounds.push(ran.sort());
  return rounds;
}

/**
 * The flow of these tests, by explicit ids: a, then b1 b2 b3 side by side, then m, then t;
 * x waits for b2 alone.
 */
const SHAPE: Readonly<Record<string, readonly string[]>> = {
  a: [],
  b1: ["a"],
  b2: ["a"],
  b3: ["a"],
  m: ["b1", "b2", "b3"],
  t: ["m"],
  x: ["b2"],
};
const IDS = Object.keys(SHAPE);

/** Enqueue SHAPE into each of `queues` from Python (one enqueue_many each). */
function pythonEnqueue(queues: readonly string[]): void {
  python<null>(
    "import json, sys\nfrom taskfleet import Queue\n" +
      "url, queues, shape = json.load(sys.stdin)\n" +
      "for name in queues:\n" +
      "    with Queue(name, url) as q:\n" +
      "        q.enqueue_many([{'payload': {'n': i}, 'task_id': tid, **({'after': deps} if deps else {})}\n" +
      "                        for i, (tid, deps) in enumerate(shape.items())])\n" +
      "print('null')",
    [server.url, queues, SHAPE],
  );
}

type States = Record<string, [string | undefined, string | null | undefined]>;

async function states(q: Queue, ids: readonly string[] = IDS): Promise<States> {
  const out: States = {};
  for (const id of ids) {
    const task = await q.get(id);
    out[id] = [task?.state, task?.reason];
  }
  return out;
}

function pythonCall<T>(queue: string, call: string): T {
  return python<T>(
    "import json, sys\nfrom taskfleet import Queue\n" +
      "url = json.load(sys.stdin)\n" +
      `with Queue('${queue}', url) as q:\n` +
      `    out = q.${call}\n` +
      "print(json.dumps(out if isinstance(out, int) else {k: str(v.value) for k, v in out.items()}))",
    server.url,
  );
}

/** evalsha calls since the last reset (each script call of the client is one). */
async function scriptCalls(admin: Redis): Promise<number> {
  const info = await admin.info("commandstats");
  const line = /cmdstat_evalsha:calls=(\d+)/.exec(info);
  return line === null ? 0 : Number(line[1]);
}

describe(
  "cancelFlow and retryFlow against Python's cancel_flow and retry_flow",
  needsPython,
  () => {
    it("cancels a flow Python enqueued with the end states Python's cancel_flow gives", () =>
      withQueue("py", (py) =>
        withQueue("node", async (node) => {
          pythonEnqueue(["py", "node"]);
          // a done, one b running (claimed, not completed), the rest pending or waiting
          for (const q of [py, node]) {
            assert.deepEqual(await work(q), ["a"]);
            assert.equal((await work(q, 1, true)).length, 1);
          }
          const fromPython = pythonCall<Record<string, string>>("py", "cancel_flow('m')");
          const fromNode = await node.cancelFlow("m");
          assert.deepEqual(fromNode, fromPython);
          assert.deepEqual(await states(node), await states(py));
          const outcomes = Object.values(fromNode).sort();
          assert.deepEqual(outcomes, [
            "cancelled",
            "cancelled",
            "cancelled",
            "cancelled",
            "cancelled",
            "done",
            "requested",
          ]);
          // dependants first: none ended dead by its policy
          for (const [id, [state]] of Object.entries(await states(node))) {
            assert.notEqual(state, "dead", id);
          }
        }),
      ));

    it("cancels a branch only, as Python does", () =>
      withQueue("py", (py) =>
        withQueue("node", async (node) => {
          pythonEnqueue(["py", "node"]);
          const fromPython = pythonCall<Record<string, string>>(
            "py",
            "cancel_flow('b2', branch=True)",
          );
          const fromNode = await node.cancelFlow("b2", { branch: true });
          assert.deepEqual(fromNode, fromPython);
          assert.deepEqual(Object.keys(fromNode).sort(), ["b2", "m", "t", "x"]);
          assert.ok(Object.values(fromNode).every((o) => o === "cancelled"));
          assert.deepEqual(await states(node), await states(py));
          const left = await states(node, ["a", "b1", "b3"]);
          assert.deepEqual(left, {
            a: ["pending", null],
            b1: ["waiting", null],
            b3: ["waiting", null],
          });
          // the whole flow from any member reaches the rest
          const rest = await node.cancelFlow("b1");
          assert.deepEqual(Object.keys(rest).sort(), IDS.slice().sort());
          assert.equal(rest.a, "cancelled");
          assert.equal(rest.b2, "finished");
        }),
      ));

    it("retries after a cancel dependencies first, as Python's retry_flow", () =>
      withQueue("py", (py) =>
        withQueue("node", async (node) => {
          pythonEnqueue(["py", "node"]);
          for (const q of [py, node]) {
            assert.deepEqual(await work(q), ["a"]);
            await q.cancelFlow("a");
          }
          const fromPython = pythonCall<number>("py", "retry_flow('t')");
          const fromNode = await node.retryFlow("t");
          assert.equal(fromNode, 6);
          assert.equal(fromNode, fromPython);
          assert.deepEqual(await states(node), await states(py));
          // each dependant waits again for what it needs rather than dying by its policy
          const now = await states(node);
          assert.deepEqual(now.m, ["waiting", null]);
          assert.deepEqual(now.x, ["waiting", null]);
          assert.deepEqual(now.b1, ["pending", null]);
          assert.deepEqual(await drain(node), [["b1", "b2", "b3"], ["m", "x"], ["t"]]);
          assert.ok(Object.values(await states(node)).every(([state]) => state === "done"));
          // nothing left to send back
          assert.equal(await node.retryFlow("a"), 0);
        }),
      ));
  },
);

describe("cancelFlow and retryFlow", () => {
  it("refuses an unknown id and a bad option", () =>
    withQueue("jobs", async (q) => {
      await assert.rejects(q.cancelFlow("nope"), TaskNotFound);
      await assert.rejects(q.retryFlow("nope", { branch: true }), TaskNotFound);
      const id = await q.enqueue({});
      await assert.rejects(
        q.cancelFlow(id, { branch: "yes" as unknown as boolean }),
        InvalidArgument,
      );
      await assert.rejects(q.retryFlow(1 as unknown as string), InvalidArgument);
      assert.deepEqual(await q.cancelFlow(id), { [id]: "cancelled" });
      assert.equal(await q.retryFlow(id), 1);
      assert.equal((await q.get(id))?.state, "pending");
    }));

  it("cancels and retries a 1,000-task flow in calls of 200", () =>
    withQueue("jobs", async (q) => {
      const task = (): EnqueueItem => ({ payload: {} });
      const flow = await q.enqueueFlow(
        chain(task(), group(...Array.from({ length: 998 }, task)), task()),
      );
      assert.equal(flow.ids.length, 1000);
      const root = flow.ids[0] ?? "";
      const last = flow.ids[999] ?? "";
      const admin = server.admin();
      try {
        await admin.config("RESETSTAT");
        const out = await q.cancelFlow(root);
        assert.equal(Object.keys(out).length, 1000);
        assert.ok(Object.values(out).every((o) => o === "cancelled"));
        assert.equal(await scriptCalls(admin), 1000 / CHANGE_BATCH);
        assert.equal((await q.stats()).cancelled, 1000);
        await admin.config("RESETSTAT");
        assert.equal(await q.retryFlow(last), 1000);
        assert.equal(await scriptCalls(admin), 1000 / CHANGE_BATCH);
      } finally {
        admin.disconnect();
      }
      assert.equal((await q.get(root))?.state, "pending");
      assert.equal((await q.get(last))?.state, "waiting");
      assert.equal((await q.stats()).waiting, 999);
    }));
});
