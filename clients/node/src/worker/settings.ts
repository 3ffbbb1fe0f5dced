/**
 * What a `Worker` takes, with the Python worker's defaults and checks
 * (`worker/settings.py`): a setting it refuses, it refuses with the same one line.
 *
 * @module
 */

import * as bounds from "../bounds.js";
import { InvalidArgument } from "../errors.js";
import { checkOptionKeys } from "../options.js";
import { validateQueueName } from "../keys.js";
import { formatG } from "../pyformat.js";
import { parseRedisURL } from "../redisurl.js";
import type { HandlerFn } from "./handlers.js";
import { DEFAULT_HELD_GRACE_S } from "./held.js";
import { MAX_CONCURRENCY, MAX_PREFETCH, MIN_HEARTBEAT_S } from "./limits.js";

/**
 * How a `Worker` runs. Durations are milliseconds, in options named `...Ms` (the CLI's
 * flags stay in seconds and are converted); an old name in seconds is refused naming it.
 */
export interface WorkerOptions<Payload = Record<string, unknown>, Result = unknown> {
  /** The handler of tasks enqueued without a name. */
  readonly handler?: HandlerFn<Payload, Result>;
  /** Handlers of named tasks (`enqueue(..., { name })`), by name. */
  readonly handlers?: Readonly<Record<string, HandlerFn<Payload, Result>>>;
  /** Default `redis://localhost:6379/0`; see `QueueOptions.redisUrl`. */
  readonly redisUrl?: string;
  /**
   * Worker name, unique among the queue's live workers (in Kubernetes: the pod's name). A
   * restart under the same name takes back its earlier tasks; a start under the name of a
   * live worker is refused. Default `<hostname>-<pid>-<random>`.
   */
  readonly pod?: string;
  /** Tasks this worker runs at once (default 1). */
  readonly concurrency?: number;
  /** Milliseconds in-flight tasks may finish after a drain begins before they are released (default 30,000). */
  readonly drainTimeoutMs?: number;
  /** Milliseconds between heartbeats (default 5,000; shortened to fit the queue's lease TTL). */
  readonly heartbeatIntervalMs?: number;
  /**
   * Deprecated and ignored (a warning at start says so): the lease TTL is the queue's
   * config, one value for all its workers (`Queue.configure({ leaseTtlMs })`,
   * `taskfleet configure QUEUE --lease-ttl S`, or the TaskQueue's `heartbeat.ttlSeconds`).
   */
  readonly leaseTtlMs?: number;
  /** Milliseconds a task may run unless it sets its own timeout (default: none). */
  readonly taskTimeoutMs?: number;
  /**
   * Milliseconds a slot may stay held by a call given up on (its task timed out, its lease was
   * lost) before it is stuck; when every slot is stuck the worker drains and `run()`
   * resolves to 3, to be restarted (default 60,000).
   */
  readonly heldGraceMs?: number;
  /** Where `worker.json` is kept for `drain` (default: none is written). */
  readonly runtimeDir?: string;
  /** Fire the queue's due schedules in the background (default true). */
  readonly fireSchedules?: boolean;
  /** Start even if Redis' maxmemory-policy may delete keys (default false: refuse). */
  readonly allowEviction?: boolean;
  /**
   * Claimed tasks that may wait in the worker for a free slot, while its runs are short (a
   * moving average under 10 ms): a slot whose handler returned starts one at once, and one
   * call writes the outcomes of the slots' turns while tasks wait and refills them all
   * (default: twice the concurrency, as the Python worker's; 0: none).
   */
  readonly prefetch?: number;
  /** Longest blocking wait for work, ms (default 1,000). */
  readonly idleWaitMs?: number;
}

/** Settings checked, with defaults filled in. */
export interface Settings {
  readonly queue: string;
  readonly redisUrl: string;
  readonly pod: string;
  readonly incarnation: string;
  readonly concurrency: number;
  /** Tasks that may wait for a slot (0: none). */
  readonly prefetch: number;
  readonly drainTimeout: number;
  readonly heartbeatInterval: number;
  readonly leaseTtl: number | null;
  readonly taskTimeout: number | null;
  readonly heldGrace: number;
  readonly runtimeDir: string | null;
  readonly fireSchedules: boolean;
  readonly allowEviction: boolean;
  readonly idleWait: number;
  readonly backoffBase: number;
  readonly backoffMax: number;
}

/** How long any one Redis call may go without a reply before it counts as an outage (ms). */
export function replyTimeoutMs(settings: Settings): number {
  return Math.max(2, settings.idleWait + 2) * 1000;
}

const fail = (message: string): never => {
  throw new InvalidArgument(message);
};

/** `options` checked; `InvalidArgument` says what to fix in one line. */
// WorkerOptions' keys, and the handler set the CLI passes: any other is refused, never
// ignored. A record over `keyof`, so an option added to the interface and not here fails tsc.
const WORKER_OPTION_KEYS: Record<
  keyof WorkerOptions | "handler" | "handlers" | "handlerSet",
  true
