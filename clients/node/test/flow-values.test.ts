// Flows as values from Node: chain, group and chord built into one enqueue call, the
// flow's record read back, and the same flow enqueued from Python giving the same records.
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";

import { packagedBundle } from "../src/bundle.js";
import { Scripts } from "../src/connection.js";
import {
  type EnqueueItem,
  Flow,
  type FlowPart,
  InvalidArgument,
  Queue,
  StaleToken,
  chain,
  chord,
  group,
} from "../src/index.js";
import { needsPython, python } from "./python.js";
import { RedisServer } from "./redis.js";
import { idAndToken } from "../src/worker/claimed.js";

const server = new RedisServer();
before(() => server.start());
after(() => server.stop());
beforeEach(() => server.flush());

async function withQueue<T>(body: (q: Queue) => Promise<T>, name = "jobs"): Promise<T> {
  const q = new Queue(name, { redisUrl: server.url });
  try {
    return await body(q);
  } finally {
    await q.close();
  }
}

/** Claim what is pending and complete it (or fail it for good), by hand from the bundle; the ids run. */
async function work(q: Queue, kill: readonly string[] = []): Promise<string[]> {
  const bundle = packagedBundle();
  const scripts = new Scripts(q.client, bundle);
  const claim = bundle.pack("claim", {
    pod: "hand",
    incarnation: "i1",
    max_tasks: 100,
    token_base: "tb",
    bound: 100,
  });
  const reply = (await scripts.run("claim", q.keys, claim)) as unknown[];
  const held = reply.slice(3).map((r) => idAndToken(r));
  const records = held.map(([task_id, token]) => ({
    task_id,
    token,
    result: JSON.stringify({ ran: task_id }),
  }));
  for (const r of records.filter((r) => kill.includes(r.task_id))) {
    const argv = bundle.pack("fail", {
      task_id: r.task_id,
      token: r.token,
      error: "boom",
      retryable: 0,
      jitter: 0,
      reason: "",
    });
    await scripts.run("fail", q.keys, argv);
  }
  const rest = records.filter((r) => !kill.includes(r.task_id));
  if (rest.length > 0) await scripts.run("complete", q.keys, bundle.pack("complete", {}, rest));
  return records.map((r) => r.task_id).sort();
}

const task = (id: string, extra: Partial<EnqueueItem> = {}): EnqueueItem => ({
  payload: { id },
  taskId: id,
  ...extra,
});

describe("chain, group, chord", () => {
  it("enqueues a nested flow in one call: ids in order, the tasks that end it, one flow", () =>
    withQueue(async (q) => {
      const flow = chain(
        task("fetch"),
        chord(group(task("p1"), task("p2"), task("p3")), task("merge")),
        group(task("fr"), task("de")),
      );
      const ids = await q.enqueueFlow(flow);
      assert.deepEqual(ids, {
        ids: ["fetch", "p1", "p2", "p3", "merge", "fr", "de"],
        last: ["fr", "de"],
      });
      assert.deepEqual((await q.get("p2"))?.after, ["fetch"]);
      assert.deepEqual((await q.get("merge"))?.after, ["p1", "p2", "p3"]);
      assert.deepEqual((await q.get("de"))?.after, ["merge"]);
      for (const id of ids.ids) assert.equal((await q.get(id))?.flow, "fetch");
      const open = await q.flow("fetch");
      assert.ok(open !== null);
      assert.equal(open.open, 7);
      assert.equal(open.ended, false);
      assert.equal(open.outcome, null);
      assert.ok(open.startedAt instanceof Date);

      assert.deepEqual(await work(q), ["fetch"]);
      assert.deepEqual(await work(q), ["p1", "p2", "p3"]);
      assert.deepEqual(await work(q), ["merge"]);
      assert.equal((await q.get("merge"))?.state, "done");
      assert.deepEqual(await work(q), ["de", "fr"]);
      const ended = await q.flow("fetch");
      assert.ok(ended !== null);
      assert.deepEqual(
        [ended.open, ended.done, ended.dead, ended.cancelled, ended.outcome, ended.ended],
        [0, 7, 0, 0, "done", true],
      );
      assert.ok(ended.endedAt instanceof Date);
      assert.equal((await q.stats()).flows_done, 1);
    }));

  it("gives a task without an id a random one, and keeps a task's own after first", () =>
    withQueue(async (q) => {
      await q.enqueue({}, { taskId: "before" });
      const ids = await q.enqueueFlow(
        chain(task("a"), { payload: { n: 1 }, after: ["before"], onDepFail: "ignore" }),
      );
      assert.equal(ids.ids.length, 2);
      const second = ids.ids[1] ?? "";
      assert.match(second, /^[0-9a-f]{32}$/);
      assert.deepEqual(ids.last, [second]);
      const stored = await q.get(second);
      assert.deepEqual(stored?.after, ["before", "a"]);
      assert.equal(stored.onDepFail, "ignore");
    }));

  it("ends a flow failed when a member dies, its dependants failed by policy", () =>
    withQueue(async (q) => {
      await q.enqueueFlow(chord(group(task("a"), task("b")), task("m")));
      assert.deepEqual(await work(q, ["b"]), ["a", "b"]);
      assert.equal((await q.get("m"))?.state, "dead");
      const record = await q.flow("a");
      assert.deepEqual(
        [record?.open, record?.done, record?.dead, record?.outcome],
        [0, 1, 2, "failed"],
      );
    }));

  it("refuses an empty flow, a part that is no task, a bad task: nothing stored", () =>
    withQueue(async (q) => {
      const refused = async (flow: unknown, message: RegExp): Promise<void> => {
        await assert.rejects(q.enqueueFlow(flow as FlowPart), (e: unknown) => {
          assert.ok(e instanceof InvalidArgument, String(e));
          assert.match(e.message, message);
          return true;
        });
      };
      await refused(chain(), /the flow has no task/);
      await refused(group(chain(), group()), /the flow has no task/);
      await refused(
        chain(task("a"), "b" as unknown as EnqueueItem),
        /a flow's part must be a task .* or a flow, not b/,
      );
      await refused(
        chain(task("a"), { taskId: "x" } as unknown as EnqueueItem),
        /needs a 'payload'/,
      );
      await refused(
        chain(task("a"), { payload: {}, bogus: 1 } as unknown as EnqueueItem),
        /unknown enqueue field\(s\): bogus/,
      );
      await refused(group(task("a"), task("a")), /appears twice/);
      await refused(
        chain(task("a"), { payload: {}, after: "a" } as unknown as EnqueueItem),
        /after must be a list/,
      );
      await refused(chain(task("a"), { payload: {}, delayMs: 5000 }), /cannot be combined/);
      await refused(chain(task("a"), task("b", { after: ["nope"] })), /waits for 'nope'/);
      let deep: FlowPart = task("deep");
      for (let i = 0; i < 102; i++) deep = chain(deep);
      await refused(deep, /nests more than 100 levels/);
      assert.equal(await q.get("a"), null);
      assert.equal(await q.flow("a"), null);
      assert.equal((await q.stats()).pending, 0);
    }));

  it("adds children to a held task, refused with StaleToken for a token it does not hold", () =>
    withQueue(async (q) => {
      await q.enqueue({}, { taskId: "parent" });
      await assert.rejects(q.addChildren("parent", "not-its-token", [task("c0")]), StaleToken);
      assert.equal(await q.get("c0"), null);
      const bundle = packagedBundle();
      const claim = bundle.pack("claim", {
        pod: "hand",
        incarnation: "i1",
        max_tasks: 1,
        token_base: "tb",
        bound: 100,
      });
      const reply = (await new Scripts(q.client, bundle).run("claim", q.keys, claim)) as unknown[];
      const [, token] = idAndToken(reply[3]);
      assert.deepEqual(await q.addChildren("parent", token, [task("c0"), task("c1")]), [
        "c0",
        "c1",
      ]);
      assert.deepEqual(await q.addChildren("parent", token, []), []);
      const parent = await q.get("parent");
      assert.deepEqual(parent?.after, ["c0", "c1"]);
      assert.equal(parent.flow, "parent");
      assert.equal((await q.get("c1"))?.flow, "parent");
    }));

  it("reads no flow as null", () =>
    withQueue(async (q) => {
      assert.equal(await q.flow("nothing"), null);
      await q.enqueue({}, { taskId: "alone" });
      assert.equal(await q.flow("alone"), null);
      await assert.rejects(q.flow(7 as unknown as string), InvalidArgument);
    }));

  it("exposes flows as plain values", () => {
    const f = chord(group(task("a")), task("b"));
    assert.ok(f instanceof Flow);
    assert.equal(f.kind, "chain");
    assert.equal(f.parts.length, 2);
  });
});

