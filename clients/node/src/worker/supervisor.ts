/**
 * `taskfleet-node worker --processes N`: a small supervisor and N worker processes, as
 * the Python worker's `--processes` (`worker/supervisor.py`). One Node process runs its
 * handlers on one core; a pod with several cores runs several worker processes.
 *
 * The process that was started stays a supervisor: it never opens a connection or loads
 * a handler. It starts N workers (the same command, each told its number through
 * `TASKFLEET_NODE_PROCESS`), restarts one that ends, passes signals on to all of them, and
 * exits once all have drained. Process i is the worker `<pod>#<i>`, with its own
 * incarnation, leases and heartbeats, its runtime file in `<runtime dir>/process-<i>` and
 * its metrics on `--metrics-port + i - 1`; a restarted one registers under the same name
 * and takes back at once what the dead one held. The supervisor's own `worker.json` is
 * what the preStop hook reads: it signals the supervisor, which passes SIGTERM to every
 * process, and waits until the file says `drained`, written once every process exited.
 *
 * What ends it: a drain (exit 0 once every process exited 0, else the first other code);
 * a process exiting 2 (refused configuration: the others drain, exit 2); a crash loop
 * (one process ending more than 5 times in a row, each within 10 s of its start: the
 * others drain, exit with its code). Otherwise a process that ends is restarted: at once
 * after a run of 10 s or more, else after a backoff that doubles per quick exit.
 *
 * @module
 */

import { type ChildProcess, spawn } from "node:child_process";
import { constants } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

import { sleep } from "./flag.js";
import { logEvent } from "./log.js";
import {
  POLL_INTERVAL_MS,
  type RuntimeState,
  WAITER_GRACE_MS,
  liveWaiters,
  processStart,
  removeState,
  writeState,
} from "./runtime.js";

/** The variable that tells a worker process its number (set by the supervisor only). */
export const PROCESS_ENV = "TASKFLEET_NODE_PROCESS";
/** ... and the pod's name its own is made from. */
export const POD_ENV = "TASKFLEET_NODE_POD";
/** Exit code of a worker whose configuration was refused: restarting would not help. */
export const REFUSED = 2;

const BIN = fileURLToPath(new URL("../taskfleet-node.js", import.meta.url));
const FORWARDED = ["SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2"] as const;

/** When a process that ended is restarted, and when the supervisor gives up instead. */
export const CRASH_POLICY = { backoffBaseS: 0.25, backoffMaxS: 8, stableS: 10, limit: 5 };

/** Seconds before the restart after `quickExits` quick exits in a row; null: a crash loop. */
export function restartDelay(quickExits: number): number | null {
  const p = CRASH_POLICY;
  if (quickExits > p.limit) return null;
  if (quickExits <= 1) return 0;
  return Math.min(p.backoffBaseS * 2 ** (quickExits - 2), p.backoffMaxS);
}

/** Where process `index` keeps its own `worker.json`. */
export function childRuntimeDir(runtimeDir: string, index: number): string {
  return join(runtimeDir, `process-${index}`);
}

interface Slot {
  readonly index: number;
  child: ChildProcess | null;
  started: number;
  quickExits: number;
  timer: NodeJS.Timeout | null;
}

export interface SupervisorOptions {
  readonly processes: number;
  /** The worker command's arguments, passed on to every process. */
  readonly args: readonly string[];
  readonly pod: string;
  readonly queue: string;
  readonly runtimeDir: string;
  /** A signal came before the supervisor could take it: drain at once. */
  readonly early: boolean;
}

