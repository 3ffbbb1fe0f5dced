/**
 * The worker's runtime file and the `drain` side that reads it: the same files, in the
 * same directory, as the Python worker's (`worker/runtime.py`), so `taskfleet drain` and
 * `taskfleet-node drain` each drain either worker.
 *
 * The worker keeps `$TASKFLEET_RUNTIME_DIR/worker.json` (`{pid, pod, queue, inflight,
 * draining, state, start}`) current; `drain` reads it, sends SIGTERM to that pid (only
 * while the process there has the recorded `/proc` start time, is ours, and its command
 * line is a taskfleet worker's) and, with `--wait`, polls the file until nothing is in
 * flight. Files are replaced atomically (a fresh `O_EXCL|O_NOFOLLOW` 0600 file renamed
 * over), read with `O_NOFOLLOW`, and only when they are ours. `drain` first leaves
 * `drain-waiter.<pid>` so the drained worker outlives it (a worker that is PID 1 takes
 * every process of its namespace with it when it exits).
 *
 * @module
 */

import { randomBytes } from "node:crypto";
import {
  closeSync,
  constants,
  fstatSync,
  lstatSync,
  mkdirSync,
  openSync,
  readFileSync,
  readdirSync,
  readlinkSync,
  renameSync,
  statSync,
  unlinkSync,
  writeSync,
} from "node:fs";
import { basename, dirname, join } from "node:path";

/** The runtime file's name. */
export const FILE_NAME = "worker.json";
/** How often `drain --wait` (and the worker, for waiters) looks. */
export const POLL_INTERVAL_MS = 50;
export const WAITER_PREFIX = "drain-waiter.";
/** Longest a drained worker waits for `drain` processes to exit before it does. */
export const WAITER_GRACE_MS = 5000;

/** What `worker.json` says. */
export interface RuntimeState {
  pid: number;
  pod: string;
  queue: string;
  inflight: number;
  draining: boolean;
  /** starting | running | draining | drained | stopped */
  state: string;
  /** `/proc` start time of pid (null without procfs). */
  start: string | null;
}

/** No worker to drain, or a runtime file that can't be trusted. */
export class DrainError extends Error {}
/** The runtime directory could be written by someone else: not used. */
export class UnsafeRuntimeDir extends Error {}

const uid = (): number => process.geteuid?.() ?? 0;

/** `$XDG_RUNTIME_DIR/taskfleet` if set, else `/tmp/taskfleet-<uid>`. */
export function defaultRuntimeDir(): string {
  const xdg = process.env.XDG_RUNTIME_DIR;
  return xdg !== undefined && xdg !== "" ? join(xdg, "taskfleet") : `/tmp/taskfleet-${uid()}`;
}

function configured(directory: string | undefined): string | undefined {
  if (directory !== undefined && directory !== "") return directory;
  const env = process.env.TASKFLEET_RUNTIME_DIR;
  return env !== undefined && env !== "" ? env : undefined;
}

/**
 * The runtime directory to use (made with mode 0700 if missing and `create`). The default
 * one must be a real directory of ours no one else can write (`UnsafeRuntimeDir`); a
 * configured one is trusted for its location.
 */
export function prepareRuntimeDir(directory: string | undefined, create: boolean): string {
  const given = configured(directory);
  const path = given ?? defaultRuntimeDir();
  if (create) {
    if (given !== undefined) mkdirSync(dirname(path), { recursive: true });
    try {
      mkdirSync(path, { mode: 0o700 });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    }
  }
  if (given !== undefined) return path;
  let info;
  try {
    info = lstatSync(path);
  } catch {
    return path;
  }
  const fix = "remove it or pass --runtime-dir (TASKFLEET_RUNTIME_DIR)";
  if (info.isSymbolicLink())
    throw new UnsafeRuntimeDir(`runtime directory ${path} is a symlink; ${fix}`);
  if (!info.isDirectory())
    throw new UnsafeRuntimeDir(`runtime directory ${path} is not a directory; ${fix}`);
  if (info.uid !== uid()) {
    throw new UnsafeRuntimeDir(
      `runtime directory ${path} belongs to uid ${info.uid}, not to us (uid ${uid()}); ${fix}`,
    );
  }
  if ((info.mode & 0o022) !== 0) {
    const mode = (info.mode & 0o7777).toString(8).padStart(4, "0");
    throw new UnsafeRuntimeDir(
      `runtime directory ${path} is group- or world-writable (mode ${mode}); ${fix}`,
    );
  }
  return path;
}

