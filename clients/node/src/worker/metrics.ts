/**
 * The worker's Prometheus metrics with prom-client: the Python worker's names, labels
 * and buckets (`worker/metrics.py`), so one dashboard and one set of alerts serve a
 * fleet of either language. Counts are read from the worker when scraped; run, wait and
 * claim times are observed as they happen. Process metrics are prom-client's defaults
 * (`process_*`, and `nodejs_*` for the event loop and heap).
 *
 * prom-client loads only when a metrics port is asked for.
 *
 * @module
 */

import { type Server, createServer } from "node:http";

import { SAFE_EVICTION_POLICY } from "./faults.js";
import type { Worker } from "./worker.js";

/** Run and wait times, seconds. */
export const TIME_BUCKETS = [
  0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600,
];
/** Claim round trips, seconds. */
export const CLAIM_BUCKETS = [
  0.0002, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
];
/** The outcomes of `taskfleet_worker_tasks_total`. */
export const OUTCOMES = ["done", "retried", "dead", "released", "stale", "lost"] as const;

/** A metrics port was asked for but cannot be served. */
export class MetricsUnavailable extends Error {}

/** Register the worker's metrics on a fresh registry; returns it. */
export async function registry(
  worker: Worker,
  version: string,
): Promise<import("prom-client").Registry> {
  const prom = await import("prom-client");
  const registers = [new prom.Registry()];
  const reg = registers[0] as import("prom-client").Registry;
  const queue = worker.settings.queue;
  const labels = { queue };
  new prom.Gauge({
    name: "taskfleet_worker_info",
    help: "The worker's queue, handler and version (always 1).",
    labelNames: ["queue", "handler", "version"],
    registers,
    collect() {
      this.set({ queue, handler: worker.handlers.ref, version }, 1);
    },
  });
  new prom.Counter({
    name: "taskfleet_worker_tasks_total",
    help: "Tasks this worker finished with each outcome (failed = retried + dead).",
    labelNames: ["queue", "outcome"],
    registers,
    collect() {
      this.reset();
      for (const outcome of OUTCOMES) this.inc({ queue, outcome }, worker.counters[outcome]);
    },
  });
  const histogram = (
    name: string,
    help: string,
    buckets: number[],
  ): import("prom-client").Histogram<"queue"> => {
    const h = new prom.Histogram({ name, help, labelNames: ["queue"], buckets, registers });
    h.zero(labels);
    return h;
  };
  const run = histogram(
    "taskfleet_worker_task_run_seconds",
    "How long handlers ran, per finished attempt.",
    TIME_BUCKETS,
  );
  const wait = histogram(
    "taskfleet_worker_task_wait_seconds",
    "How long tasks waited in the queue: from when they were ready (enqueued, due or retried) to their claim.",
    TIME_BUCKETS,
  );
  const claim = histogram(
    "taskfleet_worker_claim_seconds",
    "Round trip of the worker's claim calls.",
    CLAIM_BUCKETS,
  );
  worker.execution.timings = {
    run: (s) => {
      run.observe(labels, s);
    },
    wait: (s) => {
      wait.observe(labels, s);
    },
    claim: (s) => {
      claim.observe(labels, s);
    },
  };
  const gauges: [string, string, () => number][] = [
    ["taskfleet_worker_inflight", "Tasks the worker holds now.", () => worker.execution.held.size],
    [
      "taskfleet_worker_slots",
      "Tasks the worker runs at once (--concurrency).",
      () => worker.settings.concurrency,
    ],
    [
      "taskfleet_worker_slots_held",
      "Slots held by calls the worker gave up on (timed out, lease lost) that still run.",
      () => worker.execution.heldSlots.size,
    ],
    ["taskfleet_worker_draining", "1 once the worker drains.", () => Number(worker.draining)],
    [
      "taskfleet_worker_redis_up",
      "1 while Redis answers the worker.",
      () => Number(worker.gate.open.isSet()),
    ],
    [
      "taskfleet_worker_redis_refusing_writes",
      "1 while Redis refuses the worker's writes (full: OOM under maxmemory).",
      () => Number(worker.gate.refusingWrites),
    ],
    [
      "taskfleet_worker_redis_evicting",
      "1 if Redis's maxmemory-policy may delete keys (started with --allow-eviction).",
      () =>
        Number(worker.evictionPolicy !== null && worker.evictionPolicy !== SAFE_EVICTION_POLICY),
    ],
  ];
  for (const [name, help, value] of gauges) {
    new prom.Gauge({
      name,
      help,
      labelNames: ["queue"],
      registers,
      collect() {
        this.set(labels, value());
      },
    });
  }
  const counters: [string, string, () => number][] = [
    [
      "taskfleet_worker_flow_repairs_total",
      "Waiting tasks this worker's housekeeping resolved: their dependencies had all ended without waking them (an older worker, a lost write).",
      () => worker.counters.flowRepairs,
    ],
    [
      "taskfleet_worker_redis_outage_seconds_total",
      "Time Redis was unreachable for this worker, the current outage included.",
      () => worker.gate.outageSeconds(),
    ],
    [
      "taskfleet_worker_redis_reconnects_total",
      "Outages that ended with Redis answering again.",
      () => worker.gate.reconnects,
    ],
    [
      "taskfleet_worker_redis_refused_writes_total",
      "Calls Redis refused as writes (OOM, MISCONF, NOREPLICAS); each was retried once Redis took writes again.",
      () => worker.gate.refusedWrites,
    ],
  ];
  for (const [name, help, value] of counters) {
    new prom.Counter({
      name,
      help,
      labelNames: ["queue"],
      registers,
      collect() {
        this.reset();
        this.inc(labels, value());
      },
    });
  }
  prom.collectDefaultMetrics({ register: reg });
  return reg;
}

/** Serve `worker`'s metrics on `port` (all interfaces; every path); `MetricsUnavailable` says why it can't. */
export async function serve(
  worker: Worker,
  port: number,
  version: string,
  host = "0.0.0.0",
): Promise<Server> {
  let reg: import("prom-client").Registry;
  try {
    reg = await registry(worker, version);
  } catch (error) {
    throw new MetricsUnavailable(
      `a metrics port needs prom-client: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
  const server = createServer((_request, response) => {
    reg.metrics().then(
      (text) => {
        response.writeHead(200, { "Content-Type": reg.contentType });
        response.end(text);
      },
      (error: unknown) => {
        response.writeHead(500);
        response.end(String(error));
      },
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", (error: NodeJS.ErrnoException) => {
      reject(new MetricsUnavailable(`metrics port ${port}: ${error.code ?? error.message}`));
    });
    server.listen(port, host, () => {
      resolve();
    });
  });
  server.unref();
  return server;
}
