/**
 * The worker's loops besides the outbox's: the claim loop, the heartbeat and the
 * schedule firer (the Python worker's `claiming.py`, `heartbeat.py`, `firing.py`).
 *
 * - The claim loop fills free slots with one batched claim and, when the queue is empty,
 *   blocks on the broker's `waitForWork` (BLPOP on its wake list and `notify`), where
 *   producers hand it tasks they claimed for it.
 * - The heartbeat extends every held lease in one call, reports in-flight count and the
 *   draining flag, abandons tasks whose lease was lost, cancels those producers
 *   cancelled, and sweeps the queue every third beat.
 * - The firer fires the queue's due schedules, each slot once however many firers run.
 *
 * Redis errors never escape these loops: they wait on the `RedisGate` instead.
 *
 * @module
 */

import { parseCron } from "../cron.js";
import { dueMs } from "../schedules.js";
import { nextSlot, slotsBetween, zone } from "../slots.js";
import type { Broker, ClaimResult, Due, FirePlan } from "./broker.js";
import { IdentityTaken, PodGone } from "./broker.js";
import type { ClaimedTask } from "./claimed.js";
import { type Execution, prefetchPart } from "./execution.js";
import { type Flag, sleep, until, waitAny } from "./flag.js";
import { EXIT_BAD_CONFIG, FatalStop, type RedisGate } from "./gate.js";
import { MAX_BATCH } from "./limits.js";
import { logEvent } from "./log.js";
import { isRedisDown } from "./outcomes.js";

/** How much longer than its longest wait an idle worker stays registered for hand-offs. */
export const IDLE_MARGIN_MS = 1000;
/** Sweep calls a heartbeat may make in a row while each finds a full step of work. */
export const SWEEP_MAX_CALLS = 10;
/** Heartbeats between sweeps. */
export const SWEEP_EVERY = 3;

export type ClaimLoopState = "claiming" | "waiting for a slot" | "waiting for work" | "stopped";

export class ClaimLoop {
  state: ClaimLoopState = "claiming";
  private readonly idleMs: number;

  constructor(
    private readonly broker: Broker,
    private readonly execution: Execution,
    private readonly gate: RedisGate,
    private readonly take: (tasks: ClaimedTask[]) => Promise<void>,
    private readonly slotFreed: Flag,
    private readonly draining: Flag,
    private readonly closing: Flag,
    private readonly idleWaitMs: number,
  ) {
    this.idleMs = idleWaitMs + IDLE_MARGIN_MS;
  }

  async run(): Promise<void> {
    const draining = this.draining;
    while (!draining.isSet()) {
      this.state = "claiming";
      const room = Math.min(this.execution.room(), MAX_BATCH);
      if (room <= 0) {
        this.state = "waiting for a slot";
        this.slotFreed.clear();
        if (this.execution.room() <= 0 && !draining.isSet())
          await waitAny([this.slotFreed, draining]);
        continue;
      }
      const asked = performance.now();
      let claimed: ClaimResult;
      const prefetch = prefetchPart(room, this.execution.free());
      try {
        claimed = await this.broker.claim(room, this.idleMs, prefetch);
      } catch (error) {
        if (!isRedisDown(error)) throw error;
        await this.gate.waitOut(error, draining, this.closing);
        continue;
      }
      this.execution.timings.claim((performance.now() - asked) / 1000);
      if (
        prefetch > 0 &&
        claimed.morePending &&
        claimed.retryAfterMs === 0 &&
        claimed.tasks.length <= room - prefetch
      ) {
        // none of the prefetch part though tasks are pending: a fleet-wide max_concurrency
        // drops it, and claiming for it again would only spin: on as without prefetch
        this.execution.prefetchRefused();
      }
      if (claimed.tasks.length > 0) {
        await this.take(claimed.tasks);
        if (draining.isSet()) break;
        if (claimed.tasks.length === room || claimed.morePending) {
          await new Promise((r) => setImmediate(r)); // let the new tasks' handlers start
          continue;
        }
      }
      if (draining.isSet()) continue;
      this.state = "waiting for work";
      await this.waitForWork(claimed);
    }
    this.state = "stopped";
  }

