/**
 * `Worker`: runs one queue's tasks with `concurrency` slots until drained, on the same
 * scripts and with the same drain as the Python worker (`worker/core.py`).
 *
 * One event loop runs the claim loop, the handlers' runs, the outbox's flush loop, the
 * heartbeat, the report loop and the schedule firer. Claims may take more tasks than the
 * free slots (`prefetch`, execution.ts): those wait held, and a slot whose handler
 * returned starts one at once. A drain (`drain()`, or SIGTERM in the CLI): stop claiming
 * and firing, beat at once with the draining flag (which also releases hand-offs not
 * popped), give back the prefetched tasks not begun (not an attempt), let running tasks
 * finish until the drain deadline,
 * then abort the rest and release them (not an attempt), write what finished, deregister
 * and resolve 0. A second `drain()` skips to the release at once. Every Redis call on the
 * way out is bounded, so an unreachable Redis never holds the exit: the tasks then come
 * back through their leases.
 *
 * @module
 */

import { randomBytes } from "node:crypto";

import { type Client, connect } from "../connection.js";
import { ping } from "../protocol/server.js";
import { parseRedisURL } from "../redisurl.js";
import { configuredNow, loadApi } from "../tracing.js";
import { Broker, IdentityTaken } from "./broker.js";
import type { ClaimedTask } from "./claimed.js";
import { Execution, PREFETCH_MAX_WAIT_MS, Run } from "./execution.js";
import { formatError } from "./failures.js";
import { Flag, bounded, sleep, waitAny } from "./flag.js";
import { FatalStop, RedisGate } from "./gate.js";
import type { Progress } from "./context.js";
import { Listeners, type WorkerEvents } from "./events.js";
import { type HandlerFn, HandlerSet } from "./handlers.js";
import { EXIT_SLOTS_STUCK, heldLoop } from "./held.js";
import { defaultPodName, encodeWhereabouts, localWhereabouts } from "./identity.js";
import { logEvent } from "./log.js";
import { ClaimLoop, heartbeatLoop, scheduleLoop, takenOver } from "./loops.js";
import { Outbox, OutcomeWriter, Reports, reportLoop } from "./outcomes.js";
import { type Pauses, coveredRuns } from "./pauses.js";
import { RuntimeFile } from "./runtimefile.js";
import {
  FILE_NAME,
  POLL_INTERVAL_MS,
  WAITER_GRACE_MS,
  liveWaiters,
  processStart,
  removeState,
} from "./runtime.js";
import { type Settings, type WorkerOptions, checkSettings, replyTimeoutMs } from "./settings.js";
import { checkEviction, heartbeatInterval, register } from "./start.js";
import { Summary } from "./summary.js";

/** How long a release may take before the worker goes on exiting (leases expire instead). */
export const RELEASE_TIMEOUT_MS = 3000;
/** How long the loops get to end, and the last outcomes to be written, at exit. */
export const LOOPS_GRACE_MS = 5000;
export const FINAL_FLUSH_MS = 3000;
export const DEREGISTER_TIMEOUT_MS = 2000;

/** The worker's run-state, as `worker.json` says it. */
export type WorkerState = "starting" | "running" | "draining" | "drained" | "stopped";

/**
 * Runs one queue's tasks until drained.
 *
 * ```ts
 * const worker = new Worker("images", {
 *   handler: async (payload, task) => { task.progress(0.5); return { ok: true }; },
 *   concurrency: 4,
 * });
 * process.once("SIGTERM", () => worker.drain());
 * process.exitCode = await worker.run();
 * ```
 */
