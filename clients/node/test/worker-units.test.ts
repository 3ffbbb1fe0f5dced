// The worker's pure parts: claim records read as the Python worker reads them, progress
// and errors as it stores them, schedule plans, the command line and its variables.
import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { BadInput, parseArgs } from "../src/cli.js";
import { Served, parseClaimRecords } from "../src/worker/claimed.js";
import { progressJson, quotaPauseMs } from "../src/worker/context.js";
import {
  PermanentFailure,
  RateLimited,
  RetryAfter,
  encodeResult,
  failureOf,
  formatError,
} from "../src/worker/failures.js";
import { plan } from "../src/worker/loops.js";
import { checkSettings } from "../src/worker/settings.js";

const record = (...fields: string[]): string => fields.join("\0");

describe("claim records", () => {
  it("reads ten fields, nine (a producer's hand-off), names, and refuses what can't run", () => {
    const served = new Served(new Set(["shout"]), true);
    const [tasks, bad] = parseClaimRecords(
      [
        record("a", "t:1", "1", "3", "", "0", "5", "1", "12", '{"x":1}'),
        record("b", "p.0:1", "2", "3", "2.5", "1", "0", "4", "\x01shout\x01{}"),
        record("c", "t:2", "x", "3", "", "0", "0", "1", "", "{}"),
        record("d", "t:3", "1", "3", "", "0", "0", "1", "", "[1]"),
        record("e", "t:4", "1", "3", "", "0", "0", "1", "", "\x01other\x01{}"),
        record("f", "t:5", "1", "3", "", "0", "0", "1", "", "{nope"),
        "names no task",
      ],
      served,
    );
    assert.deepEqual(
      tasks.map((t) => [
        t.id,
        t.token,
        t.attempts,
        t.timeout,
        t.lost,
        t.priority,
        t.cost,
        t.waited,
        t.name,
        t.payload,
      ]),
      [
        ["a", "t:1", 1, null, 0, 5, 1, 0.012, null, { x: 1 }],
        ["b", "p.0:1", 2, 2.5, 1, 0, 4, null, "shout", {}],
      ],
    );
    assert.deepEqual(
      bad.map(([id, , error, reason]) => [id, reason, error]),
      [
        ["c", "bad task", "task unreadable: attempts 'x' is not an integer"],
        ["d", "bad payload", "payload is not a JSON object"],
        [
          "e",
          "unknown task",
          "no handler for task name 'other'; this worker serves 'shout' and tasks without a name",
        ],
        ["f", "bad payload", bad[3]?.[2] ?? ""],
      ],
    );
    assert.match(bad[3]?.[2] ?? "", /^payload is not valid JSON: /);
  });
});

const tagged = (pairs: [string, string][], payload = "{}"): string =>
  ["\x013", ...pairs.flat(), "", payload].join("\0");
const required: [string, string][] = [
  ["id", "t1"],
  ["token", "tok"],
  ["attempts", "1"],
  ["max_attempts", "3"],
  ["lost", "0"],
  ["priority", "0"],
  ["cost", "1"],
];

