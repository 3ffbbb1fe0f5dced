/**
 * The runs a worker holds and how each one runs (the Python worker's
 * `worker/execution.py`, for handlers on the event loop).
 *
 * A handler is called at once with its payload and its `TaskContext`; whatever it
 * returns (or the promise it returns) is its outcome. A run ends exactly once in an
 * `Outcome` for the outbox, or is abandoned (lease lost, released at the drain deadline)
 * and produces nothing. A run the worker gave up on (its timeout passed, its lease was
 * lost) whose promise has not settled keeps its slot (a "held" slot) until it does, so a
 * hung handler can't make the worker run more than its concurrency; its signal is aborted
 * so a handler that listens stops. A held slot is logged (`slot_held`), reported in the
 * heartbeat and the metrics, and, held past the grace, logged as stuck (`held.ts`).
 *
 * Prefetch (`prefetch` > 0): while the runs are short (a moving average under
 * PREFETCH_RUN_LIMIT_MS), claims may take up to `prefetch` tasks more than the free
 * slots. Such a task waits here (held, its lease beaten like a running one's, no handler
 * called, no timer) until a handler returns, whose slot starts it at once: the slots no
 * longer wait for the round trip that writes their outcomes and refills them, and while
 * tasks wait the outbox gathers the outcomes of several turns into one call (`Outbox`'s
 * `hold`), so a call carries more tasks than there are slots. A waiting task is given
 * back unstarted (no attempt, no history record) on a drain (`withdrawWaiting`), when a
 * claim pause covers it (`withdrawHeld`), or when it waited PREFETCH_MAX_WAIT_MS (the
 * worker's `prefetchGuard`); a lost lease drops it as a running one's would.
 *
 * @module
 */

import { formatG } from "../pyformat.js";
import { runSpan } from "../tracing.js";
import type { ClaimedTask } from "./claimed.js";
import {
  type FlowLine,
  type ProviderQuotaLine,
  type QuotaSink,
  type ReportSink,
  TaskContext,
  runWithTask,
} from "./context.js";
import { type Verdict, encodeResult, failureOf, formatError, formatTraceback } from "./failures.js";
import { Flag } from "./flag.js";
import { Listeners } from "./events.js";
import type { HandlerSet } from "./handlers.js";
import { enabled, logEvent } from "./log.js";

/** The error of a run the worker cancelled (the task ends cancelled; the text is not kept). */
export const CANCELLED_ERROR = "CancelledError: the task was cancelled";

/** Longest a run waits before its call after another met a provider's rate limit. */
export const HOLD_MAX_MS = 5000;

/**
 * Prefetch applies only while a typical run (moving average) is shorter than this: a task
 * never waits long behind others in one worker while another worker could run it.
 */
export const PREFETCH_RUN_LIMIT_MS = 10;
/** A prefetched task that waited this long for a slot goes back; prefetch stops until runs are short. */
export const PREFETCH_MAX_WAIT_MS = 1000;
/** Weight of the newest run in that moving average. */
export const RUN_TIME_WEIGHT = 0.1;
/**
 * How long prefetch stays off after a claim's prefetch part was refused while tasks were
 * pending (a fleet-wide `max_concurrency`: claiming for it again would only spin).
 */
export const PREFETCH_REFUSED_MS = 10_000;

export function timeoutError(limitS: number): string {
  return `TimeoutError: task exceeded its timeout of ${formatG(limitS)}s`;
}

/** One task this worker holds: from claim until its outcome is written. */
export class Run {
  timer: NodeJS.Timeout | null = null;
  /** Its promise has settled (or it never began). */
  settled = false;
  timedOut = false;
  /** Its outcome is queued or being written: never release it. */
  finished = false;
  /** Lease lost or released: whatever it produces is dropped. */
  abandoned = false;
  leaseLost = false;
  ranMs = 0;
  /** Prefetched: held, waiting for a slot, no handler called yet. */
  waiting = false;