  private async waitForWork(claimed: ClaimResult): Promise<void> {
    if (claimed.retryAfterMs > 0) {
      await sleep(claimed.retryAfterMs, this.draining); // a rate or concurrency limit
      return;
    }
    let wait = this.idleWaitMs;
    if (claimed.nextDueMs !== null) wait = Math.min(wait, Math.max(claimed.nextDueMs, 1));
    let handed: { value: ClaimResult | null } | undefined;
    try {
      handed = await until(this.broker.waitForWork(wait / 1000), this.draining);
    } catch (error) {
      if (!isRedisDown(error)) throw error;
      await this.gate.waitOut(error, this.draining, this.closing);
      return;
    }
    if (handed === undefined) {
      // cut short by the drain: a record it popped meanwhile is lost in transit; the
      // deregistration releases what this worker still holds
      this.broker.dropBlocking();
      return;
    }
    if (handed.value !== null && handed.value.tasks.length > 0) await this.take(handed.value.tasks);
  }
}

/**
 * The stop for a worker whose name another incarnation registered under (its beat or its
 * claim found out): that one took back every task this one held, and running on would run
 * them twice and fight over the name. Logged loudly, exit 2.
 */
export function takenOver(error: IdentityTaken, pod: string, incarnation: string): FatalStop {
  if (error instanceof PodGone) {
    // its tasks were taken back: claiming them again would lose them a second time
    logEvent("error", "pod_gone", {
      pod,
      incarnation,
      note: "this worker's pod was deleted from the Kubernetes API and its tasks taken back; it may not register again and exits without writing anything",
    });
    return new FatalStop(EXIT_BAD_CONFIG);
  }
  logEvent("error", "identity_taken", {
    pod,
    incarnation,
    by: error.holder,
    note: "another worker started under this name and took back its tasks; give each worker its own --pod",
  });
  return new FatalStop(EXIT_BAD_CONFIG);
}

/** Beat until `closing`; throws `FatalStop` if another worker took our name. */
export async function heartbeatLoop(
  broker: Broker,
  execution: Execution,
  gate: RedisGate,
  intervalMs: number,
  flags: { beatNow: Flag; drainRequested: Flag; stopRequested: Flag; closing: Flag },
  pod: string,
  incarnation: string,
): Promise<void> {
  let beats = 0;
  while (!flags.closing.isSet()) {
    flags.beatNow.clear();
    try {
      const reply = await broker.beat(
        execution.leases(),
        execution.held.size,
        flags.drainRequested.isSet(),
        execution.heldSlots.size,
      );
      execution.abandon(reply.lost);
      if (reply.cancelled.length > 0) execution.cancel(reply.cancelled);
      beats += 1;
      if (beats % SWEEP_EVERY === 0 && !flags.drainRequested.isSet()) {
        await broker.sweep(SWEEP_MAX_CALLS);
        // waiting tasks whose dependencies ended without waking them (an older worker)
        const repaired = await broker.repair(SWEEP_MAX_CALLS);
        execution.counters.flowRepairs += repaired.length;
        for (const [task, state] of repaired) {
          logEvent("warning", "flow_repaired", {
            task,
            state,
            note: "its dependencies had ended without waking it",
          });
        }
      }
    } catch (error) {
      if (error instanceof IdentityTaken) throw takenOver(error, pod, incarnation);
      if (!isRedisDown(error)) throw error;
      if (flags.stopRequested.isSet()) return;
      await gate.waitOut(error, flags.stopRequested, flags.closing);
      continue;
    }
    await waitAny([flags.beatNow, flags.closing], intervalMs);
  }
}

/** Schedules one fire call takes at most. */
export const FIRE_BATCH = 500;
/** How long a firer holds the schedules it claimed. */
export const FIRE_LEASE_MS = 10_000;
/** Longest wait between looks at the due set. */
export const FIRE_MAX_WAIT_MS = 1000;
const MAX_SKIPPED_COUNT = 1000;