describe("tagged claim records", () => {
  it("carry everything a run reads: group, trace, deadline and the dependency handle", () => {
    const raw = tagged(
      [
        ["id", "job-7"],
        ["token", "abc"],
        ["attempts", "2"],
        ["max_attempts", "5"],
        ["lost", "1"],
        ["priority", "-3"],
        ["cost", "4"],
        ["timeout", "1.5"],
        ["waited_ms", "250"],
        ["deadline", "1700000000000"],
        ["group", "tenant-a"],
        ["trace", '{"traceparent":"00-ab-cd-01"}'],
        ["after", '["a","b"]'],
      ],
      '\x01resize\x01{"n":[1,2]}',
    );
    const [[task], bad] = parseClaimRecords([raw], null);
    assert.deepEqual(bad, []);
    assert.deepEqual(task, {
      id: "job-7",
      token: "abc",
      payload: { n: [1, 2] },
      name: "resize",
      trace: '{"traceparent":"00-ab-cd-01"}',
      group: "tenant-a",
      after: '["a","b"]',
      checkpoint: null,
      quotas: null,
      deadlineMs: 1700000000000,
      attempts: 2,
      maxAttempts: 5,
      timeout: 1.5,
      lost: 1,
      priority: -3,
      cost: 4,
      waited: 0.25,
    });
  });

  it("read in any order, ignore unknown names, and say what a task without the optional fields has", () => {
    const [[task], bad] = parseClaimRecords(
      [tagged([["colour", "blue"], ...[...required].reverse(), ["x-later", "1"]])],
      null,
    );
    assert.deepEqual(bad, []);
    assert.deepEqual(
      [
        task?.id,
        task?.token,
        task?.attempts,
        task?.timeout,
        task?.waited,
        task?.group,
        task?.trace,
        task?.deadlineMs,
        task?.after,
      ],
      ["t1", "tok", 1, null, null, null, null, null, ""],
    );
  });

  it("keep the whole rest as the payload, refuse a field that can't be read, drop a record without an id", () => {
    const withCost = required.map(([k, v]): [string, string] => (k === "cost" ? [k, "x"] : [k, v]));
    const [tasks, bad] = parseClaimRecords(
      [tagged(required, '{"a":"x\0\0y"}'), tagged(withCost), tagged(required.slice(1))],
      null,
    );
    assert.deepEqual(tasks, []);
    assert.deepEqual(
      bad.map(([id, , error, reason]) => [id, reason, error.slice(0, 27)]),
      [
        ["t1", "bad payload", "payload is not valid JSON: "],
        ["t1", "bad task", "task unreadable: cost 'x' i"],
      ],
    );
  });

  it("and positional ones carry no group, trace or handle: not known", () => {
    const [[task]] = parseClaimRecords(
      [record("a", "p.0:1", "1", "3", "", "0", "0", "1", "{}")],
      null,
    );
    assert.deepEqual([task?.group, task?.trace, task?.after], [null, null, null]);
  });
});

describe("what a run stores", () => {
  it("writes progress as the Python worker does, and refuses what is not progress", () => {
    assert.equal(
      progressJson({ done: 3, total: 4, message: "m" }),
      '{"done":3,"total":4,"fraction":0.75,"message":"m"}',
    );
    assert.equal(progressJson({ fraction: 1 / 3 }), '{"fraction":0.333333}');
    assert.throws(() => progressJson({ fraction: 2 }), /within \[0, 1\]/);
    assert.throws(() => progressJson({}), /needs a fraction/);
  });

  it("stores an error as one line, and reads what PermanentFailure and RetryAfter ask for", () => {
    assert.equal(formatError(new TypeError("a\nb")), "TypeError: a b");
    assert.equal(formatError("plain"), "Error: plain");
    assert.equal(formatError(new RangeError()), "RangeError");
    assert.equal(
      formatError({ code: 42, message: "boom" }),
      'Error: object thrown: {"code":42,"message":"boom"}',
    );
    const cyclic: Record<string, unknown> = { message: "loop" };
    cyclic.self = cyclic;
    assert.equal(formatError(cyclic), "Error: object thrown: loop");
    class Odd {
      readonly self = this;
    }
    assert.equal(
      formatError(new Odd()),
      "Error: object thrown: <ref *1> Odd { self: [Circular *1] }",
    );
    assert.equal(formatError(42), "Error: number thrown: 42");
    assert.equal(formatError(undefined), "Error: undefined thrown");
    assert.equal(formatError(null), "Error: null thrown");
    assert.deepEqual(failureOf(new PermanentFailure("no")), [
      "PermanentFailure: no",
      { permanent: true, retryAfterMs: null },
    ]);
    assert.deepEqual(failureOf(new RetryAfter(1500)), [
      "RetryAfter",
      { permanent: false, retryAfterMs: 1500 },
    ]);
    const foreign = new Error("from another copy of the package");
    foreign.name = "PermanentFailure";
    assert.deepEqual(failureOf(foreign)[1], { permanent: true, retryAfterMs: null });
    assert.throws(() => new RetryAfter(-1), RangeError);
    // a copy of the package from before milliseconds, in a handler's tree: its delay in seconds
    const older = Object.assign(new Error("older copy"), { name: "RetryAfter", delay: 2 });
    assert.deepEqual(failureOf(older)[1], { permanent: false, retryAfterMs: 2000 });
    assert.deepEqual(failureOf(new RateLimited(2000))[1], {
      permanent: false,
      retryAfterMs: 2000,
      throttle: true,
    });
    assert.deepEqual(failureOf(new RateLimited())[1], {
      permanent: false,
      retryAfterMs: null,
      throttle: true,
    });
    assert.throws(() => new RateLimited(-1), RangeError);
    assert.equal(new RateLimited(1).scope, "queue");
    assert.deepEqual(failureOf(new RateLimited(1000, "", { scope: "group" }))[1], {
      permanent: false,
      retryAfterMs: 1000,
      throttle: true,
      groupScope: true,
    });
    assert.throws(() => new RateLimited(1, "", { scope: "tenant" as "group" }), RangeError);
    assert.equal(quotaPauseMs(2000, undefined, 0), 2000);
    assert.equal(quotaPauseMs(undefined, new Date(100_000), 10), 90_000);
    assert.equal(quotaPauseMs(undefined, undefined, 0), null);
    assert.throws(() => quotaPauseMs(1000, new Date(2000), 0), RangeError);
    assert.throws(
      () => quotaPauseMs(undefined, 100 as never, 0),
      /resetAt must be a Date \(for epoch seconds: new Date\(s \* 1000\)\)/,
    );
    assert.throws(() => quotaPauseMs(-1, undefined, 0), RangeError);
    assert.equal(encodeResult(undefined), "null");
    assert.equal(encodeResult({ a: [1, "é"] }), '{"a":[1,"é"]}');
    assert.throws(() => encodeResult({ n: NaN }), /result\.n: NaN is not a finite number/);
    assert.throws(() => encodeResult(10n), /not JSON-serialisable/);
  });
});

