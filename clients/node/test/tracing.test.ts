// OpenTelemetry spans of the Node producer and worker, against a real redis-server, read
// from the SDK's in-memory exporter: a `send <queue>` span per enqueue call whose context
// is stored with the task, a `process <queue>` span per run that continues it, with the
// Python package's names, kinds and attributes (protocol/tracing.py). Without a provider,
// nothing is traced and nothing is stored.
import assert from "node:assert/strict";
import { after, before, beforeEach, describe, it } from "node:test";

import { SpanKind, SpanStatusCode, context, trace } from "@opentelemetry/api";
import {
  InMemorySpanExporter,
  NodeTracerProvider,
  type ReadableSpan,
  SimpleSpanProcessor,
} from "@opentelemetry/sdk-trace-node";

import { PermanentFailure, Queue, Worker } from "../src/index.js";
import { RedisServer } from "./redis.js";

interface Job {
  readonly n: number;
}

describe("OpenTelemetry spans", () => {
  const server = new RedisServer();
  const exporter = new InMemorySpanExporter();
  const traces = new Map<number, string | null>();

  const startWorker = (): { worker: Worker<Job>; running: Promise<number> } => {
    const worker = new Worker<Job>("traced", {
      redisUrl: server.url,
      heartbeatIntervalMs: 300,
      fireSchedules: false,
      handler: (job, task) => {
        traces.set(job.n, task.trace);
        trace.getTracer("app").startSpan("inner").end(); // a handler's own span: the run's child
        if (job.n === 13) throw new PermanentFailure("unlucky");
        return job.n;
      },
    });
    return { worker, running: worker.run() };
  };

  before(() => server.start());
  after(() => server.stop());
  beforeEach(async () => {
    await server.flush();
    traces.clear();
  });

  it("stores no trace context and makes no span without a tracer provider", async () => {
    const q = new Queue<Job>("traced", { redisUrl: server.url });
    const { worker, running } = startWorker();
    try {
      const id = await q.enqueue({ n: 1 });
      await q.wait([id], { timeoutMs: 10_000 });
      assert.equal(traces.get(1), null);
    } finally {
      worker.drain();
      assert.equal(await running, 0);
      await q.close();
    }
  });

  it("continues the producer's trace in the worker, with Python's span names and attributes", async () => {
    const provider = new NodeTracerProvider({
      spanProcessors: [new SimpleSpanProcessor(exporter)],
    });
    provider.register(); // the global provider, an AsyncLocalStorage context manager, W3C propagation
    const q = new Queue<Job>("traced", { redisUrl: server.url });
    const { worker, running } = startWorker();
    let request: ReturnType<ReadableSpan["spanContext"]>;
    let ids: string[] = [];
    try {
      const app = trace.getTracer("app");
      const parent = app.startSpan("request");
      request = parent.spanContext();
      ids = await context.with(trace.setSpan(context.active(), parent), async () => [
        await q.enqueue({ n: 1 }),
        ...(await q.enqueueMany([{ payload: { n: 2 } }, { payload: { n: 13 } }])),
      ]);
      parent.end();
      await q.wait(ids, { timeoutMs: 10_000 });
      await until(() => exporter.getFinishedSpans().filter((s) => s.name === "inner").length === 3);
    } finally {
      worker.drain();
      assert.equal(await running, 0);
      await q.close();
    }

    const spans = exporter.getFinishedSpans();
    const named = (name: string): ReadableSpan[] => spans.filter((s) => s.name === name);
    const sends = named("send traced");
    assert.equal(sends.length, 2, "one send span per enqueue call");
    for (const send of sends) {
      assert.equal(send.kind, SpanKind.PRODUCER);
      assert.equal(send.parentSpanContext?.spanId, request.spanId);
      assert.equal(send.spanContext().traceId, request.traceId);
    }
    const byCount = (count: number): ReadableSpan | undefined =>
      sends.find((s) => s.attributes["messaging.batch.message_count"] === count);
    const common = {
      "messaging.system": "taskfleet",
      "messaging.operation.type": "send",
      "messaging.destination.name": "traced",
    };
    // one task's span names it; a batch's does not
    assert.deepEqual(byCount(1)?.attributes, {
      ...common,
      "messaging.batch.message_count": 1,
      "messaging.message.id": ids[0],
    });
    assert.deepEqual(byCount(2)?.attributes, { ...common, "messaging.batch.message_count": 2 });

    const processes = named("process traced");
    assert.equal(processes.length, 3, "one process span per run");
    for (const [i, n] of [1, 2, 13].entries()) {
      // the stored carrier is the send span's context, as compact JSON
      const stored = JSON.parse(traces.get(n) ?? "{}") as Record<string, string>;
      const send = sends.find((s) => stored.traceparent?.includes(s.spanContext().spanId));
      assert.ok(send !== undefined, `task ${n} carries its send span's context`);
      const run = processes.find((s) => s.attributes["messaging.message.id"] === ids[i]);
      assert.ok(run !== undefined, `task ${n} has a process span`);
      assert.equal(run.parentSpanContext?.spanId, send.spanContext().spanId);
      assert.equal(run.kind, SpanKind.CONSUMER);
      assert.equal(run.spanContext().traceId, request.traceId);
      assert.equal(run.attributes["messaging.system"], "taskfleet");
      assert.equal(run.attributes["messaging.operation.type"], "process");
      assert.equal(run.attributes["messaging.destination.name"], "traced");
      assert.equal(run.attributes["taskfleet.task.attempt"], 1);
    }
    for (const inner of named("inner")) {
      assert.ok(
        processes.some((p) => p.spanContext().spanId === inner.parentSpanContext?.spanId),
        "a handler's span is a child of its run's",
      );
    }
    const failed = processes.filter((s) => s.status.code === SpanStatusCode.ERROR);
    assert.equal(failed.length, 1, "the failed run's span is an error");
    const [error] = failed;
    assert.ok(error !== undefined);
    assert.equal(error.events[0]?.name, "exception");
    assert.match(String(error.status.message), /PermanentFailure: unlucky/);
    await provider.shutdown();
  });
});

async function until(check: () => boolean, deadlineMs = 10_000): Promise<void> {
  const end = Date.now() + deadlineMs;
  while (!check()) {
    if (Date.now() > end) throw new Error(`not within ${deadlineMs} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}
