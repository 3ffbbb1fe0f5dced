/**
 * Outcomes and reports on their way to Redis (the Python worker's `outbox.py`,
 * `writing.py` and `reporting.py`).
 *
 * - `Outbox`: handlers' outcomes as they come; one flush loop writes whatever gathered
 *   while the previous write was in flight, in one call per kind (while prefetched tasks
 *   wait for a slot, a write first waits up to 20 ms for the outcomes they are about to
 *   bring, so one call completes and refills them together). A batch that fails on
 *   an outage waits for the gate; each outcome leaves its batch once written, so a retry
 *   never repeats one.
 * - `OutcomeWriter`: completions, with a claim for the slots they free in the same call
 *   (unless draining or the claim loop waits for a producer's wake-up), and failures.
 * - `Reports`: handlers' progress and costs, the latest per run, written at most every
 *   half second in one call, fenced by each run's token; a quota report (`reportQuota`)
 *   at once, its pause handed to `paused` (the held runs it covers go back, the hold ends).
 *
 * @module
 */

import type { Broker, ClaimResult, Report } from "./broker.js";
import { CANCELLED, DEPENDENCY_FAILED, JOINING, RESULT_TOO_LARGE } from "./broker.js";
import type { Execution, Outcome, OutcomeSink } from "./execution.js";
import { Flag, sleep, waitAny } from "./flag.js";
import { classify } from "./faults.js";
import type { RedisGate } from "./gate.js";
import { MAX_BATCH } from "./limits.js";
import { logEvent } from "./log.js";
import type { Pauses } from "./pauses.js";

/**
 * Longest a write waits for more outcomes while prefetched tasks wait for a slot (`hold`):
 * a finished run's lease is no longer beaten, so its outcome never waits long.
 */
export const OUTBOX_HOLD_MAX_MS = 20;

/** At most one report write per worker process this often. */
export const REPORT_INTERVAL_MS = 500;

/** Whether an error is an outage to wait out (or a refusal the gate stops on). */
export function isRedisDown(error: unknown): boolean {
  const found = classify(error);
  return found !== null && found.policy !== "fail task";
}

export class Outbox implements OutcomeSink {
  /** Set when outcomes are added (and to stop the loop). */
  readonly ready = new Flag();
  private items: Outcome[] = [];

  constructor(
    private readonly write: (batch: Outcome[]) => Promise<void>,
    private readonly gate: RedisGate,
    private readonly giveUp: Flag,
    /**
     * True while more outcomes are sure to come at once (prefetched tasks wait for the
     * slots now running): the flush loop's write waits for them (at most
     * OUTBOX_HOLD_MAX_MS, or a full batch), so one call completes and refills more tasks.
     */
    private readonly hold: () => boolean = () => false,
  ) {}

  get size(): number {
    return this.items.length;
  }

  add(outcome: Outcome): void {
    this.items.push(outcome);
    this.ready.set();
  }

  /** The flush loop: write what gathers until `until` is set. */
  async serve(until: Flag): Promise<void> {
    for (;;) {
      await this.ready.wait();
      if (until.isSet()) return;
      this.ready.clear();
      await new Promise((r) => setImmediate(r)); // let outcomes of this turn join the batch
      await this.flush(until, true);
    }
  }

  /** While `hold` says more outcomes come at once: wait for them (bounded). */
  private async gather(until: Flag | undefined): Promise<void> {
    const end = performance.now() + OUTBOX_HOLD_MAX_MS;
    while (this.hold() && this.items.length < MAX_BATCH && until?.isSet() !== true) {
      const left = end - performance.now();
      if (left <= 0) return;
      this.ready.clear();
      await waitAny(until === undefined ? [this.ready] : [this.ready, until], left);
    }
  }

  /**
   * Write everything, waiting out outages; return early on a forced stop. `gathering`
   * (the flush loop): each write first waits for the outcomes `hold` says are coming.
   */
  async flush(until?: Flag, gathering = false): Promise<void> {
    while (this.items.length > 0) {
      if (gathering) await this.gather(until);
      const batch = this.items.slice(0, MAX_BATCH);
      this.items = this.items.slice(MAX_BATCH);
      try {
        await this.write(batch);
      } catch (error) {
        this.items = [...batch, ...this.items];
        if (!isRedisDown(error)) throw error;
        if (this.giveUp.isSet()) return;
        const flags = until === undefined || until.isSet() ? [this.giveUp] : [this.giveUp, until];
        await this.gate.waitOut(error, ...flags);
        if (until !== undefined && until.isSet() && flags.length > 1) return;
      }
    }
  }
}