  constructor(
    readonly task: ClaimedTask,
    readonly claimedAt: number,
    readonly context: TaskContext | null,
  ) {}
}

/** What a run came to: a result (JSON text) or an error, and what the error asks for. */
export interface Outcome {
  run: Run;
  result: string | null;
  /** What the handler returned (the `completed` event's result). */
  value?: unknown;
  error: string | null;
  verdict: Verdict | null;
  /** The failure's last frames (formatTraceback), kept in the attempt's history. */
  traceback?: string;
  /** The run passed its timeout. */
  timedOut?: boolean;
}

/** What this worker did, for its last log line and its metrics. */
export class Counters {
  completed = 0;
  failed = 0;
  retried = 0;
  dead = 0;
  released = 0;
  lost = 0;
  stale = 0;
  cancelled = 0;
  deferred = 0;
  /** Deferred as the queue paused on a provider's rate limit (RateLimited). */
  rateLimited = 0;
  /** Waiting tasks its repair resolved (their wake-up never came). */
  flowRepairs = 0;

  get done(): number {
    return this.completed;
  }
}

/** Per-task and per-claim timings (the metrics endpoint fills them in). */
export interface Timings {
  run(seconds: number): void;
  wait(seconds: number): void;
  claim(seconds: number): void;
}

const NO_LISTENERS = new Listeners();

const NO_TIMINGS: Timings = { run: () => undefined, wait: () => undefined, claim: () => undefined };

/** Where outcomes go (the outbox). */
export interface OutcomeSink {
  add(outcome: Outcome): void;
  readonly size: number;
}

export interface ExecutionOptions {
  readonly queue: string;
  readonly pod: string;
  readonly incarnation: string;
  readonly concurrency: number;
  /** Claimed tasks that may wait for a slot while runs are short (0 or absent: none). */
  readonly prefetch?: number;
  /** Seconds a task without its own timeout may run (null: no limit). */
  readonly defaultTimeout: number | null;
  readonly handlers: HandlerSet;
  readonly outbox: OutcomeSink;
  /** Set whenever a slot frees that a claim may fill. */
  readonly slotFreed: Flag;
  /** Called when the number held changes (the runtime file follows it). */
  readonly changed: () => void;
  readonly report: ReportSink;
  /** Children and dependency results of a run (docs/flows.md). */
  readonly flows?: FlowLine;
  /** Where `reportQuota`'s pauses go. */
  readonly reportQuota?: QuotaSink;
  /** A run's provider quota calls (settle, a named quota's pause). */
  readonly providerQuotas?: ProviderQuotaLine;
  /** The worker's event listeners (`worker.on`). */
  readonly listeners?: Listeners;
  /** Called when the last prefetched task waiting left (started or given back). */
  readonly waitingDrained?: () => void;
}

/** `held`: every task from its claim until its outcome is written (or given back). */
export class Execution {
  readonly held = new Map<string, Run>();
  /**
   * Runs given up on whose promises run on keep ("hold") their slots: since when
   * (`performance.now()`; kept here, not on every Run: nothing is added to a task's path).
   */
  readonly heldSlots = new Map<Run, number>();
  /** Held past the grace, and logged so (`slot_stuck`). */
  private readonly stuck = new Set<Run>();
  /** Set while nothing is held. */
  readonly idle = new Flag();
  readonly counters = new Counters();
  timings: Timings = NO_TIMINGS;
  /**
   * Set when a run meets a provider's rate limit (RateLimited) or reports its quota spent
   * (`reportQuota`, `beginHold`): a run that starts meanwhile waits before its call (in
   * `holding`, where `withdrawHeld` finds it) until `resumeHold`, after the pause is
   * written and the held runs it covers given back, or HOLD_MAX_MS: a task claimed in
   * between never calls the exhausted provider.
   */
  private hold: { open: Promise<void>; release: () => void } | null = null;
  private readonly holding = new Set<Run>();