/** Write `directory/name` through a fresh temp file renamed over it (never through a symlink). */
function writeNew(directory: string, name: string, text: string): void {
  for (;;) {
    const tmp = join(directory, `.${name}.${randomBytes(8).toString("hex")}.tmp`);
    let fd: number;
    try {
      fd = openSync(
        tmp,
        constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
        0o600,
      );
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "EEXIST") continue;
      throw error;
    }
    try {
      writeSync(fd, text);
      closeSync(fd);
      renameSync(tmp, join(directory, name));
    } catch (error) {
      try {
        unlinkSync(tmp);
      } catch {
        // gone already
      }
      throw error;
    }
    return;
  }
}

/** The text of `path`, a regular file of ours, not through a symlink (else it throws). */
function readOwn(path: string): string {
  const fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  try {
    const info = fstatSync(fd);
    if (!info.isFile() || info.uid !== uid()) throw new Error(`${path} is not a file of ours`);
    return readFileSync(fd, "utf8");
  } finally {
    closeSync(fd);
  }
}

/** Write the runtime file (its directory made on first use). */
export function writeState(state: RuntimeState, path: string): void {
  const text = JSON.stringify(state);
  try {
    writeNew(dirname(path), basename(path), text);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error;
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
    writeNew(dirname(path), basename(path), text);
  }
}

/** The state in `path`; null when missing, unreadable, a symlink or not ours. */
export function readState(path: string): RuntimeState | null {
  try {
    const data = JSON.parse(readOwn(path)) as Record<string, unknown>;
    const pid = Number(data.pid);
    if (!Number.isInteger(pid)) return null;
    return {
      pid,
      pod: typeof data.pod === "string" ? data.pod : "",
      queue: typeof data.queue === "string" ? data.queue : "",
      inflight: Number(data.inflight ?? 0) || 0,
      draining: data.draining === true,
      state: typeof data.state === "string" ? data.state : "",
      start:
        typeof data.start === "string"
          ? data.start
          : typeof data.start === "number"
            ? String(data.start)
            : null,
    };
  } catch {
    return null;
  }
}

/** Remove the file if it is still ours (a restarted worker may own it already). */
export function removeState(path: string, pid: number): void {
  if (readState(path)?.pid === pid) {
    try {
      unlinkSync(path);
    } catch {
      // gone already
    }
  }
}

/** PID namespace and start time of a process (`self` or a pid). */
export function procIdentity(pid: number | "self"): { pidns: string | null; start: string | null } {
  let pidns: string | null = null;
  let start: string | null = null;
  try {
    pidns = readlinkSync(`/proc/${pid}/ns/pid`);
  } catch {
    // no procfs, or not ours to read
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    start =
      stat
        .slice(stat.lastIndexOf(")") + 1)
        .trim()
        .split(/\s+/)[19] ?? null;
  } catch {
    // gone
  }
  return { pidns, start };
}

/** `/proc` start time of `pid` (null without procfs or when it is gone). */
export function processStart(pid: number | "self"): string | null {
  return procIdentity(pid).start;
}

/** True if `pid` is a live process; a zombie counts as gone (it holds no task). */
export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "EPERM") return true;
    return false;
  }
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return (
      stat
        .slice(stat.lastIndexOf(")") + 1)
        .trim()
        .split(/\s+/)[0] !== "Z"
    );
  } catch {
    return true;
  }
}

function isWorker(state: RuntimeState): boolean {
  if (!pidAlive(state.pid)) return false;
  if (state.start === null) return true;
  const now = processStart(state.pid);
  return now === null || now === state.start;
}

