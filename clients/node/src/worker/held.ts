/**
 * Held slots: what a worker does about calls it gave up on that never settle (the Python
 * worker's `worker/held.py`).
 *
 * A run whose task ended (timed out) or whose lease was lost while its promise runs on
 * keeps its slot until the promise settles (`Execution.heldSlots`): a promise that ignores
 * its signal can't be stopped. Such a slot is logged when it becomes held (`slot_held`),
 * reported in the heartbeat's record (`held`) and the metrics. Held longer than
 * `--held-grace` it is stuck (`slot_stuck`, once per slot). A worker whose every slot is
 * stuck can take no work: it says so (`worker_stuck`), drains, and exits with
 * `EXIT_SLOTS_STUCK` so its supervisor (Kubernetes, pm2, `--processes`) starts a fresh
 * one. Nothing is lost by that exit: a held slot's task has ended already (its failure
 * written and retried) or is another worker's (lease lost).
 *
 * @module
 */

import type { Execution } from "./execution.js";
import { type Flag, waitAny } from "./flag.js";
import { logEvent } from "./log.js";

/** The exit code of a worker that stopped because every slot was stuck. */
export const EXIT_SLOTS_STUCK = 3;

/** Default seconds a slot may stay held before it is stuck (Python's `DEFAULT_HELD_GRACE_S`). */
export const DEFAULT_HELD_GRACE_S = 60;

/** Whether a worker with `stuck` slots stuck can take no more work. */
export function allStuck(stuck: number, concurrency: number): boolean {
  return stuck >= concurrency;
}

/**
 * Every `intervalMs`, look at the held slots; call `stuck` once every slot is stuck. Off
 * the claim path: a worker without held slots only wakes, finds none, and waits.
 */
export async function heldLoop(
  execution: Execution,
  draining: Flag,
  o: {
    readonly concurrency: number;
    readonly graceS: number;
    readonly intervalMs: number;
    readonly stuck: () => void;
  },
): Promise<void> {
  while (!draining.isSet()) {
    await waitAny([draining], o.intervalMs);
    if (draining.isSet() || execution.heldSlots.size === 0) continue;
    const n = execution.stuckSlots(o.graceS);
    if (allStuck(n, o.concurrency)) {
      logEvent("error", "worker_stuck", {
        held: execution.heldSlots.size,
        stuck: n,
        concurrency: o.concurrency,
        held_grace_s: o.graceS,
        note: `every slot is held by a call that does not settle: the worker drains and exits ${EXIT_SLOTS_STUCK} to be restarted`,
      });
      o.stuck();
      return;
    }
  }
}