  /**
   * Where a run's `reportQuota` goes: as after a RateLimited, runs that start before the
   * pause is written and the runs it covers given back wait before their call.
   */
  private readonly quotaSink: QuotaSink | undefined;

  private readonly listeners: Listeners;
  /** Each run in a `process <queue>` span (a tracer provider was registered at start). */
  traced = false;
  /** Tasks that may wait for a slot (0: prefetch off). */
  readonly prefetch: number;
  /** Prefetched runs waiting for a slot, oldest first (each also in `held`). */
  private waiting: Run[] = [];
  /** Runs whose handler was called and has not settled (given-up ones included). */
  private busy = 0;
  /** Waiting runs may start (false once a drain began). */
  private starting = true;
  /** Moving average of the runs' durations (ms); null: none ran yet. */
  typicalRunMs: number | null = null;
  /** Prefetch is off until then (performance.now() ms): a claim's prefetch part was refused. */
  private prefetchOffUntil = 0;

  constructor(private readonly options: ExecutionOptions) {
    this.listeners = options.listeners ?? NO_LISTENERS;
    this.prefetch = options.prefetch ?? 0;
    this.idle.set();
    const report = options.reportQuota;
    this.quotaSink =
      report === undefined
        ? undefined
        : (...args) => {
            this.beginHold();
            report(...args);
          };
  }

  /** Slots that would start a task at once. */
  free(): number {
    return this.options.concurrency - this.held.size - this.heldSlots.size;
  }

  /** Tasks that may wait for a slot now: all of `prefetch` while runs are short. */
  prefetchRoom(): number {
    const typical = this.typicalRunMs;
    if (this.prefetch === 0 || typical === null || typical >= PREFETCH_RUN_LIMIT_MS) return 0;
    if (this.prefetchOffUntil > 0) {
      if (performance.now() < this.prefetchOffUntil) return 0;
      this.prefetchOffUntil = 0;
    }
    return this.prefetch;
  }

  /**
   * A claim asked for `prefetch` tasks to wait and got none of them though tasks were
   * pending: the queue refuses prefetch (a fleet-wide `max_concurrency`); off for a while.
   */
  prefetchRefused(): void {
    this.prefetchOffUntil = performance.now() + PREFETCH_REFUSED_MS;
  }

  /** Tasks a claim may take now: the free slots, plus the prefetch room. */
  room(): number {
    return this.free() + this.prefetchRoom();
  }

  /**
   * A write completing `completed` of the held tasks also claims: how many (only the slots
   * they free, and the prefetch room), and how many of those would wait for a slot.
   * `held` still counts the completed ones.
   */
  refill(completed: number): [number, number] {
    const free = this.free() + completed;
    const n = Math.max(0, Math.min(completed, free + this.prefetchRoom()));
    return [n, prefetchPart(n, free)];
  }

  /** Prefetched tasks waiting for a slot now. */
  get waitingCount(): number {
    return this.waiting.length;
  }

  /**
   * Claimed tasks: started while a slot is free, the rest wait for one (prefetched). Without
   * prefetch, all start (the claim asked for the free slots alone).
   */
  admit(tasks: readonly ClaimedTask[]): void {
    if (this.prefetch === 0) {
      this.startAll(tasks);
      return;
    }
    let at = 0;
    while (at < tasks.length && this.starting && this.waiting.length === 0) {
      if (this.busy >= this.options.concurrency) break;
      this.startAll([tasks[at++] as ClaimedTask]);
    }
    if (at === tasks.length) return;
    const now = performance.now();
    for (; at < tasks.length; at++) {
      const task = tasks[at] as ClaimedTask;
      const run = new Run(task, now, null);
      run.waiting = true;
      this.held.set(task.id, run);
      this.waiting.push(run);
    }
    this.idle.clear();
    this.options.changed();
  }

