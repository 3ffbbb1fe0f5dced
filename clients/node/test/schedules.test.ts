import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { parseCron } from "../src/cron.js";
import { InvalidArgument } from "../src/errors.js";
import { dueMs, firstSlot, scheduleDef } from "../src/schedules.js";
import { naiveOffsets, offsetAt, zone } from "../src/slots.js";
import { needsPython, python } from "./python.js";

const MS = (iso: string): number => Date.parse(iso);

// Crons and zones around daylight-saving changes (a gap, a fold, a 30-minute shift), leap
// days, day-or-weekday matching and macros, each from a start just before a transition.
const CASES: [string, string, number][] = [
  ["30 2 * * *", "Europe/Berlin", MS("2025-03-28T00:00:00Z")],
  ["30 2 * * *", "Europe/Berlin", MS("2025-10-24T00:00:00Z")],
  ["0 * * * *", "America/New_York", MS("2025-11-02T03:00:00Z")],
  ["*/15 * * * *", "America/New_York", MS("2025-03-09T06:20:00Z")],
  ["*/30 * * * *", "Australia/Lord_Howe", MS("2025-04-05T14:00:00Z")],
  ["0 0 29 2 *", "UTC", MS("2025-01-01T00:00:00Z")],
  ["@daily", "Asia/Kolkata", MS("2025-06-01T12:00:00Z")],
  ["0 9 * * mon-fri", "Europe/London", MS("2025-03-28T10:00:00Z")],
  ["0 0 13 * fri", "UTC", MS("2025-01-01T00:00:00Z")],
  ["*/20 * * * * *", "UTC", MS("2025-01-01T00:00:07Z")],
  ["0 0 1 jan,jul *", "Pacific/Auckland", MS("2025-01-05T00:00:00Z")],
  ["45 1 * * sun", "America/Sao_Paulo", MS("2018-10-28T00:00:00Z")],
];
const STEPS = 12;

function nodeSlots(cron: string, tz: string, start: number): (number | null)[] {
  const out: (number | null)[] = [];
  let now = start;
  for (let i = 0; i < STEPS; i++) {
    const slot = firstSlot(cron, tz, now);
    out.push(slot);
    if (slot === null) break;
    now = slot * 1000;
  }
  return out;
}

describe("schedule slots", () => {
  it(
    "are the Python client's, across DST gaps and folds, leap days and day matching",
    needsPython,
    () => {
      const theirs = python<(number | null)[][]>(
        "import json, sys\n" +
          "from taskfleet.protocol.schedules import first_slot\n" +
          "out = []\n" +
          `for cron, tz, start in json.load(sys.stdin):\n` +
          "    slots, now = [], start\n" +
          `    for _ in range(${STEPS}):\n` +
          "        slot = first_slot(cron, tz, now)\n" +
          "        slots.append(slot)\n" +
          "        if slot is None: break\n" +
          "        now = slot * 1000\n" +
          "    out.append(slots)\n" +
          "print(json.dumps(out))",
        CASES,
      );
      CASES.forEach(([cron, tz, start], i) => {
        assert.deepEqual(nodeSlots(cron, tz, start), theirs[i], `${cron} in ${tz}`);
      });
    },
  );

  it("spread by the same jitter draw as Python's (crc32 of name and slot)", needsPython, () => {
    const inputs: [string, number, number][] = [
      ["nightly", 1_750_000_000, 60_000],
      ["x", 1, 1],
      ["a:b", 2_000_000_000, 0],
    ];
    const theirs = python<number[]>(
      "import json, sys\nfrom taskfleet.protocol.schedules import due_ms\n" +
        "print(json.dumps([due_ms(*a) for a in json.load(sys.stdin)]))",
      inputs,
    );
    assert.deepEqual(
      inputs.map(([n, s, j]) => dueMs(n, s, j)),
      theirs,
    );
  });

  it("reads zone offsets as zoneinfo does: a gap's fold 0 is the earlier offset, a fold's the later", () => {
    const berlin = zone("Europe/Berlin");
    assert.equal(offsetAt(MS("2025-01-01T00:00:00Z") / 1000, berlin), 3600);
    // 2025-03-30 02:30 does not exist in Berlin; 2025-10-26 02:30 exists twice
    assert.deepEqual(naiveOffsets(MS("2025-03-30T02:30:00Z") / 1000, berlin), [3600, 7200]);
    assert.deepEqual(naiveOffsets(MS("2025-10-26T02:30:00Z") / 1000, berlin), [7200, 3600]);
    assert.deepEqual(naiveOffsets(MS("2025-07-01T12:00:00Z") / 1000, berlin), [7200, 7200]);
  });

  it("refuses a bad cron, zone or option with what to fix", () => {
    const bad: [() => unknown, RegExp][] = [
      [() => parseCron(""), /cron expression is empty/],
      [() => parseCron("* * *"), /has 3 fields; expected 5/],
      [() => parseCron("61 * * * *"), /minute field: '61' is outside 0-59/],
      [() => parseCron("0 0 30 2 *"), /never matches a date/],
      [() => parseCron("*/0 * * * *"), /step '0' must be a positive number/],
      [() => zone("Mars/Olympus"), /unknown time zone 'Mars\/Olympus'/],
      [() => scheduleDef("bad name", "* * * * *", {}), /invalid schedule name/],
      [
        () => scheduleDef("ok", "* * * * *", {}, { jitterMs: 90_000_000 }),
        /jitterMs must be at most 86400000 ms/,
      ],
      [
        () => scheduleDef("ok", "* * * * *", {}, { catchup: "some" as "all" }),
        /catchup must be one of latest, all/,
      ],
      [() => scheduleDef("ok", "* * * * *", {}, { timeoutMs: 0 }), /timeoutMs must be positive/],
      [
        () => scheduleDef("ok", "* * * * *", {}, { jitter: 30 } as never),
        /no option 'jitter' \(durations are milliseconds, in options named \.\.\.Ms: 'jitterMs'\)/,
      ],
      [
        () => scheduleDef("ok", "* * * * *", {}, { group: "a b" }),
        /group must be 1-100 characters/,
      ],
    ];
    for (const [call, message] of bad) {
      assert.throws(
        call,
        (e: unknown) => e instanceof InvalidArgument && message.test(e.message),
        message.source,
      );
    }
  });

  it("stores a definition's fields as the Python client does", needsPython, () => {
    const def = scheduleDef(
      "nightly",
      "0 3 * * *",
      { b: 1, a: 2 },
      {
        tz: "Europe/Paris",
        timeoutMs: 30_000,
        deadlineMs: 1500,
        jitterMs: 2500,
        maxAttempts: 4,
        catchup: "all",
        catchupLimit: 5,
        group: "t1",
      },
    );
    const theirs = python<[string, string][]>(
      "import json\nfrom taskfleet.producer.scheduling import schedule_def\n" +
        "d = schedule_def('nightly', '0 3 * * *', {'b': 1, 'a': 2}, tz='Europe/Paris', timeout=30, deadline=1.5, jitter=2.5, max_attempts=4, catchup='all', catchup_limit=5, group='t1')\n" +
        "print(json.dumps(d.definition.fields()))",
    );
    assert.deepEqual(
      def.fields.map(([k, v]) => [k, v]),
      theirs,
    );
  });
});