/** A claim pause a handler's `reportQuota` asked for. */
export interface QuotaPause {
  readonly taskId: string;
  readonly pauseMs: number | null;
  readonly group: boolean;
  readonly reason: string;
}

/**
 * Called once claim pauses are written: gives back the held runs they cover
 * (`coveredRuns`) and ends the hold (`Execution.resumeHold`), whatever happens.
 */
export type Paused = (pauses: Pauses) => Promise<void>;

/** Writes batches of outcomes for one worker. */
export class OutcomeWriter {
  constructor(
    private readonly broker: Broker,
    private readonly execution: Execution,
    private readonly reports: Reports,
    private readonly take: (tasks: ClaimResult["tasks"]) => Promise<void>,
    private readonly mayClaim: () => boolean,
    private readonly slotFreed: Flag,
    /** After a rate limit's fail is written: give back the held runs it covers, end the hold. */
    private readonly paused: Paused = () => {
      execution.resumeHold();
      return Promise.resolve();
    },
  ) {}

  /** Write `batch`, removing each outcome once written (so a retry never repeats it). */
  async write(batch: Outcome[]): Promise<void> {
    try {
      if (this.reports.size > 0) await writeReports(this.broker, this.reports, this.paused);
      const done = batch.filter((o) => o.error === null);
      if (done.length > 0) await this.complete(batch, done);
      while (batch.length > 0) {
        const outcome = batch[0] as Outcome;
        const verdict = outcome.verdict;
        const permanent = verdict?.permanent === true;
        if (verdict?.providerQuota !== undefined)
          await this.broker.pauseProviderQuota(
            verdict.providerQuota,
            verdict.retryAfterMs ?? 0,
            outcome.error ?? "",
          );
        const state = await this.broker.fail(
          outcome.run.task.id,
          outcome.run.task.token,
          outcome.error ?? "",
          !permanent,
          permanent ? "permanent" : "",
          verdict?.retryAfterMs ?? null,
          verdict?.throttle === true,
          verdict?.groupScope === true,
          outcome.traceback ?? "",
          outcome.timedOut === true,
        );
        batch.shift();
        this.execution.finish(outcome, state !== null, "task_failed", {
          dead: state === "dead",
          cancelled: state === "cancelled",
          deferred:
            state === "delayed" &&
            ((verdict?.retryAfterMs ?? null) !== null || verdict?.throttle === true),
          rateLimited: verdict?.throttle === true,
        });
        if (verdict?.throttle === true)
          await this.paused([[outcome.run.task.id, verdict.groupScope === true]]);
      }
    } finally {
      if (this.execution.room() > 0) this.slotFreed.set();
    }
  }

  private async complete(batch: Outcome[], done: Outcome[]): Promise<void> {
    const execution = this.execution;
    const items = done.map((o): [string, string, string | null] => [
      o.run.task.id,
      o.run.task.token,
      o.result,
    ]);
    // held still counts the completed ones: the slots they free are theirs to refill
    const [refill, prefetch] = execution.refill(done.length);
    const n = Math.min(refill, MAX_BATCH);
    let claimed: ClaimResult | null = null;
    let applied: number[];
    if (n <= 0 || !this.mayClaim()) {
      applied = await this.broker.complete(items);
    } else {
      [applied, claimed] = await this.broker.completeAndClaim(items, n, Math.min(prefetch, n));
    }
    // all of them written: they leave the batch (a retry writes only its failures)
    let kept = 0;
    for (const outcome of batch) if (outcome.error !== null) batch[kept++] = outcome;
    batch.length = kept;
    done.forEach((outcome, i) => {
      const code = applied[i];
      if (code === CANCELLED) {
        execution.finish(outcome, true, "task_cancelled", { cancelled: true });
      } else if (code === RESULT_TOO_LARGE) {
        outcome.result = null;
        outcome.error = "result too large for the queue's max_payload_bytes";
        execution.finish(outcome, true, "task_failed", { dead: true, reason: "result too large" });
      } else if (code === DEPENDENCY_FAILED) {
        // a child it added failed: the task is dead, whatever its run returned
        outcome.result = null;
        outcome.error = "a child it added failed";
        execution.finish(outcome, true, "task_failed", { dead: true, reason: "dependency failed" });
      } else {
        // JOINING: its run succeeded, the task waits for the children it added
        execution.finish(outcome, code === 1 || code === JOINING, "task_done", {
          joining: code === JOINING,
        });
      }
    });
    if (claimed !== null && claimed.tasks.length > 0) await this.take(claimed.tasks);
  }
}