> = {
  handler: true,
  handlers: true,
  handlerSet: true,
  redisUrl: true,
  pod: true,
  concurrency: true,
  drainTimeoutMs: true,
  heartbeatIntervalMs: true,
  leaseTtlMs: true,
  taskTimeoutMs: true,
  heldGraceMs: true,
  runtimeDir: true,
  fireSchedules: true,
  allowEviction: true,
  prefetch: true,
  idleWaitMs: true,
};

/**
 * A duration option in ms as the seconds the checks and the loops use (to the microsecond,
 * so the CLI's seconds come back as given); not a number: kept for the checks to refuse.
 */
function inSeconds<T>(ms: T): T | number {
  return typeof ms === "number" && Number.isFinite(ms) ? Math.round(ms * 1000) / 1e6 : ms;
}
const WORKER_OPTIONS: ReadonlySet<string> = new Set(Object.keys(WORKER_OPTION_KEYS));

export function checkSettings(
  queue: string,
  options: WorkerOptions<never>,
  pod: string,
  incarnation: string,
): Settings {
  checkOptionKeys(options, WORKER_OPTIONS, "Worker options");
  const concurrency = options.concurrency ?? 1;
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > MAX_CONCURRENCY) {
    fail(
      `concurrency must be within 1..${MAX_CONCURRENCY}, got ${String(concurrency)} (for more, run more processes or pods)`,
    );
  }
  const prefetch = options.prefetch;
  if (
    prefetch !== undefined &&
    (!Number.isInteger(prefetch) || prefetch < 0 || prefetch > MAX_PREFETCH)
  ) {
    fail(`prefetch must be within 0..${MAX_PREFETCH}, got ${String(prefetch)}`);
  }
  const heartbeat = inSeconds(options.heartbeatIntervalMs) ?? 5;
  const drain = inSeconds(options.drainTimeoutMs) ?? 30;
  const leaseTtl = inSeconds(options.leaseTtlMs) ?? null;
  const taskTimeout = inSeconds(options.taskTimeoutMs) ?? null;
  const heldGrace = inSeconds(options.heldGraceMs) ?? DEFAULT_HELD_GRACE_S;
  const durations: [string, number | null, number][] = [
    ["heartbeat interval", heartbeat, bounds.MAX_DURATION_S],
    ["lease TTL", leaseTtl, bounds.MAX_DURATION_S],
    ["drain timeout", drain, bounds.MAX_TIMEOUT_S],
    ["task timeout", taskTimeout, bounds.MAX_TIMEOUT_S],
    ["held grace", heldGrace, bounds.MAX_TIMEOUT_S],
  ];
  for (const [what, value] of durations) {
    if (value !== null && (typeof value !== "number" || !Number.isFinite(value))) {
      fail(`${what} must be a finite number of seconds, got ${String(value)}`);
    }
  }
  for (const [what, value, bound] of durations) {
    if (value !== null && value > bound)
      fail(`${what} must be at most ${formatG(bound)} seconds, got ${formatG(value)}`);
  }
  if (heartbeat < MIN_HEARTBEAT_S)
    fail(
      `heartbeat interval must be at least ${formatG(MIN_HEARTBEAT_S)} seconds, got ${formatG(heartbeat)}`,
    );
  // leaseTtl is deprecated and ignored (a warning at start): any value starts the worker
  if (drain < 0) fail("drain timeout must not be negative");
  if (taskTimeout !== null && taskTimeout <= 0) fail("task timeout must be positive");
  if (heldGrace <= 0) fail(`held grace must be positive, got ${formatG(heldGrace)}`);
  const idleWait = inSeconds(options.idleWaitMs) ?? 1;
  if (!(Number.isFinite(idleWait) && idleWait > 0 && idleWait <= 60))
    fail("idle wait must be within (0, 60] seconds");
  validateQueueName(queue);
  const redisUrl = options.redisUrl ?? "redis://localhost:6379/0";
  parseRedisURL(redisUrl);
  if (pod === "") fail("pod name must not be empty");
  if (pod.includes("\0")) fail("pod name must not contain NUL");
  return {
    queue,
    redisUrl,
    pod,
    incarnation,
    concurrency,
    prefetch: prefetch ?? Math.min(2 * concurrency, MAX_PREFETCH),
    drainTimeout: drain,
    heartbeatInterval: heartbeat,
    leaseTtl,
    taskTimeout,
    heldGrace,
    runtimeDir: options.runtimeDir ?? null,
    fireSchedules: options.fireSchedules ?? true,
    allowEviction: options.allowEviction ?? false,
    idleWait,
    backoffBase: 0.1,
    backoffMax: 5,
  };
}