  /** Start waiting runs while slots are free (a handler returned). */
  private pump(): void {
    while (this.starting && this.waiting.length > 0 && this.busy < this.options.concurrency) {
      const run = this.waiting.shift() as Run;
      run.waiting = false;
      this.startAll([run.task]);
      if (this.waiting.length === 0) this.options.waitingDrained?.();
    }
  }

  /** A drain began: waiting runs start no more (`withdrawWaiting` gives them back). */
  stopStarting(): void {
    this.starting = false;
  }

  /**
   * Waiting runs (of `only`, or all), never started: abandoned now, to give back unstarted.
   * Still in `held` until the caller `forget`s them.
   */
  withdrawWaiting(only?: readonly Run[]): Run[] {
    const out = this.takeWaiting(only);
    for (const run of out) run.abandoned = true;
    return out;
  }

  /** Waiting runs (of `only`, or all) out of the line: none of them will start. */
  private takeWaiting(only?: readonly Run[]): Run[] {
    if (this.waiting.length === 0) return [];
    const picked = only === undefined ? null : new Set(only);
    const out: Run[] = [];
    const kept: Run[] = [];
    for (const run of this.waiting) {
      if (picked !== null && !picked.has(run)) {
        kept.push(run);
        continue;
      }
      run.waiting = false;
      run.settled = true;
      out.push(run);
    }
    this.waiting = kept;
    if (kept.length === 0 && out.length > 0) this.options.waitingDrained?.();
    return out;
  }

  /** Waiting runs claimed at or before `cutoff` (performance.now() ms). */
  waitedSince(cutoff: number): Run[] {
    return this.waiting.filter((run) => run.claimedAt <= cutoff);
  }

  /** A prefetched task waited PREFETCH_MAX_WAIT_MS: prefetch stops until runs are short again. */
  prefetchWaitedTooLong(): void {
    this.typicalRunMs = Math.max(this.typicalRunMs ?? 0, PREFETCH_MAX_WAIT_MS);
  }

  /** Start every claimed task; one that can't start fails its attempt, never the worker. */
  startAll(tasks: readonly ClaimedTask[]): void {
    for (const task of tasks) {
      try {
        this.start(task);
      } catch (error) {
        const run = this.held.get(task.id) ?? new Run(task, performance.now(), null);
        this.held.set(task.id, run);
        run.abandoned = true;
        run.settled = true;
        this.idle.clear();
        this.queue({
          run,
          result: null,
          error: `task could not start: ${formatError(error)}`,
          verdict: null,
        });
      }
    }
  }

  private start(task: ClaimedTask): void {
    const handler = this.options.handlers.forTask(task.name);
    if (handler === null) throw new Error(`no handler for task name ${String(task.name)}`);
    const o = this.options;
    const context = new TaskContext({
      queue: o.queue,
      id: task.id,
      payload: task.payload,
      attempt: task.attempts,
      name: task.name,
      pod: o.pod,
      incarnation: o.incarnation,
      trace: task.trace,
      group: task.group,
      after: task.after,
      restored: task.checkpoint ?? null,
      token: task.token,
      sink: o.report,
      flows: o.flows ?? null,
      quotaSink: this.quotaSink,
      providerQuotas: o.providerQuotas ?? null,
    });
    const run = new Run(task, performance.now(), context);
    this.held.set(task.id, run);
    this.idle.clear();
    if (task.waited !== null) this.timings.wait(task.waited);
    const limit = task.timeout ?? o.defaultTimeout;
    if (limit !== null) {
      run.timer = setTimeout(() => {
        this.timedOut(run, limit);
      }, limit * 1000);
    }
    o.changed();
    if (enabled("debug"))
      logEvent("debug", "task_started", { task: task.id, attempt: task.attempts });
    if (this.listeners.count > 0) this.listeners.emit("active", context);
    this.busy += 1;
    void this.execute(run, handler.fn);
  }