export class Worker<Payload = Record<string, unknown>, Result = unknown> {
  readonly settings: Settings;
  readonly handlers: HandlerSet;
  readonly execution: Execution;
  private readonly summary: Summary;
  readonly gate: RedisGate;
  readonly reports = new Reports();
  /** The server's maxmemory-policy read at start (null: not known). */
  evictionPolicy: string | null = null;
  private client: Client | null = null;
  private broker: Broker | null = null;
  private readonly outbox: Outbox;
  private readonly slotFreed = new Flag();
  private readonly beatNow = new Flag();
  private readonly drainRequested = new Flag();
  private readonly stopRequested = new Flag();
  private readonly closing = new Flag();
  private claims: ClaimLoop | null = null;
  private state: WorkerState = "starting";
  private readonly runtimeFile: RuntimeFile | null;
  private fatal: FatalStop | null = null;
  private ran = false;
  private readonly listeners = new Listeners();

  /** A worker of `queue`; throws `InvalidArgument` (one line) for options it can't use. */
  constructor(
    queue: string,
    options: WorkerOptions<Payload, Result> & { readonly handlerSet?: HandlerSet },
  ) {
    this.settings = checkSettings(
      queue,
      options,
      options.pod ?? defaultPodName(),
      randomBytes(6).toString("hex"),
    );
    // a typed handler takes the payload its producers send: HandlerSet calls it with that
    this.handlers =
      options.handlerSet ??
      HandlerSet.of(
        options.handler as HandlerFn | undefined,
        options.handlers as Readonly<Record<string, HandlerFn>> | undefined,
      );
    const s = this.settings;
    this.gate = new RedisGate({
      reconnect: () => this.reconnect(),
      reachable: () => {
        this.beatNow.set();
      },
      writable: async () => {
        await this.broker?.writable();
      },
      backoffBaseMs: s.backoffBase * 1000,
      backoffMaxMs: s.backoffMax * 1000,
    });
    this.outbox = new Outbox(
      (batch) => this.writer().write(batch),
      this.gate,
      this.stopRequested,
      () => this.execution.waitingCount > 0,
    );
    this.execution = new Execution({
      queue: s.queue,
      pod: s.pod,
      incarnation: s.incarnation,
      concurrency: s.concurrency,
      prefetch: s.prefetch,
      defaultTimeout: s.taskTimeout,
      handlers: this.handlers,
      outbox: this.outbox,
      slotFreed: this.slotFreed,
      changed: () => this.runtimeFile?.changed(),
      report: (id, token, progress, cost) => {
        this.reports.add(id, token, progress, cost);
        if (progress !== null && this.listeners.count > 0) this.emitProgress(id, progress);
      },
      flows: {
        addChildren: async (parent, token, batch) =>
          this.registered().addChildren(parent, token, batch),
        dependencyResults: async (taskId, after) =>
          this.registered().dependencyResults(taskId, after),
        checkpoint: async (taskId, token, state, keep) =>
          this.registered().checkpoint(taskId, token, state, keep),
        emit: async (taskId, token, kind, data) =>
          this.registered().emit(taskId, token, kind, data),
      },
      providerQuotas: {
        settle: async (taskId, token, quota, used) =>
          this.registered().settle(taskId, token, quota, used),
        pause: async (quota, pauseMs, reason) =>
          this.registered().pauseProviderQuota(quota, pauseMs, reason),
      },
      reportQuota: (taskId, _token, pauseMs, group, reason) => {
        this.reports.addQuota({ taskId, pauseMs, group, reason });
      },
      listeners: this.listeners,
      waitingDrained: () => {
        this.outbox.ready.set();
      },
    });
    this.summary = new Summary(
      this.execution.counters,
      () => this.execution.held.size,
      () => this.execution.heldSlots.size,
    );
    this.runtimeFile =
      s.runtimeDir === null
        ? null
        : new RuntimeFile(
            `${s.runtimeDir}/${FILE_NAME}`,
            () => [this.state, this.drainRequested.isSet(), this.execution.held.size],
            {
              pid: process.pid,
              start: processStart(process.pid),
              pod: s.pod,
              queue: s.queue,
            },
          );
  }

