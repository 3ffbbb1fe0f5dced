import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { batchRecords, encodePayload, encodeTask, itemRecord, traceText } from "../src/encoding.js";
import { InvalidArgument, InvalidPayload } from "../src/errors.js";
import { floatRepr, formatG } from "../src/pyformat.js";
import { needsPython, python } from "./python.js";

const PAYLOADS: Record<string, unknown>[] = [
  {},
  { b: 1, a: [1, 2.5, "é"], ü: null, z: { y: true, x: false } },
  { "\u{1F600}": 1, "\uE000": 2, "\u00e9": 3, A: 4 },
  { text: 'quote " backslash \\ newline \n tab \t nul \u0000 del \u007f line-sep \u2028' },
  {
    numbers: [
      0,
      -0,
      1e-7,
      0.1,
      1 / 3,
      123456789.125,
      2 ** 53 - 1,
      -(2 ** 53 - 1),
      1e21,
      1.5e300,
      -2.5e-300,
    ],
  },
  { deep: [[[[{ a: [[]] }]]]] },
];

describe("payload encoding", () => {
  it("writes the same JSON text as the Python client for the same object", needsPython, () => {
    const ours = PAYLOADS.map(encodePayload);
    const theirs = python<string[]>(
      "import json, sys\n" +
        "from taskfleet.producer.encoding import encode_payload\n" +
        "print(json.dumps([encode_payload(json.loads(t)) for t in json.load(sys.stdin)]))",
      PAYLOADS.map((p) => JSON.stringify(p)),
    );
    assert.deepEqual(ours, theirs);
  });

  it("refuses what is not a JSON object, with one line naming the path of what is not JSON", () => {
    for (const bad of [null, [], "x", 1, new Map(), new Date()])
      assert.throws(() => encodePayload(bad), InvalidPayload);
    assert.throws(
      () => encodePayload(new Set()),
      /^InvalidPayload: payload must be a JSON object.*not Set$/,
    );
    const refused: [unknown, RegExp][] = [
      [{ a: [1, undefined] }, /payload\.a\[1\] is undefined \(in an array\)$/],
      [{ a: { b: 1n } }, /payload\.a\.b is a bigint$/],
      [{ a: [{ f: () => 1 }] }, /payload\.a\[0\]\.f is a function$/],
      [{ "odd key": Symbol("s") }, /payload\["odd key"\] is a symbol$/],
      [{ m: new Map([["k", 1]]) }, /payload\.m is a Map$/],
      [{ s: new Set([1]) }, /payload\.s is a Set$/],
      [{ a: "\ud800" }, /payload\.a is a string holding a lone surrogate/],
    ];
    for (const [bad, line] of refused) {
      assert.throws(
        () => encodePayload(bad),
        (error: unknown) =>
          error instanceof InvalidPayload &&
          !error.message.includes("\n") &&
          /not JSON-serialisable/.test(error.message) &&
          line.test(error.message),
        String(line),
      );
    }
    assert.throws(
      () => encodePayload({ a: [NaN] }),
      /^InvalidPayload: payload\.a\[0\]: NaN is not a finite number/,
    );
    const cyclic: Record<string, unknown> = { list: [] };
    (cyclic.list as unknown[]).push({ back: cyclic });
    assert.throws(() => encodePayload(cyclic), /payload\.list\[0\]\.back is a cycle/);
    let deep: unknown = 1;
    for (let i = 0; i < 200; i++) deep = [deep];
    assert.throws(() => encodePayload({ deep }), /nested more than 200 levels/);
    assert.doesNotThrow(() => encodePayload({ deep: (deep as unknown[])[0] }));
  });

  it("writes a class instance as its own enumerable fields, honouring toJSON, as JSON.stringify does", () => {
    class Address {
      street = "Main St";
      number = 5;
      note?: string = undefined;
      private readonly hidden = "kept"; // a private TypeScript field is still an own field
      label(): string {
        return `${this.number} ${this.street} ${this.hidden}`;
      }
    }
    class Money {
      constructor(readonly cents: number) {}
      toJSON(): string {
        return (this.cents / 100).toFixed(2);
      }
    }
    class Order {
      id = "o1";
      to = new Address();
      total = new Money(1050);
      at = new Date(Date.UTC(2026, 0, 2));
      items = [new Address()];
      #secret = "not an own enumerable field";
      get secret(): string {
        return this.#secret;
      }
    }
    const text = encodePayload(new Order());
    assert.deepEqual(JSON.parse(text), JSON.parse(JSON.stringify(new Order())));
    assert.equal(
      text,
      '{"at":"2026-01-02T00:00:00.000Z","id":"o1","items":[{"hidden":"kept","number":5,"street":"Main St"}],' +
        '"to":{"hidden":"kept","number":5,"street":"Main St"},"total":"10.50"}',
    );
    // a DTO whose toJSON gives a plain object is that object
    class Wrapped {
      toJSON(): unknown {
        return { b: 2, a: 1 };
      }
    }
    assert.equal(encodePayload(new Wrapped()), '{"a":1,"b":2}');
    assert.equal(encodePayload({ a: undefined, b: 1 }), '{"b":1}');
    class SelfHolder {
      me: unknown = this;
    }
    assert.throws(() => encodePayload(new SelfHolder()), /payload\.me is a cycle/);
    class Bad {
      toJSON(): unknown {
        return () => 1;
      }
    }
    assert.throws(
      () => encodePayload({ x: new Bad() }),
      /payload\.x is a function from its toJSON\(\)$/,
    );
  });

  it("formats numbers as Python's repr and %g do", () => {
    assert.equal(floatRepr(30), "30.0");
    assert.equal(floatRepr(0.5), "0.5");
    assert.equal(floatRepr(1e-5), "1e-05");
    assert.equal(floatRepr(0.0001), "0.0001");
    assert.equal(floatRepr(1e16), "1e+16");
    assert.equal(floatRepr(123456789012345.6), "123456789012345.6");
    assert.equal(formatG(3153600000), "3.1536e+09");
    assert.equal(formatG(1.5), "1.5");
    assert.equal(formatG(100), "100");
  });
});

