// Streamed output: chunks a run emits (`task.emit`) reach `for await (... of q.stream(id))`
// as they are written, every attempt's in order, from a Node worker and from a Python
// one, and the same list is read again once the task has finished.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, afterEach, before, beforeEach, describe, it } from "node:test";

import { Queue } from "../src/index.js";
import { PYTHON, REPOSITORY, needsPython } from "./python.js";
import { RedisServer, until } from "./redis.js";
import { FIXTURES, WorkerProcess, cleanEnv } from "./workers.js";

const EXPECTED = [
  [1, "attempt 1 begins"],
  [1, { attempt: 1, step: 1 }],
  [2, "attempt 2 begins"],
  [2, { attempt: 2, step: 1 }],
  [2, "done é"],
];

/** A Python reader of a task's stream: one JSON line [attempt, data] per chunk, as it comes. */
const PY_READER = `
import json, sys
from taskfleet import Queue
with Queue("jobs", sys.argv[1]) as q, open(sys.argv[3], "w") as out:
    for c in q.stream(sys.argv[2]):
        out.write(json.dumps([c.attempt, c.data], ensure_ascii=False) + "\\n")
        out.flush()
`;

describe("a task's streamed output", () => {
  const server = new RedisServer();
  let dir: string;
  let queue: Queue;
  const started: WorkerProcess[] = [];
  const common = (name: string): string[] => [
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
  ];

  before(async () => {
    await server.start();
  });
  after(async () => {
    await server.stop();
  });
  beforeEach(async () => {
    await server.flush();
    dir = mkdtempSync(join(tmpdir(), "taskfleet-node-output-"));
    queue = new Queue("jobs", { redisUrl: server.url });
    await queue.client.hset(queue.keys.key("config"), "backoff_base_s", "0");
  });
  afterEach(async () => {
    await Promise.all(started.splice(0).map((w) => w.stop()));
    await queue.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** Read the stream while the task runs; open the gate once four chunks came. */
  const readLive = async (id: string, gate: string): Promise<unknown[][]> => {
    const seen: unknown[][] = [];
    for await (const chunk of queue.stream(id)) {
      seen.push([chunk.attempt, chunk.data]);
      if (seen.length === 4) {
        assert.equal((await queue.get(id))?.state, "running"); // live: the task still runs
        writeFileSync(gate, "open");
      }
    }
    return seen;
  };
  const readAgain = async (id: string): Promise<unknown[][]> => {
    const seen: unknown[][] = [];
    for await (const chunk of queue.stream(id)) seen.push([chunk.attempt, chunk.data]);
    return seen;
  };

  it("from a Node worker: every chunk of every attempt in order, live, then the same again", async () => {
    const gate = join(dir, "gate");
    const id = await queue.enqueue({ gate });
    const w = WorkerProcess.node([
      ...common("node-1"),
      "--handler",
      "./output_handlers.mjs:twoAttempts",
    ]);
    started.push(w);
    assert.deepEqual(await readLive(id, gate), EXPECTED);
    assert.equal((await queue.get(id))?.state, "done");
    assert.deepEqual(await readAgain(id), EXPECTED);
    const all = [];
    for await (const c of queue.stream(id)) all.push(c);
    const rest = [];
    for await (const c of queue.stream(id, { since: all[2]?.id })) rest.push(c.data);
    assert.deepEqual(rest, [{ attempt: 2, step: 1 }, "done é"]);
  });

  it(
    "from a Node worker, read live by a Python reader in its own process",
    needsPython,
    async () => {
      const gate = join(dir, "gate");
      const id = await queue.enqueue({ gate });
      const out = join(dir, "reader.out");
      const reader = spawn(PYTHON, ["-c", PY_READER, server.url, id, out], {
        cwd: REPOSITORY,
        env: cleanEnv({ PYTHONUNBUFFERED: "1" }),
        stdio: "ignore",
      });
      const exited = new Promise<number | null>((done) => reader.on("exit", done));
      const read = (): unknown[][] =>
        existsSync(out)
          ? readFileSync(out, "utf8")
              .split("\n")
              .filter(Boolean)
              .map((l) => JSON.parse(l) as unknown[])
          : [];
      started.push(
        WorkerProcess.node([...common("node-1"), "--handler", "./output_handlers.mjs:twoAttempts"]),
      );
      await until("four chunks read by Python", () => read().length >= 4, 20_000);
      assert.equal((await queue.get(id))?.state, "running"); // live: the task still runs
      writeFileSync(gate, "open");
      assert.equal(await exited, 0);
      assert.deepEqual(read(), EXPECTED);
    },
  );

  it("from a Python worker: the same chunks, read by Node", needsPython, async () => {
    const gate = join(dir, "gate");
    const id = await queue.enqueue({ gate });
    const py = new WorkerProcess(
      join(REPOSITORY, ".venv/bin/taskfleet"),
      [
        "worker",
        ...common("python-1"),
        "--app-dir",
        FIXTURES,
        "--handler",
        "output_handlers:two_attempts",
      ],
      cleanEnv({ PYTHONUNBUFFERED: "1" }),
    );
    started.push(py);
    assert.deepEqual(await readLive(id, gate), EXPECTED);
    await until("done", async () => (await queue.get(id))?.state === "done");
    assert.deepEqual(await readAgain(id), EXPECTED);
  });
});