  /**
   * Listen to this worker's events (`completed`, `failed`, `progress`, `drained`, ...;
   * `WorkerEvents` lists them, events.ts says when each comes). A listener that throws is
   * logged (`listener_failed`) and ignored: the worker and the task's outcome go on.
   */
  on<E extends keyof WorkerEvents<Payload, Result>>(
    event: E,
    listener: (...args: WorkerEvents<Payload, Result>[E]) => unknown,
  ): this {
    this.listeners.add(event, listener, false);
    return this;
  }

  /** `on`, for the next emit of `event` only. */
  once<E extends keyof WorkerEvents<Payload, Result>>(
    event: E,
    listener: (...args: WorkerEvents<Payload, Result>[E]) => unknown,
  ): this {
    this.listeners.add(event, listener, true);
    return this;
  }

  /** Remove a listener `on` or `once` added. */
  off<E extends keyof WorkerEvents<Payload, Result>>(
    event: E,
    listener: (...args: WorkerEvents<Payload, Result>[E]) => unknown,
  ): this {
    this.listeners.remove(event, listener);
    return this;
  }

  /** How many listeners `event` has. */
  listenerCount(event: keyof WorkerEvents<Payload, Result>): number {
    return this.listeners.listenerCount(event);
  }

  private emitProgress(taskId: string, progress: string): void {
    const context = this.execution.held.get(taskId)?.context;
    if (context === null || context === undefined) return;
    this.listeners.emit("progress", context, JSON.parse(progress) as Progress);
  }

  /** Whether a drain was asked for. */
  get draining(): boolean {
    return this.drainRequested.isSet();
  }

  /** What this worker did so far. */
  get counters(): Execution["counters"] {
    return this.execution.counters;
  }

  /**
   * Stop claiming, finish what fits before the drain deadline, hand back the rest, exit
   * (`run()` resolves). A second call while draining hands back at once.
   */
  drain(): void {
    const held = this.execution.held.size;
    if (this.drainRequested.isSet()) {
      if (!this.stopRequested.isSet()) {
        logEvent("warning", "drain_forced", { inflight: held });
        this.stopRequested.set();
      }
      return;
    }
    logEvent("info", "drain_started", {
      inflight: held,
      drain_timeout_s: this.settings.drainTimeout,
    });
    this.drainRequested.set();
    this.execution.stopStarting();
    this.beatNow.set();
    this.slotFreed.set();
    this.setState("draining");
  }

  /** Every slot is stuck (`held.ts`): drain what is left, then exit for a restart. */
  private slotsStuck(): void {
    this.fatal ??= new FatalStop(EXIT_SLOTS_STUCK);
    this.drainRequested.set();
    this.execution.stopStarting();
    this.beatNow.set();
    this.slotFreed.set();
    this.setState("draining");
  }

  private setState(state: WorkerState): void {
    this.state = state;
    this.runtimeFile?.changed();
  }

  private registered(): Broker {
    if (this.broker === null) throw new Error("the worker is not registered");
    return this.broker;
  }

  private writer(): OutcomeWriter {
    return new OutcomeWriter(
      this.registered(),
      this.execution,
      this.reports,
      (tasks) => this.take(tasks),
      () => this.mayClaim(),
      this.slotFreed,
      (pauses) => this.paused(pauses),
    );
  }

  /**
   * Claim pauses written (RateLimited, reportQuota): give back the runs held before their
   * call that they cover (`coveredRuns`), then end the hold.
   */
  private async paused(pauses: Pauses): Promise<void> {
    try {
      const byId = this.execution.held;
      const runs = await coveredRuns(
        this.execution.heldRuns(),
        pauses,
        (id) => byId.get(id)?.task.group,
        (ids) => this.registered().groupsOf(ids),
      );
      const held = this.execution.withdrawHeld(runs);
      await this.release(held, true); // held before their call: none began
      this.execution.forget(held); // released, or left to their leases: not ours now
    } finally {
      this.execution.resumeHold();
    }
  }

  private mayClaim(): boolean {
    return !this.drainRequested.isSet() && this.claims?.state !== "waiting for work";
  }