describe("schedule plans", () => {
  const due = {
    name: "s",
    rev: "1",
    cron: "* * * * *",
    tz: "UTC",
    catchup: "latest",
    catchupLimit: 1,
    jitterMs: 0,
  };

  it("fires the due slot on time, the latest one after downtime, and each up to the limit with catchup all", () => {
    assert.deepEqual(plan({ ...due, nextSlot: 600 }, 630_000), {
      name: "s",
      rev: "1",
      expected: 600,
      slots: [600],
      skipped: 0,
      nextSlot: 660,
      nextDueMs: 660_000,
    });
    const late = plan({ ...due, nextSlot: 600 }, 900_000);
    assert.deepEqual([late.slots, late.skipped, late.nextSlot], [[900], 5, 960]);
    const all = plan({ ...due, nextSlot: 600, catchup: "all", catchupLimit: 10 }, 900_000);
    assert.deepEqual([all.slots, all.skipped], [[600, 660, 720, 780, 840, 900], 0]);
    const bad = plan({ ...due, nextSlot: 600, cron: "nonsense" }, 900_000);
    assert.deepEqual([bad.slots, bad.nextSlot], [[], null]);
  });
});

describe("the command line", () => {
  const opts = [
    { name: "queue", kind: "string", env: "TASKFLEET_QUEUE", help: "" },
    { name: "handler", kind: "multi", env: "TASKFLEET_HANDLER", help: "" },
    { name: "concurrency", kind: "int", env: "TASKFLEET_CONCURRENCY", help: "" },
    { name: "fire-schedules", kind: "bool", env: "TASKFLEET_FIRE_SCHEDULES", help: "" },
  ] as const;

  it("takes flags first, then TASKFLEET_* variables (handlers separated by spaces)", () => {
    const env = {
      TASKFLEET_QUEUE: "from-env",
      TASKFLEET_HANDLER: "./a.js:f  b=./b.js:g",
      TASKFLEET_CONCURRENCY: "3",
      TASKFLEET_FIRE_SCHEDULES: "false",
    };
    assert.deepEqual(parseArgs(["--queue=q"], opts, env), {
      queue: "q",
      handler: ["./a.js:f", "b=./b.js:g"],
      concurrency: 3,
      "fire-schedules": false,
    });
    assert.deepEqual(
      parseArgs(["--no-fire-schedules", "--handler", "x:y", "--handler", "z:w"], opts, {}),
      { "fire-schedules": false, handler: ["x:y", "z:w"] },
    );
    assert.throws(
      () => parseArgs([], opts, { TASKFLEET_CONCURRENCY: "2x" }),
      (e: unknown) => e instanceof BadInput && /TASKFLEET_CONCURRENCY/.test(e.message),
    );
    assert.throws(() => parseArgs(["--queue"], opts, {}), /requires an argument/);
  });
});

describe("the deprecated leaseTtl option", () => {
  it("never refuses a start, below one second too: it is ignored with a warning at start", () => {
    assert.equal(checkSettings("jobs", { leaseTtlMs: 500 }, "p", "i").leaseTtl, 0.5);
  });
});