describe("enqueue options", () => {
  const CASES: [Record<string, unknown>, Record<string, unknown>][] = [
    [{}, {}],
    [
      { priority: 5, cost: 0, maxAttempts: 3 },
      { priority: 5, cost: 0, max_attempts: 3 },
    ],
    [
      { delayMs: 1500, timeoutMs: 30_000, deadlineMs: 2000.1 },
      { delay: 1.5, timeout: 30, deadline: 2.0001 },
    ],
    [
      { timeoutMs: 250, delayMs: 0 },
      { timeout: 0.25, delay: 0 },
    ],
    [
      { name: "resize/v2", taskId: "id-1" },
      { task: "resize/v2", task_id: "id-1" },
    ],
    [{ after: ["a", "b é"] }, { after: ["a", "b é"] }],
    [
      { after: ["a"], onDepFail: "cancel" },
      { after: ["a"], on_dep_fail: "cancel" },
    ],
    [{ group: "tenant-42" }, { group: "tenant-42" }],
    [
      { quotas: { openai: { requests: 1, input_tokens: 3000 } } },
      { quotas: { openai: { requests: 1, input_tokens: 3000 } } },
    ],
  ];

  it("encodes each option as the Python client does", needsPython, () => {
    const payload = { n: 1 };
    const ours = CASES.map(([options]) => {
      const record = encodeTask(payload, options);
      // as sent: numbers as decimal text
      return Object.fromEntries(
        Object.entries(record)
          .filter(([k]) => k !== "task_id")
          .map(([k, v]) => [k, String(v)]),
      );
    });
    const theirs = python<Record<string, unknown>[]>(
      "import json, sys\n" +
        "from taskfleet.producer.encoding import encode_task\n" +
        "out = []\n" +
        "for kw in json.load(sys.stdin):\n" +
        "    a = encode_task({'n': 1}, **kw)\n" +
        "    wire = lambda v: repr(v) if isinstance(v, float) else str(v)\n" +
        "    out.append({k: wire(getattr(a, k)) for k in ('payload', 'priority', 'delay_ms', 'deadline', 'max_attempts', 'cost', 'timeout_s', 'after', 'on_dep_fail', 'group', 'quotas')})\n" +
        "print(json.dumps(out))",
      CASES.map(([, kw]) => kw),
    );
    assert.deepEqual(ours, theirs);
  });

  it("refuses out-of-range and ill-typed options before anything is sent", () => {
    const bad: [Record<string, unknown>, RegExp][] = [
      [{ priority: 1001 }, /priority must be between -1000 and 1000, not 1001/],
      [{ priority: 1.5 }, /priority must be an integer, not 1.5/],
      [{ cost: -1 }, /cost must be between 0 and 1000000000/],
      [{ maxAttempts: 0 }, /max_attempts must be between 1 and 10000/],
      [{ delayMs: -1 }, /delayMs must be >= 0/],
      [{ delayMs: Infinity }, /delayMs must be milliseconds/],
      [{ delayMs: 4e12 }, /delayMs must be at most 3153600000000 ms \(100 years\)/],
      [{ timeoutMs: 0 }, /timeoutMs must be > 0/],
      [{ timeoutMs: 3.2e10 }, /timeoutMs must be at most 31536000000 ms \(1 years\)/],
      [{ deadlineMs: 0 }, /deadlineMs must be > 0 ms from now/],
      [{ deadline: new Date(-1) }, /deadline must be after 1970-01-01/],
      [{ name: "-x" }, /task name '-x' must be 1-100 letters/],
      [{ taskId: "" }, /task_id must be a non-empty printable string/],
      [{ taskId: "a\nb" }, /task_id must be a non-empty printable string/],
      [{ taskId: "x".repeat(201) }, /task_id must be a non-empty printable string of <= 200 chars/],
    ];
    for (const [options, message] of bad) {
      assert.throws(
        () => encodeTask({}, options),
        (e: unknown) => e instanceof InvalidArgument && message.test(e.message),
        JSON.stringify(options),
      );
    }
    assert.doesNotThrow(() => encodeTask({}, { taskId: "with space é 😀" }));
  });

  it("stores a deadline Date as absolute epoch ms and a named task behind its name", () => {
    const at = new Date(Date.now() + 60_000);
    assert.equal(encodeTask({}, { deadline: at }).deadline, `@${at.getTime()}`);
    assert.equal(encodeTask({ a: 1 }, { name: "resize" }).payload, '\x01resize\x01{"a":1}');
  });

  it("checks a batch: known fields only, a payload each, no id twice", () => {
    assert.throws(
      () => itemRecord({ payload: {}, priorty: 1 }),
      /unknown enqueue field\(s\): priorty/,
    );
    assert.throws(() => itemRecord({ priority: 1 }), /needs a 'payload'/);
    assert.throws(
      () =>
        batchRecords([
          { payload: {}, taskId: "a" },
          { payload: {}, taskId: "a" },
        ]),
      /appears twice/,
    );
    assert.equal(batchRecords([{ payload: {} }, { payload: {} }]).length, 2);
  });

  it("keeps a trace context as compact sorted JSON, and refuses what is not one", () => {
    assert.equal(
      traceText({ traceparent: "00-a-b-01", a: "x" }),
      '{"a":"x","traceparent":"00-a-b-01"}',
    );
    assert.equal(traceText(undefined), "");
    assert.throws(
      () => traceText({ traceparent: 1 } as unknown as Record<string, string>),
      /traceContext must be an object of strings/,
    );
  });
});