function latestSlots(
  cron: ReturnType<typeof parseCron>,
  tz: ReturnType<typeof zone>,
  at: number,
  after: number,
  count: number,
): number[] {
  let window = 60;
  for (;;) {
    const lo = Math.max(after, at - window);
    const found = slotsBetween(cron, tz, lo, at, Number.MAX_SAFE_INTEGER);
    if (found.length >= count || lo === after) return count > 0 ? found.slice(-count) : [];
    window *= 4;
  }
}

/** Which slots of `due` to fire at `nowMs` and what comes next (Python's `schedules.plan`). */
export function plan(due: Due, nowMs: number): FirePlan {
  let cron;
  let tz;
  try {
    cron = parseCron(due.cron);
    tz = zone(due.tz);
  } catch {
    return {
      name: due.name,
      rev: due.rev,
      expected: due.nextSlot,
      slots: [],
      skipped: 0,
      nextSlot: null,
      nextDueMs: 0,
    };
  }
  const now = Math.floor(nowMs / 1000);
  const s = due.nextSlot;
  if (s > now)
    return {
      name: due.name,
      rev: due.rev,
      expected: s,
      slots: [],
      skipped: 0,
      nextSlot: s,
      nextDueMs: dueMs(due.name, s, due.jitterMs),
    };
  let following = nextSlot(cron, tz, s);
  let fire = [s];
  let skipped = 0;
  if (following !== null && following <= now) {
    const bound = due.catchup === "all" ? due.catchupLimit : 1;
    const missed = slotsBetween(cron, tz, s - 1, now, bound + MAX_SKIPPED_COUNT);
    if (due.catchup === "all" && missed.length <= bound) {
      fire = missed;
    } else {
      fire = latestSlots(cron, tz, now, s - 1, bound);
      const first = fire[0] ?? now;
      skipped = missed.filter((m) => m < first).length;
    }
    following = nextSlot(cron, tz, fire[fire.length - 1] ?? s);
  }
  const nextDue = following === null ? 0 : dueMs(due.name, following, due.jitterMs);
  return {
    name: due.name,
    rev: due.rev,
    expected: s,
    slots: fire,
    skipped,
    nextSlot: following,
    nextDueMs: nextDue,
  };
}

/** One turn: schedules claimed, and ms until the next is due. */
export async function fireOnce(broker: Broker, batch = FIRE_BATCH): Promise<[number, number]> {
  const claimed = await broker.schedulesDue(batch, FIRE_LEASE_MS);
  let nextDue = claimed.nextDueMs;
  if (claimed.due.length > 0) {
    const plans = claimed.due.map((d) => plan(d, claimed.nowMs));
    await broker.fireSchedules(plans);
    for (const p of plans)
      if (p.nextSlot !== null && (nextDue === null || p.nextDueMs < nextDue)) nextDue = p.nextDueMs;
  }
  const wait = nextDue === null ? FIRE_MAX_WAIT_MS : nextDue - claimed.nowMs;
  return [claimed.due.length, Math.min(Math.max(wait, 0), FIRE_MAX_WAIT_MS)];
}

/** Fire due schedules until a drain begins or the worker closes. */
export async function scheduleLoop(
  broker: Broker,
  gate: RedisGate,
  drainRequested: Flag,
  stopRequested: Flag,
  closing: Flag,
): Promise<void> {
  while (!closing.isSet() && !drainRequested.isSet()) {
    let claimed: number;
    let wait: number;
    try {
      [claimed, wait] = await fireOnce(broker);
    } catch (error) {
      if (!isRedisDown(error)) throw error;
      if (stopRequested.isSet()) return;
      await gate.waitOut(error, stopRequested, closing);
      continue;
    }
    if (claimed >= FIRE_BATCH) continue;
    await sleep(wait, closing, drainRequested);
  }
}
