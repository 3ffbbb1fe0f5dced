// The public types: typed producers and handlers with interfaces and DTO classes. The
// declarations are checked when this file compiles (`npm test` builds it with tsc): an
// `expectTypeOf` that does not hold, or a `@ts-expect-error` line that compiles, fails the
// build. The run then sends a DTO class instance through a real Redis and worker.
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";

import { expectTypeOf } from "expect-type";

import {
  type EnqueueItem,
  type HandlerFn,
  type JsonCompatible,
  Queue,
  type Task,
  TaskContext,
  Worker,
  currentTask,
} from "../src/index.js";
import { RedisServer } from "./redis.js";

/** A payload typed by an interface: no index signature. */
interface ResizeJob {
  readonly url: string;
  readonly width: number;
  readonly tags?: readonly string[];
  readonly crop?: { readonly x: number; readonly y: number } | null;
}

interface ResizeResult {
  readonly bytes: number;
}

/** A NestJS-style DTO: fields, an optional one, a Date, a method and a private field. */
class SignupDto {
  email = "";
  plan: "free" | "pro" = "free";
  referrer?: string;
  at = new Date(0);
  #checked = true;

  constructor(fields: Partial<Pick<SignupDto, "email" | "plan" | "referrer" | "at">> = {}) {
    Object.assign(this, fields);
  }

  describe(): string {
    return `${this.email} (${this.plan}, checked: ${String(this.#checked)})`;
  }
}

interface NotJson {
  readonly url: string;
  readonly seen: Map<string, number>;
}

// Everything below this line until `describe` is checked by the compiler only.
declare const resize: ResizeJob;
declare const notJson: NotJson;

/** Compiled, never called: what a producer writes. */
export function typedProducers(): void {
  const q = new Queue<ResizeJob, ResizeResult, "resize" | "thumb">("images");
  void q.enqueue(resize);
  void q.enqueue({ url: "u", width: 1 }, { name: "thumb", priority: 5 });
  void q.enqueueMany([{ payload: resize, name: "resize" }]);
  // @ts-expect-error width must be a number
  void q.enqueue({ url: "u", width: "1" });
  // @ts-expect-error a field the interface does not have
  void q.enqueue({ url: "u", width: 1, height: 2 });
  // @ts-expect-error a task name the queue does not take
  void q.enqueue(resize, { name: "crop" });
  expectTypeOf<Awaited<ReturnType<typeof q.get>>>().toEqualTypeOf<Task<
    ResizeJob,
    ResizeResult
  > | null>();
  expectTypeOf<Task<ResizeJob, ResizeResult>["result"]>().toEqualTypeOf<ResizeResult | null>();

  const dtos = new Queue<SignupDto>("signups");
  void dtos.enqueue(new SignupDto({ email: "a@example.com" }));

  // an untyped queue takes an interface's value (Record<string, unknown> would not)
  const untyped = new Queue("images");
  void untyped.enqueue(resize);
  void untyped.enqueue(new SignupDto());

  // a field JSON can't hold is refused at compile time
  const bad = new Queue<NotJson>("bad");
  // @ts-expect-error a Map is not JSON
  void bad.enqueue(notJson);
  // @ts-expect-error a bigint is not JSON
  void new Queue<{ n: bigint }>("bad").enqueue({ n: 1n });
  // @ts-expect-error undefined has no place in a JSON array
  void new Queue<{ xs: (string | undefined)[] }>("bad").enqueue({ xs: ["a", undefined] });

  expectTypeOf<JsonCompatible<ResizeJob>>().toEqualTypeOf<{
    readonly url: string;
    readonly width: number;
    readonly tags?: readonly string[];
    readonly crop?: { readonly x: number; readonly y: number } | null;
  }>();
  expectTypeOf<JsonCompatible<NotJson>["seen"]>().toBeNever();
  expectTypeOf<EnqueueItem<ResizeJob>["payload"]>().toEqualTypeOf<JsonCompatible<ResizeJob>>();
}

/** Compiled, never called: what a worker's author writes. */
export function typedHandlers(): void {
  const worker = new Worker<ResizeJob, ResizeResult>("images", {
    handler: (payload, task) => {
      expectTypeOf(payload).toEqualTypeOf<ResizeJob>();
      expectTypeOf(task).toEqualTypeOf<TaskContext<ResizeJob, ResizeResult>>();
      expectTypeOf(task.payload).toEqualTypeOf<ResizeJob>();
      return { bytes: payload.width };
    },
  });
  expectTypeOf(worker).toEqualTypeOf<Worker<ResizeJob, ResizeResult>>();

  // a handler typed by its parameter makes the worker's types (no TS2322)
  const byParameter = new Worker("images", {
    handler: (job: ResizeJob): ResizeResult => ({ bytes: job.width }),
  });
  expectTypeOf(byParameter).toEqualTypeOf<Worker<ResizeJob, ResizeResult>>();

  new Worker<ResizeJob, ResizeResult>("images", {
    // @ts-expect-error the handler must return the Result type
    handler: (job) => ({ size: job.width }),
  });
  /* eslint-disable @typescript-eslint/no-unsafe-return -- the line is a compile error on purpose */
  new Worker<ResizeJob>("images", {
    // @ts-expect-error the payload has no field `height`
    handler: (job) => job.height,
  });
  /* eslint-enable @typescript-eslint/no-unsafe-return */

  const signup: HandlerFn<SignupDto> = (dto) => dto.email;
  new Worker("signups", { handlers: { signup } });

  // untyped, as before: a payload of unknown fields, any result
  new Worker("images", { handler: (payload) => payload.anything });
  expectTypeOf(currentTask<ResizeJob>().payload).toEqualTypeOf<ResizeJob>();
}

describe("typed queues and workers", () => {
  const server = new RedisServer();
  before(() => server.start());
  after(() => server.stop());
  beforeEach(() => server.flush());

  it("sends a DTO class instance as its plain data and hands a typed handler that data", async () => {
    const q = new Queue<SignupDto, string>("signups", { redisUrl: server.url });
    const seen: unknown[] = [];
    const worker = new Worker<Record<string, unknown>, string>("signups", {
      redisUrl: server.url,
      handler: (payload) => {
        seen.push(payload);
        return String(payload.email);
      },
      heartbeatIntervalMs: 300,
      fireSchedules: false,
    });
    const running = worker.run();
    try {
      const id = await q.enqueue(new SignupDto({ email: "a@example.com", plan: "pro" }));
      const done = await q.wait([id], { timeoutMs: 10_000 });
      const task = done[id];
      assert.ok(task !== undefined);
      assert.equal(task.state, "done");
      assert.equal(task.result, "a@example.com");
      // own enumerable fields, the Date by its toJSON, the unset optional field left out
      assert.deepEqual(seen, [
        { email: "a@example.com", plan: "pro", at: "1970-01-01T00:00:00.000Z" },
      ]);
      assert.deepEqual(task.payload, seen[0]);
    } finally {
      worker.drain();
      assert.equal(await running, 0);
      await q.close();
    }
  });
});