// A flow as the Python client's JSON form, with its items' Python names.
function pythonJson(part: FlowPart): unknown {
  if (part instanceof Flow) return { [part.kind]: part.parts.map(pythonJson) };
  const { taskId, name, onDepFail, maxAttempts, ...rest } = part;
  return {
    ...rest,
    task_id: taskId,
    task: name,
    on_dep_fail: onDepFail,
    max_attempts: maxAttempts,
  };
}

const TIMES = new Set(["created_at", "run_at", "enqueued_at"]);

async function records(
  q: Queue,
  ids: readonly string[],
): Promise<Record<string, Record<string, string>>> {
  const out: Record<string, Record<string, string>> = {};
  for (const id of ids) {
    const raw = await q.client.hgetall(q.keys.item("task", id));
    out[id] = Object.fromEntries(Object.entries(raw).filter(([k]) => !TIMES.has(k)));
  }
  return out;
}

describe("the same flow from Python and from Node", needsPython, () => {
  it("stores the same records and the same flow", async () => {
    const flow = chain(
      task("fetch", { name: "fetch", priority: 3 }),
      chord(
        group(task("p1", { name: "ocr" }), task("p2", { name: "ocr", maxAttempts: 2 })),
        task("merge", { onDepFail: "ignore" }),
      ),
      group(task("fr"), chain(task("de"), task("check", { cost: 4 }))),
    );
    const code = `
import json, sys
from taskfleet import Queue
from taskfleet.producer.flows import from_json
d = json.load(sys.stdin)
def clean(v):
    if isinstance(v, dict):
        return {k: clean(x) for k, x in v.items() if x is not None}
    if isinstance(v, list):
        return [clean(x) for x in v]
    return v
with Queue(d["queue"], d["url"]) as q:
    f = q.enqueue_flow(from_json(clean(d["flow"])))
print(json.dumps({"ids": f.ids, "last": f.last}))
`;
    const fromPython = python<{ ids: string[]; last: string[] }>(code, {
      queue: "py",
      url: server.url,
      flow: pythonJson(flow),
    });
    await withQueue(async (js) => {
      await withQueue(async (py) => {
        const fromNode = await js.enqueueFlow(flow);
        assert.deepEqual(fromNode, fromPython);
        assert.deepEqual(await records(js, fromNode.ids), await records(py, fromPython.ids));
        const [a, b] = [await js.flow("fetch"), await py.flow("fetch")];
        assert.deepEqual({ ...a, startedAt: null }, { ...b, startedAt: null });
        assert.equal(a?.open, 7);
      }, "py");
    }, "js");
  });
});