  private async execute(
    run: Run,
    fn: (payload: Record<string, unknown>, task: TaskContext) => unknown,
  ): Promise<void> {
    const context = run.context as TaskContext;
    const outcome: Outcome = { run, result: null, error: null, verdict: null };
    if (this.hold !== null) {
      await this.waitHold(run, this.hold.open);
      if (run.abandoned || run.timedOut) {
        // given back, or failed by its timeout, while held: its call never begins
        run.settled = true;
        if (run.timer !== null) clearTimeout(run.timer);
        run.timer = null;
        this.busy -= 1;
        this.slotReturned(run);
        if (this.waiting.length > 0) this.pump();
        return;
      }
    }
    try {
      const call = (): unknown => runWithTask(context, () => fn(run.task.payload, context));
      const value: unknown = this.traced
        ? await runSpan(this.options.queue, run.task.id, run.task.attempts, run.task.trace, call)
        : await call();
      outcome.result = encodeResult(value);
      if (this.listeners.count > 0) outcome.value = value; // kept for the completed event only
    } catch (error) {
      if (context.cancelled) {
        outcome.error = CANCELLED_ERROR;
      } else {
        [outcome.error, outcome.verdict] = failureOf(error);
        outcome.traceback = formatTraceback(error);
        if (outcome.verdict?.throttle === true) this.beginHold();
      }
    } finally {
      run.settled = true;
      run.ranMs = performance.now() - run.claimedAt;
      if (run.timer !== null) clearTimeout(run.timer);
      run.timer = null;
      this.busy -= 1;
      this.slotReturned(run);
      if (this.prefetch > 0) {
        const typical = this.typicalRunMs;
        this.typicalRunMs =
          typical === null ? run.ranMs : typical + RUN_TIME_WEIGHT * (run.ranMs - typical);
        if (this.waiting.length > 0) this.pump();
      }
    }
    if (run.timedOut) return; // failed when its time ran out; what it returned since is dropped
    if (run.abandoned) {
      if (run.leaseLost)
        logEvent("info", "task_result_dropped", { task: run.task.id, reason: "lease lost" });
      return;
    }
    this.queue(outcome);
  }