  /** Start claimed tasks, or hand them straight back if a drain began meanwhile. */
  private async take(tasks: ClaimedTask[]): Promise<void> {
    if (this.drainRequested.isSet()) {
      const now = performance.now();
      await this.release(
        tasks.map((t) => new Run(t, now, null)),
        true,
      );
      return;
    }
    this.execution.admit(tasks);
  }

  /**
   * Prefetched tasks no slot began, given back unstarted (not an attempt); if Redis is
   * down their leases expire instead. Either way they are not this worker's any more.
   */
  private async withdraw(runs: Run[]): Promise<void> {
    if (runs.length === 0) return;
    await this.release(runs, true);
    this.execution.forget(runs);
  }

  /** Loop: give back prefetched tasks that waited PREFETCH_MAX_WAIT_MS for a slot. */
  private async prefetchGuard(): Promise<void> {
    while (!this.drainRequested.isSet()) {
      await sleep(PREFETCH_MAX_WAIT_MS / 2, this.drainRequested);
      if (this.drainRequested.isSet()) return; // the drain withdraws what still waits
      const late = this.execution.waitedSince(performance.now() - PREFETCH_MAX_WAIT_MS);
      if (late.length === 0) continue;
      const runs = this.execution.withdrawWaiting(late);
      this.execution.prefetchWaitedTooLong();
      logEvent("info", "prefetch_withdrawn", {
        tasks: runs.length,
        waited_s: PREFETCH_MAX_WAIT_MS / 1000,
        note: "every slot is busy with long runs",
      });
      await this.withdraw(runs);
    }
  }

  /**
   * Give unfinished tasks back (not an attempt); if Redis is down, their leases expire
   * instead. `unstarted`: no handler began them (their history gets no record).
   */
  private async release(runs: Run[], unstarted = false): Promise<void> {
    if (this.broker === null || runs.length === 0) return;
    const items = runs.map((r): [string, string] => [r.task.id, r.task.token]);
    let released: number;
    try {
      released = await bounded(
        this.broker.release(items, unstarted),
        RELEASE_TIMEOUT_MS,
        () => new Error(`no reply within ${RELEASE_TIMEOUT_MS / 1000} s`),
      );
    } catch (error) {
      logEvent("warning", "release_failed", {
        tasks: items.length,
        error: formatError(error),
        note: "leases expire and the tasks are taken back",
      });
      return;
    }
    this.execution.counters.released += released;
    for (const run of runs) logEvent("info", "task_released", { task: run.task.id });
    this.execution.forget(runs);
  }

  private async reconnect(): Promise<void> {
    const client = this.client;
    if (client === null) return;
    const ms = replyTimeoutMs(this.settings);
    this.broker?.dropBlocking();
    await bounded(ping(client), ms, () => new Error(`no reply from Redis within ${ms / 1000} s`));
  }

