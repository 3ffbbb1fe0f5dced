/**
 * The worker's side of `worker.json`: rewritten when it matters, throttled otherwise (the
 * Python worker's `worker/runtime_file.py`). What `drain --wait` acts on (`state`,
 * `draining`, and nothing left in flight while draining) is written within the event
 * loop's turn; other changes of the in-flight count wait for the throttle window (every
 * second before a drain, every 100 ms during one), and a write is always scheduled for
 * its end, so the file never stays stale.
 *
 * @module
 */

import { formatError } from "./failures.js";
import { logEvent } from "./log.js";
import { type RuntimeState, writeState } from "./runtime.js";

export const INTERVAL_MS = 1000;
export const INTERVAL_DRAINING_MS = 100;

/** What the file says that changes: state, draining, inflight. */
export type Status = [string, boolean, number];

export class RuntimeFile {
  private written: RuntimeState | null = null;
  private writtenAt = -INTERVAL_MS;
  private scheduled: NodeJS.Timeout | NodeJS.Immediate | null = null;
  private scheduledAtOnce = false;

  constructor(
    readonly path: string,
    private readonly status: () => Status,
    private readonly fixed: { pid: number; start: string | null; pod: string; queue: string },
  ) {}

  private urgent([state, draining, inflight]: Status): boolean {
    const w = this.written;
    return (
      w === null ||
      w.state !== state ||
      w.draining !== draining ||
      (draining && w.inflight > 0 && inflight === 0)
    );
  }

  private cancel(): void {
    if (this.scheduled === null) return;
    clearTimeout(this.scheduled as NodeJS.Timeout);
    clearImmediate(this.scheduled as NodeJS.Immediate);
    this.scheduled = null;
  }

  /** Schedule a write: throttled, but never late for a drain. */
  changed(): void {
    if (this.scheduledAtOnce) return;
    const now = this.status();
    const urgent = this.urgent(now);
    if (this.scheduled !== null && !urgent) return;
    const due = this.writtenAt + (now[1] ? INTERVAL_DRAINING_MS : INTERVAL_MS);
    if (urgent || performance.now() >= due) {
      this.cancel();
      this.scheduledAtOnce = true;
      this.scheduled = setImmediate(() => {
        this.write();
      });
    } else if (this.scheduled === null) {
      this.scheduled = setTimeout(() => {
        this.write();
      }, due - performance.now());
    }
  }

  /** Write now (also called directly: drained, stopped). */
  write(): void {
    this.cancel();
    this.scheduledAtOnce = false;
    const [state, draining, inflight] = this.status();
    const record: RuntimeState = {
      pid: this.fixed.pid,
      pod: this.fixed.pod,
      queue: this.fixed.queue,
      inflight,
      draining,
      state,
      start: this.fixed.start,
    };
    this.writtenAt = performance.now();
    this.written = record;
    try {
      writeState(record, this.path);
    } catch (error) {
      this.written = null;
      logEvent("warning", "runtime_file_failed", { error: formatError(error) });
    }
  }

  /** No more writes (the worker exits). */
  close(): void {
    this.cancel();
    this.scheduledAtOnce = true;
  }
}