  private async waitHold(run: Run, open: Promise<void>): Promise<void> {
    this.holding.add(run);
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        open,
        new Promise<void>((resolve) => (timer = setTimeout(resolve, HOLD_MAX_MS))),
      ]);
    } finally {
      clearTimeout(timer);
      this.holding.delete(run);
    }
  }

  /** Hold runs before their call until `resumeHold` (at most HOLD_MAX_MS). */
  beginHold(): void {
    if (this.hold !== null) return;
    let release = (): void => undefined;
    const open = new Promise<void>((resolve) => (release = resolve));
    this.hold = { open, release };
  }

  /** The rate limit's pause is written and the held runs given back: runs call again. */
  resumeHold(): void {
    const hold = this.hold;
    this.hold = null;
    hold?.release();
  }

  /** The runs held before their call now (a rate limit's hold), and the prefetched ones waiting. */
  heldRuns(): Run[] {
    const held = [...this.holding].filter((run) => !run.finished && !run.abandoned);
    return this.waiting.length === 0 ? held : [...held, ...this.waiting];
  }

  /**
   * The runs held before their call (a rate limit's hold), or those of `only` still held:
   * abandoned now, to give back.
   */
  withdrawHeld(only?: readonly Run[]): Run[] {
    const out: Run[] = this.withdrawWaiting(only);
    for (const run of only ?? this.holding) {
      if (!this.holding.has(run)) continue;
      if (run.finished || run.abandoned) continue;
      run.abandoned = true;
      out.push(run);
    }
    return out;
  }

  private timedOut(run: Run, limitS: number): void {
    run.timer = null;
    if (run.finished || run.abandoned || run.settled) return;
    run.timedOut = true;
    run.context?.stop("TimeoutError", `the task exceeded its timeout of ${formatG(limitS)}s`);
    this.queue({ run, result: null, error: timeoutError(limitS), verdict: null, timedOut: true });
    this.keepSlotUntilSettled(run);
  }

  private queue(outcome: Outcome): void {
    outcome.run.finished = true;
    this.options.outbox.add(outcome);
  }

  private keepSlotUntilSettled(run: Run): void {
    if (run.settled || this.heldSlots.has(run)) return;
    const now = performance.now();
    this.heldSlots.set(run, now);
    logEvent("warning", "slot_held", {
      task: run.task.id,
      reason: run.timedOut ? "timeout" : "lease lost",
      ran_s: Math.round((now - run.claimedAt) / 100) / 10,
      held: this.heldSlots.size,
      note: "the call runs on and keeps its slot until it settles",
    });
  }

  /** A held slot's promise settled at last: the slot is free again. */
  private slotReturned(run: Run): void {
    if (this.heldSlots.size === 0) return; // nearly always: no lookup on a task's path
    const heldAt = this.heldSlots.get(run);
    if (heldAt === undefined) return;
    this.heldSlots.delete(run);
    this.stuck.delete(run);
    this.options.slotFreed.set();
    const heldS = (performance.now() - heldAt) / 1000;
    logEvent("info", "slot_released", { task: run.task.id, held_s: Math.round(heldS * 10) / 10 });
  }

  /** How many slots have been held longer than `graceS` (each logged once, as `slot_stuck`). */
  stuckSlots(graceS: number): number {
    const now = performance.now();
    let stuck = 0;
    for (const [run, heldAt] of this.heldSlots) {
      if (now - heldAt < graceS * 1000) continue;
      stuck += 1;
      if (!this.stuck.has(run)) {
        this.stuck.add(run);
        logEvent("error", "slot_stuck", {
          task: run.task.id,
          held_s: Math.round((now - heldAt) / 100) / 10,
          held_grace_s: graceS,
        });
      }
    }
    return stuck;
  }

  /** Leases to extend: not those of finished runs, whose outcome write ends the lease. */
  leases(): Map<string, string> {
    const out = new Map<string, string>();
    for (const run of this.held.values())
      if (!run.abandoned && !run.finished) out.set(run.task.id, run.task.token);
    return out;
  }

  /** Leases we no longer hold: someone else may run the task; drop our result. */
  abandon(lost: readonly string[]): void {
    for (const taskId of lost) {
      const run = this.held.get(taskId);
      if (run === undefined || run.finished) continue;
      this.held.delete(taskId);
      if (run.waiting) this.withdrawWaiting([run]); // never began: no slot to keep
      run.abandoned = true;
      run.leaseLost = true;
      this.counters.lost += 1;
      logEvent("warning", "lease_lost", { task: taskId });
      run.context?.stop("LeaseLost", "the task's lease was lost: another worker may run it now");
      this.keepSlotUntilSettled(run);
      this.options.slotFreed.set();
    }
    this.forget([]);
  }

  /**
   * Producers cancelled these tasks (the heartbeat says so): abort their runs' signals. A
   * prefetched run still waiting for a slot ends cancelled at once, its handler never
   * called.
   */
  cancel(taskIds: readonly string[]): void {
    for (const taskId of taskIds) {
      const run = this.held.get(taskId);
      if (run?.waiting === true && !run.finished && !run.abandoned) {
        this.takeWaiting([run]);
        logEvent("info", "task_cancel_requested", { task: taskId });
        this.queue({ run, result: null, error: CANCELLED_ERROR, verdict: null });
        continue;
      }
      if (
        run === undefined ||
        run.finished ||
        run.abandoned ||
        run.context === null ||
        run.context.cancelled
      )
        continue;
      logEvent("info", "task_cancel_requested", { task: taskId });
      run.context.stop("CancelledError", "the task was cancelled");
    }
  }

  /** The drain deadline: every unfinished run is abandoned, its signal aborted; returns them. */
  abandonUnfinished(): Run[] {
    this.starting = false;
    this.withdrawWaiting(); // none should wait by now (the drain gave them back): no start
    const left = [...this.held.values()].filter((run) => !run.finished);
    for (const run of left) {
      run.abandoned = true;
      run.context?.stop(
        "Drained",
        "the worker's drain deadline passed: the task goes back to the queue",
      );
    }
    return left;
  }

  /** These runs are not this worker's any more (released, or left to their leases). */
  forget(runs: readonly Run[]): void {
    for (const run of runs) this.held.delete(run.task.id);
    if (this.held.size === 0 && this.options.outbox.size === 0) this.idle.set();
    this.options.changed();
  }

  /**
   * An outcome was written (`accepted`) or refused as stale; `dead`: a failure that ended
   * the task; `cancelled`: the task ended cancelled; `deferred`: retried later as its
   * handler asked, the attempt given back; `rateLimited`: it met a provider's rate limit
   * and the queue pauses claiming.
   */
  finish(
    outcome: Outcome,
    accepted: boolean,
    event: string,
    how: {
      dead?: boolean;
      cancelled?: boolean;
      deferred?: boolean;
      rateLimited?: boolean;
      reason?: string;
      /** The run succeeded but the task waits for children it added: no outcome yet. */
      joining?: boolean;
    } = {},
  ): void {
    const run = outcome.run;
    this.held.delete(run.task.id);
    const ms = Math.round((performance.now() - run.claimedAt) * 10) / 10;
    const c = this.counters;
    if (!accepted) {
      c.stale += 1;
      logEvent("warning", "task_write_refused", { task: run.task.id, reason: "stale" });
    } else if (how.cancelled === true || how.deferred === true) {
      if (how.cancelled === true) c.cancelled += 1;
      else c.deferred += 1;
      if (how.rateLimited === true) {
        c.rateLimited += 1;
        logEvent("warning", "queue_rate_limited", {
          task: run.task.id,
          error: outcome.error ?? "",
        });
      }
      logEvent("info", how.cancelled === true ? "task_cancelled" : "task_deferred", {
        task: run.task.id,
        attempt: run.task.attempts,
        ms,
      });
    } else if (outcome.error === null) {
      c.completed += 1;
      this.timings.run((run.ranMs || performance.now() - run.claimedAt) / 1000);
      // a task done is debug: the tasks_summary line counts them (summary.ts)
      if (enabled("debug")) logEvent("debug", event, { task: run.task.id, ms });
    } else {
      c.failed += 1;
      if (how.dead === true) c.dead += 1;
      else c.retried += 1;
      this.timings.run((run.ranMs || performance.now() - run.claimedAt) / 1000);
      const fields: Record<string, unknown> = {
        task: run.task.id,
        attempt: run.task.attempts,
        ms,
        error: outcome.error,
      };
      if (how.reason !== undefined) fields.reason = how.reason;
      logEvent("warning", event, fields);
    }
    if (this.held.size === 0 && this.options.outbox.size === 0) this.idle.set();
    this.options.changed();
    if (accepted && this.listeners.count > 0) this.emitOutcome(outcome, how);
  }

  /** The outcome event of a run whose outcome was written (events.ts). */
  private emitOutcome(
    outcome: Outcome,
    how: { dead?: boolean; cancelled?: boolean; deferred?: boolean; joining?: boolean },
  ): void {
    const context = outcome.run.context;
    if (context === null) return; // a task that could not start: no active event either
    const l = this.listeners;
    if (how.joining === true) l.emit("waiting-children", context, outcome.value ?? null);
    else if (how.cancelled === true) l.emit("cancelled", context);
    else if (how.deferred === true) l.emit("deferred", context, outcome.error ?? "");
    else if (outcome.error === null) l.emit("completed", context, outcome.value ?? null);
    else l.emit("failed", context, outcome.error, { dead: how.dead === true });
  }
}

/** Of `n` tasks claimed with `free` slots, how many would wait for a slot. */
export function prefetchPart(n: number, free: number): number {
  return Math.max(0, n - Math.max(0, free));
}