  /** Serve until drained; resolves to the process exit code (0 after a drain). */
  async run(): Promise<number> {
    if (this.ran) throw new Error("a Worker runs once");
    this.ran = true;
    const s = this.settings;
    const url = parseRedisURL(s.redisUrl);
    this.client = connect(url);
    const whereabouts = localWhereabouts(s.heartbeatInterval);
    const broker = new Broker(s.queue, this.client, s.pod, s.incarnation, {
      replyTimeoutMs: replyTimeoutMs(s),
      host: encodeWhereabouts(whereabouts),
      served: this.handlers.served,
      waitReplicas: url.waitReplicas,
      waitTimeoutMs: url.waitTimeoutMs,
    });
    this.broker = broker;
    this.setState("starting");
    // as the Python worker: traced when a provider is registered by now (handlers imported)
    if ((await loadApi()) !== null) this.execution.traced = configuredNow();
    const gated = { gate: this.gate, drain: this.drainRequested, closing: this.closing };
    try {
      let interval: number;
      try {
        this.evictionPolicy = await checkEviction(this.client, s, gated);
        await register(broker, s, whereabouts, gated);
        interval = await heartbeatInterval(this.client, broker.keys, s, gated);
      } catch (error) {
        if (error instanceof FatalStop) return error.code;
        throw error;
      }
      if (this.drainRequested.isSet()) return await this.shutdown([]);
      this.setState(this.drainRequested.isSet() ? "draining" : "running");
      logEvent("info", "worker_started", {
        queue: s.queue,
        pod: s.pod,
        incarnation: s.incarnation,
        concurrency: s.concurrency,
        prefetch: s.prefetch,
        handler: this.handlers.ref,
        pid: process.pid,
      });
      this.summary.start();
      const flags = {
        beatNow: this.beatNow,
        drainRequested: this.drainRequested,
        stopRequested: this.stopRequested,
        closing: this.closing,
      };
      const background = [
        track(
          heartbeatLoop(
            broker,
            this.execution,
            this.gate,
            interval * 1000,
            flags,
            s.pod,
            s.incarnation,
          ),
        ),
        track(this.outbox.serve(this.closing)),
        track(
          reportLoop(broker, this.reports, this.gate, this.closing, this.stopRequested, (pauses) =>
            this.paused(pauses),
          ),
        ),
      ];
      background.push(
        track(
          heldLoop(this.execution, this.drainRequested, {
            concurrency: s.concurrency,
            graceS: s.heldGrace,
            intervalMs: Math.min(interval, s.heldGrace) * 1000,
            stuck: () => {
              this.slotsStuck();
            },
          }),
        ),
      );
      if (s.prefetch > 0) background.push(track(this.prefetchGuard()));
      if (s.fireSchedules)
        background.push(
          track(
            scheduleLoop(broker, this.gate, this.drainRequested, this.stopRequested, this.closing),
          ),
        );
      this.claims = new ClaimLoop(
        broker,
        this.execution,
        this.gate,
        (t) => this.take(t),
        this.slotFreed,
        this.drainRequested,
        this.closing,
        s.idleWait * 1000,
      );
      const claimer = track(this.claims.run());
      const ended = new Flag();
      for (const t of [claimer, ...background]) {
        void t.promise.finally(() => {
          ended.set();
        });
      }
      await waitAny([this.drainRequested, ended]);
      const failure = [claimer, ...background].find((t) => t.error !== undefined)?.error;
      if (failure === undefined) {
        await claimer.promise;
        const still = [claimer, ...background].find((t) => t.error !== undefined)?.error;
        if (still === undefined) return await this.shutdown(background);
        return await this.failed(still, claimer, background);
      }
      return await this.failed(failure, claimer, background);
    } finally {
      await this.gate.close();
      const client = this.client;
      await bounded(client.quit(), 1000, () => new Error("quit")).catch(() => undefined);
      client.disconnect();
      this.state = "stopped";
      this.runtimeFile?.write();
      this.runtimeFile?.close();
      if (this.runtimeFile !== null) removeState(this.runtimeFile.path, process.pid);
    }
  }

  private async failed(failure: unknown, claimer: Tracked, background: Tracked[]): Promise<number> {
    // a claim found this process replaced: as when its heartbeat does
    if (failure instanceof IdentityTaken)
      failure = takenOver(failure, this.settings.pod, this.settings.incarnation);
    if (failure instanceof FatalStop)
      return await this.stopAtOnce(failure, [claimer, ...background]);
    // A bug, not an outage: give everything back at once, as lost (a task that caused it is bounded by max_lost).
    logEvent("error", "worker_failed", { error: formatError(failure) });
    if (this.listeners.count > 0) this.listeners.emit("error", failure);
    this.drainRequested.set();
    this.stopRequested.set();
    this.slotFreed.set();
    await bounded(claimer.promise, LOOPS_GRACE_MS, () => new Error("claim loop")).catch(
      () => undefined,
    );
    await this.shutdown(
      background.filter((t) => !t.done),
      true,
    );
    return 1;
  }