/** Why `pid` is not a taskfleet worker process of ours (null: it is one, or procfs can't say). */
function notAWorker(pid: number): string | null {
  let owner: number;
  let args: string[];
  try {
    owner = statSync(`/proc/${pid}`).uid;
    args = readFileSync(`/proc/${pid}/cmdline`, "latin1").split("\0");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "ENOENT") {
      try {
        statSync("/proc/self");
        return "it is gone";
      } catch {
        return null;
      }
    }
    return `its /proc entry can't be read (${String(code)})`;
  }
  if (owner !== uid()) return `it belongs to uid ${owner}, not to us`;
  if (args.includes("worker") && args.some((a) => basename(a).startsWith("taskfleet"))) return null;
  const shown = args
    .filter((a) => a !== "")
    .join(" ")
    .slice(0, 120);
  return `its command line is not a taskfleet worker's ('${shown}')`;
}

/** Record this process as one the worker must outlive (before it is signalled). */
export function registerWaiter(directory: string): string | null {
  const name = `${WAITER_PREFIX}${process.pid}`;
  try {
    writeNew(directory, name, JSON.stringify(procIdentity("self")));
  } catch {
    return null;
  }
  return join(directory, name);
}

/** Pids of `drain` processes still running in our PID namespace; files of those gone are removed. */
export function liveWaiters(directory: string): number[] {
  const ownNs = procIdentity("self").pidns;
  const live: number[] = [];
  let entries: string[];
  try {
    entries = readdirSync(directory).filter((e) => e.startsWith(WAITER_PREFIX));
  } catch {
    return [];
  }
  for (const entry of entries) {
    const pid = Number(entry.slice(WAITER_PREFIX.length));
    let recorded: Record<string, unknown>;
    try {
      if (!Number.isInteger(pid)) continue;
      recorded = JSON.parse(readOwn(join(directory, entry))) as Record<string, unknown>;
    } catch {
      continue;
    }
    const ns = recorded.pidns;
    if (ownNs !== null && ns !== null && ns !== undefined && ns !== ownNs) continue;
    const started = recorded.start;
    if (
      pidAlive(pid) &&
      (started === null || started === undefined || procIdentity(pid).start === started)
    ) {
      live.push(pid);
    } else {
      try {
        unlinkSync(join(directory, entry));
      } catch {
        // gone already
      }
    }
  }
  return live;
}

/**
 * SIGTERM the worker named in the runtime file; with `wait`, wait until it holds nothing.
 * Resolves true when it holds no task (or is gone), false at the timeout. It never waits
 * for the worker to exit: a drained worker waits for us instead.
 */
export async function requestDrain(
  path: string,
  wait: boolean,
  timeoutS: number | null,
): Promise<boolean> {
  try {
    const info = lstatSync(path);
    if (info.isSymbolicLink() || info.uid !== uid()) {
      throw new DrainError(
        `runtime file ${path} is a symlink or not ours; not trusting it (no signal sent)`,
      );
    }
  } catch (error) {
    if (error instanceof DrainError) throw error;
  }
  const state = readState(path);
  if (state === null) throw new DrainError(`no worker runtime file at ${path}`);
  if (!isWorker(state)) return true;
  const why = notAWorker(state.pid);
  if (why !== null)
    throw new DrainError(`runtime file ${path} names pid ${state.pid}, but ${why}; no signal sent`);
  registerWaiter(dirname(path));
  try {
    process.kill(state.pid, "SIGTERM");
  } catch {
    return true;
  }
  if (!wait) return true;
  const deadline = timeoutS === null ? null : performance.now() + timeoutS * 1000;
  for (;;) {
    if (!isWorker(state)) return true;
    const current = readState(path);
    if (current?.pid !== state.pid) return true;
    if (current.state === "drained" || current.state === "stopped") return true;
    if (current.draining && current.inflight === 0) return true;
    if (deadline !== null && performance.now() >= deadline) return false;
    await new Promise((r) => setTimeout(r, POLL_INTERVAL_MS));
  }
}
