/**
 * The worker's `tasks_summary` line, as the Python worker writes it: a task done writes no
 * line of its own at the default level (`task_done` is debug); once per interval (10 s) in
 * which anything ended, one info line counts what did — done, failed, retried, dead,
 * cancelled, deferred, released, lost, stale — with the tasks in flight then (`inflight`) and
 * the slots held then by calls given up on that still run (`held`). The counts are
 * deltas since the previous line, so a worker's lines add up to its `worker_stopped`
 * totals; the last window's line is written just before `worker_stopped`. Anything that
 * needs a look is still logged at once, one line each (failures, cancels, deferrals,
 * stale writes, releases, lost leases).
 */
import type { Counters } from "./execution.js";
import { enabled, logEvent } from "./log.js";

export const SUMMARY_INTERVAL_MS = 10_000;

const COUNTED = [
  "completed",
  "failed",
  "retried",
  "dead",
  "cancelled",
  "deferred",
  "released",
  "lost",
  "stale",
] as const;
type Counted = (typeof COUNTED)[number];

export class Summary {
  private last: Record<Counted, number>;
  private since = performance.now();
  private timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly counters: Counters,
    private readonly inflight: () => number,
    private readonly held: () => number,
  ) {
    this.last = this.snapshot();
  }

  private snapshot(): Record<Counted, number> {
    const c = this.counters;
    return {
      completed: c.completed,
      failed: c.failed,
      retried: c.retried,
      dead: c.dead,
      cancelled: c.cancelled,
      deferred: c.deferred,
      released: c.released,
      lost: c.lost,
      stale: c.stale,
    };
  }

  /** Log what ended since the previous call, if anything did; whether it logged. */
  emit(): boolean {
    const now = performance.now();
    const windowS = (now - this.since) / 1000;
    this.since = now;
    const current = this.snapshot();
    const fields: Record<string, number> = {};
    let any = false;
    for (const name of COUNTED) {
      const delta = current[name] - this.last[name];
      fields[name === "completed" ? "done" : name] = delta;
      if (delta !== 0) any = true;
    }
    this.last = current;
    if (!any || !enabled("info")) return false;
    logEvent("info", "tasks_summary", {
      ...fields,
      inflight: this.inflight(),
      held: this.held(),
      window_s: Math.round(windowS * 10) / 10,
    });
    return true;
  }

  /** A line per `intervalMs` until `stop` (the timer does not keep the process alive). */
  start(intervalMs = SUMMARY_INTERVAL_MS): void {
    this.timer = setInterval(() => this.emit(), intervalMs);
    this.timer.unref();
  }

  /** No more timed lines; the last window's line, if anything ended in it. */
  stop(): void {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    this.emit();
  }
}