/** The reports not yet written, the latest per run. */
export class Reports {
  readonly ready = new Flag();
  /** A quota report: written without the interval's wait. */
  readonly urgent = new Flag();
  private pending = new Map<string, Report>();
  /** Claim pauses `reportQuota` asked for: one `quota` call each, in the same write. */
  private pauses: QuotaPause[] = [];

  get size(): number {
    return this.pending.size + this.pauses.length;
  }

  /** Queue a report: a newer progress or cost replaces the older. */
  add(taskId: string, token: string, progress: string | null, cost: number | null): void {
    const key = `${taskId}\0${token}`;
    const old = this.pending.get(key);
    this.pending.set(key, {
      taskId,
      token,
      progress: progress ?? old?.progress ?? null,
      cost: cost ?? old?.cost ?? null,
    });
    this.ready.set();
  }

  /** Queue a claim pause a handler's `reportQuota` asked for. */
  addQuota(pause: QuotaPause): void {
    this.pauses.push(pause);
    this.ready.set();
    this.urgent.set();
  }

  takeQuota(): QuotaPause[] {
    const pauses = this.pauses;
    this.pauses = [];
    return pauses;
  }

  putBackQuota(pauses: readonly QuotaPause[]): void {
    this.pauses.unshift(...pauses);
    if (pauses.length > 0) this.ready.set();
  }

  take(): Report[] {
    const reports = [...this.pending.values()];
    this.pending = new Map();
    this.ready.clear();
    return reports;
  }

  /** Reports whose write failed: kept unless a newer one of the run came meanwhile. */
  putBack(reports: readonly Report[]): void {
    for (const r of reports)
      if (!this.pending.has(`${r.taskId}\0${r.token}`))
        this.add(r.taskId, r.token, r.progress, r.cost);
  }
}

/**
 * Write what is pending now, in one call; on an outage the reports are kept and the error
 * goes on. Quota pauses written are handed to `paused`.
 */
export async function writeReports(
  broker: Broker,
  reports: Reports,
  paused?: Paused,
): Promise<void> {
  const batch = reports.take();
  const pauses = reports.takeQuota();
  for (const [i, p] of pauses.entries()) {
    try {
      await broker.pauseQuota(p.pauseMs, p.reason, p.group ? p.taskId : "");
    } catch (error) {
      if (isRedisDown(error)) {
        reports.putBackQuota(pauses.slice(i));
        reports.putBack(batch);
      }
      throw error;
    }
    logEvent("warning", "quota_reported_spent", {
      task: p.taskId,
      pause_ms: p.pauseMs ?? "adaptive",
    });
  }
  if (pauses.length > 0 && paused !== undefined)
    await paused(pauses.map((p) => [p.taskId, p.group] as const));
  if (batch.length === 0) return;
  let applied: boolean[];
  try {
    applied = await broker.report(batch);
  } catch (error) {
    if (isRedisDown(error)) reports.putBack(batch);
    throw error;
  }
  const refused = applied.filter((ok) => !ok).length;
  if (refused > 0) logEvent("debug", "reports_refused", { reports: refused });
}

/**
 * Write reports as they come, one call per interval at most (a quota report at once),
 * until `closing` (then once more).
 */
export async function reportLoop(
  broker: Broker,
  reports: Reports,
  gate: RedisGate,
  closing: Flag,
  stopRequested: Flag,
  paused?: Paused,
): Promise<void> {
  for (;;) {
    await waitAny([reports.ready, closing]);
    reports.urgent.clear();
    try {
      await writeReports(broker, reports, paused);
    } catch (error) {
      if (!isRedisDown(error)) throw error;
      if (closing.isSet() || stopRequested.isSet()) return;
      await gate.waitOut(error, stopRequested, closing);
      continue;
    }
    if (closing.isSet()) return;
    await sleep(REPORT_INTERVAL_MS, closing, reports.urgent);
  }
}
