// The worker-behaviour scenarios (conformance/scenarios/) with the Node worker: one test per
// file, each file run unchanged (tests/worker/test_worker_scenarios.py runs the same files with the
// Python worker). An altered scenario must fail, or the runner checks nothing.
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, afterEach, before, beforeEach, describe, it } from "node:test";

import { RedisServer } from "./redis.js";
import {
  SCENARIOS,
  ScenarioFormatError,
  StepFailedError,
  check,
  runScenario,
} from "./scenarios.js";

const FILES = readdirSync(SCENARIOS)
  .filter((f) => f.endsWith(".json"))
  .sort();

describe("the worker-behaviour scenarios", () => {
  const server = new RedisServer();
  let dir: string;

  before(() => server.start());
  after(() => server.stop());
  beforeEach(async () => {
    await server.flush();
    dir = mkdtempSync(join(tmpdir(), "taskfleet-node-scenario-"));
  });
  afterEach(() => {
    rmSync(dir, { recursive: true, force: true });
  });

  it("finds the scenario files", () => {
    assert.ok(FILES.length >= 6, FILES.join());
  });

  for (const file of FILES) {
    it(`the Node worker behaves as ${file} says`, async () => {
      await runScenario(join(SCENARIOS, file), server.url, dir);
    });
  }

  it("fails a scenario whose expected state was altered, naming the step", async () => {
    const scenario = JSON.parse(readFileSync(join(SCENARIOS, "drain.json"), "utf8")) as {
      steps: Record<string, unknown>[];
    };
    const last = scenario.steps.at(-1);
    const held = (last?.expect as Record<string, unknown>[] | undefined)?.find(
      (c) => c.task === "held",
    );
    assert.equal(held?.state, "pending");
    held.state = "done";
    const altered = join(dir, "drain.json");
    writeFileSync(altered, JSON.stringify(scenario));
    await assert.rejects(runScenario(altered, server.url, dir), (e: unknown) => {
      assert.ok(e instanceof StepFailedError);
      assert.match(
        e.message,
        /^drain step \d+ \(expect\): \{"task":"held","state":"done".*state is "pending"/,
      );
      return true;
    });
  });

  it("refuses a file that strays from the format before anything runs", () => {
    const bad = { format: 1, doc: "", queue: "q", steps: [{ start: "a", colour: "blue" }] };
    assert.throws(
      () => {
        check(bad, "bad");
      },
      (e: unknown) =>
        e instanceof ScenarioFormatError &&
        /bad step 0 \(start\): unknown keys colour/.test(e.message),
    );
    const behaviour = {
      format: 1,
      doc: "",
      queue: "q",
      steps: [{ enqueue: "t", payload: { do: "dance" } }],
    };
    assert.throws(() => {
      check(behaviour, "bad");
    }, /a payload of the handler vocabulary expected/);
    const lone = { format: 1, doc: "", queue: "q", steps: [{ expect: [{ any: [] }] }] };
    assert.throws(() => {
      check(lone, "bad");
    }, /2 or more conditions expected/);
    const nested = { any: [{ stats: { pending: 1 } }, { colour: 1 }] };
    const inner = { format: 1, doc: "", queue: "q", steps: [{ expect: [nested] }] };
    assert.throws(() => {
      check(inner, "bad");
    }, /condition 0 any condition 1: exactly one of/);
  });
});