  /** Wait for in-flight tasks up to the drain deadline, release the rest, deregister. */
  private async shutdown(background: Tracked[], failed = false): Promise<number> {
    const broker = this.broker as Broker;
    const deadline = performance.now() + this.settings.drainTimeout * 1000;
    // prefetched tasks no slot began go back now, for a worker that stays
    this.execution.stopStarting();
    await this.withdraw(this.execution.withdrawWaiting());
    await waitAny(
      [this.execution.idle, this.stopRequested],
      Math.max(0, deadline - performance.now()),
    );
    const leftover = this.execution.abandonUnfinished();
    this.closing.set();
    this.outbox.ready.set();
    broker.dropBlocking();
    if (background.length > 0) await waitAny([allDone(background)], LOOPS_GRACE_MS);
    try {
      await bounded(
        this.outbox.flush(this.closing),
        FINAL_FLUSH_MS,
        () => new Error("final flush"),
      );
    } catch (error) {
      if (
        !(error instanceof FatalStop) &&
        !(error instanceof Error && error.message === "final flush")
      ) {
        logEvent("warning", "final_flush_failed", { error: formatError(error) });
      }
    }
    if (leftover.length > 0 && !failed) await this.release(leftover);
    try {
      const givenBack = await bounded(
        broker.deregister(failed),
        DEREGISTER_TIMEOUT_MS,
        () => new Error(`no reply within ${DEREGISTER_TIMEOUT_MS / 1000} s`),
      );
      if (failed) this.counters.lost += givenBack;
    } catch (error) {
      logEvent("warning", "deregister_failed", { error: formatError(error) });
    } finally {
      broker.close();
    }
    this.summary.stop();
    const c = this.counters;
    logEvent("info", "worker_stopped", {
      completed: c.completed,
      failed: c.failed,
      released: c.released,
      lost: c.lost,
    });
    this.state = "drained";
    this.runtimeFile?.write();
    await this.outliveDrainWaiters();
    if (this.listeners.count > 0) this.listeners.emit("drained");
    const fatal = this.fatal ?? this.gate.fatal;
    return fatal === null ? 0 : fatal.code;
  }

  /** Stop without a drain: Redis refused us, or our name was taken over. Nothing is written. */
  private async stopAtOnce(stop: FatalStop, tasks: Tracked[]): Promise<number> {
    this.fatal = stop;
    this.drainRequested.set();
    this.stopRequested.set();
    this.closing.set();
    this.slotFreed.set();
    this.outbox.ready.set();
    this.broker?.close();
    await waitAny([allDone(tasks)], LOOPS_GRACE_MS);
    this.execution.abandonUnfinished();
    this.summary.stop();
    const c = this.counters;
    logEvent("info", "worker_stopped", {
      completed: c.completed,
      failed: c.failed,
      released: c.released,
      lost: c.lost,
      exit_code: stop.code,
    });
    return stop.code;
  }

  /** Let `drain` processes see `drained` and exit before we do (bounded). */
  private async outliveDrainWaiters(): Promise<void> {
    if (this.runtimeFile === null) return;
    const directory = this.settings.runtimeDir as string;
    const deadline = performance.now() + WAITER_GRACE_MS;
    while (liveWaiters(directory).length > 0) {
      if (performance.now() >= deadline) {
        logEvent("warning", "drain_waiters_left", { waited_s: WAITER_GRACE_MS / 1000 });
        return;
      }
      await sleep(POLL_INTERVAL_MS);
    }
  }
}

interface Tracked {
  promise: Promise<void>;
  done: boolean;
  error: unknown;
}

function track(promise: Promise<void>): Tracked {
  const t: Tracked = { promise, done: false, error: undefined };
  t.promise = promise.then(
    () => {
      t.done = true;
    },
    (error: unknown) => {
      t.done = true;
      t.error = error ?? new Error("a loop failed without an error");
    },
  );
  return t;
}

function allDone(tasks: readonly Tracked[]): Flag {
  const flag = new Flag();
  void Promise.all(tasks.map((t) => t.promise)).then(() => {
    flag.set();
  });
  return flag;
}