/** Run the processes until they all drained; resolves to the exit code. */
export async function supervise(o: SupervisorOptions): Promise<number> {
  const slots: Slot[] = Array.from({ length: o.processes }, (_, i) => ({
    index: i + 1,
    child: null,
    started: 0,
    quickExits: 0,
    timer: null,
  }));
  const file = join(o.runtimeDir, "worker.json");
  const state: RuntimeState = {
    pid: process.pid,
    pod: o.pod,
    queue: o.queue,
    inflight: 0,
    draining: false,
    state: "running",
    start: processStart(process.pid),
  };
  let draining = false;
  const outcome: { code: number | null } = { code: null };
  let finish: () => void = () => undefined;
  const finished = new Promise<void>((resolve) => (finish = resolve));

  const live = (): Slot[] => slots.filter((s) => s.child !== null);
  const write = (now: string): void => {
    state.state = now;
    state.draining = now === "draining" || now === "drained";
    state.inflight = live().length;
    try {
      writeState(state, file);
    } catch {
      // the hook then finds an older file: it waits for the process to go
    }
  };
  const signalAll = (signal: NodeJS.Signals): void => {
    for (const slot of live()) slot.child?.kill(signal);
  };
  const beginDrain = (exitCode: number | null): void => {
    draining = true;
    if (exitCode !== null) outcome.code ??= exitCode;
    for (const slot of slots) {
      if (slot.timer !== null) clearTimeout(slot.timer);
      slot.timer = null;
    }
    signalAll("SIGTERM");
    write("draining");
    if (live().length === 0) finish();
  };
  const start = (slot: Slot): void => {
    slot.timer = null;
    const child = spawn(process.execPath, [...process.execArgv, BIN, "worker", ...o.args], {
      stdio: "inherit",
      env: { ...process.env, [PROCESS_ENV]: String(slot.index), [POD_ENV]: o.pod },
    });
    slot.child = child;
    slot.started = performance.now();
    logEvent("info", "process_started", { process: slot.index, pid: child.pid ?? null });
    write(state.state);
    child.once("exit", (exitCode, signal) => {
      ended(slot, exitCode ?? 128 + (signal === null ? 0 : constants.signals[signal]));
    });
  };
  const ended = (slot: Slot, exitCode: number): void => {
    const ran = (performance.now() - slot.started) / 1000;
    slot.child = null;
    logEvent(draining && exitCode === 0 ? "info" : "warning", "process_exited", {
      process: slot.index,
      code: exitCode,
      ran_s: Math.round(ran * 1000) / 1000,
    });
    write(state.state);
    if (draining) {
      if (exitCode !== 0) outcome.code ??= exitCode;
      if (live().length === 0) finish();
      return;
    }
    if (exitCode === REFUSED) {
      logEvent("error", "process_refused", { process: slot.index });
      beginDrain(REFUSED);
      return;
    }
    slot.quickExits = ran < CRASH_POLICY.stableS ? slot.quickExits + 1 : 1;
    const delay = restartDelay(slot.quickExits);
    if (delay === null) {
      logEvent("error", "crash_loop", { process: slot.index, exits: slot.quickExits });
      beginDrain(exitCode === 0 ? 1 : exitCode);
      return;
    }
    logEvent("info", "process_restart", { process: slot.index, in_s: delay });
    slot.timer = setTimeout(() => {
      start(slot);
    }, delay * 1000);
  };

  const onStop = (signal: NodeJS.Signals): void => {
    if (!draining) {
      logEvent("info", "supervisor_drain", { signal });
      beginDrain(null);
    } else {
      signalAll(signal); // a second signal: every process hands back at once
    }
  };
  const onForward = (signal: NodeJS.Signals): void => {
    signalAll(signal);
  };
  process.on("SIGTERM", onStop);
  process.on("SIGINT", onStop);
  for (const signal of FORWARDED) process.on(signal, onForward);

  logEvent("info", "supervisor_started", { processes: o.processes });
  write("running");
  if (o.early) beginDrain(null);
  else for (const slot of slots) start(slot);
  await finished;
  write("drained");
  const deadline = performance.now() + WAITER_GRACE_MS;
  while (liveWaiters(o.runtimeDir).length > 0 && performance.now() < deadline)
    await sleep(POLL_INTERVAL_MS);
  removeState(file, process.pid);
  const exit = outcome.code ?? 0;
  logEvent("info", "supervisor_exited", { code: exit });
  return exit;
}
