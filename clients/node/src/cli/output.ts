/**
 * What the everyday commands share: positional arguments beside options, the queue opened
 * for one command, and output in the Python CLI's forms (its JSON field names, its
 * terminal-safe text).
 *
 * @module
 */

import { BadInput, Failure, type Opt, type Values, parseArgs } from "../cli.js";
import { InvalidArgument, InvalidRedisURL } from "../errors.js";
import { Queue } from "../queue.js";
import type { Attempt, Task } from "../tasks.js";
import { probeServer } from "../protocol/serverprobe.js";

export const PROG = "taskfleet-node";
export const DEFAULT_REDIS_URL = "redis://localhost:6379/0";

/** `--redis-url` as every command takes it. */
export const REDIS_OPTION: Opt = {
  name: "redis-url",
  kind: "string",
  env: "TASKFLEET_REDIS_URL",
  help: "Redis to use; a password in it is never printed [default: redis://localhost:6379/0].",
};
export const JSON_OPTION: Opt = { name: "json", kind: "flag", help: "Machine-readable output." };
export const HELP_OPTION: Opt = { name: "help", kind: "flag", help: "Show this message and exit." };

/** Options and positional arguments of `args`: `[values, positionals]`. */
export function parseCommand(args: readonly string[], opts: readonly Opt[]): [Values, string[]] {
  const byName = new Map(opts.map((o) => [o.name, o]));
  const optionArgs: string[] = [];
  const positionals: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i] as string;
    if (arg === "--") {
      positionals.push(...args.slice(i + 1));
      break;
    }
    if (!arg.startsWith("--") || arg === "-") {
      positionals.push(arg);
      continue;
    }
    optionArgs.push(arg);
    const name = arg.slice(2).split("=")[0] as string;
    const kind = byName.get(name)?.kind;
    if (
      !arg.includes("=") &&
      kind !== undefined &&
      kind !== "flag" &&
      kind !== "bool" &&
      i + 1 < args.length
    ) {
      optionArgs.push(args[i + 1] as string);
      i += 1;
    }
  }
  return [parseArgs(optionArgs, opts), positionals];
}

/** Exactly `names.length` positionals (the last `optional` of them may be left out). */
export function positionals(
  given: readonly string[],
  names: readonly string[],
  optional = 0,
): (string | undefined)[] {
  if (given.length < names.length - optional)
    throw new BadInput(`missing argument '${names[given.length] ?? ""}'`);
  if (given.length > names.length)
    throw new BadInput(`got unexpected extra argument (${given[names.length] ?? ""})`);
  return names.map((_, i) => given[i]);
}

/** The queue of a command, or `BadInput` for a name or URL no queue can have. */
export function openQueue(name: string, values: Values): Queue {
  const url = (values["redis-url"] as string | undefined) ?? DEFAULT_REDIS_URL;
  try {
    return new Queue(name, { redisUrl: url });
  } catch (error) {
    if (error instanceof InvalidRedisURL) {
      throw new BadInput(
        `invalid value for --redis-url: not a Redis URL taskfleet can use: ${error.message}; expected ` +
          "redis://[[user]:password@]host[:port][/db], rediss://... or unix:///path",
      );
    }
    if (error instanceof InvalidArgument) throw new BadInput(error.message);
    throw error;
  }
}

/** `url` with its password masked and its query dropped (never the secret, whatever it holds). */
export function redactRedisURL(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== "") parsed.password = "***";
    parsed.search = "";
    return parsed.toString();
  } catch {
    return "<unparseable redis URL>";
  }
}

/** A Redis error as the Python CLI words it: credentials or rights refused (exit 2), Redis unreachable (exit 1). */
export function redisFailure(error: unknown, url: string): unknown {
  if (!(error instanceof Error) || error instanceof BadInput || error instanceof Failure)
    return error;
  const where = redactRedisURL(url);
  const message = error.message;
  if (/^(WRONGPASS|NOAUTH)/.test(message)) {
    return new BadInput(
      `Redis at ${where} refused the credentials (${message}); check the user and password of --redis-url (TASKFLEET_REDIS_URL)`,
    );
  }
  if (/^NOPERM/.test(message)) {
    return new BadInput(
      `Redis at ${where} refused a command for this user (${message}); the user needs the queue's keys and scripting`,
    );
  }
  const code = (error as { code?: unknown }).code;
  if (
    error.name === "MaxRetriesPerRequestError" ||
    (typeof code === "string" && /^E[A-Z]+$/.test(code)) ||
    /Connection is closed/.test(message)
  ) {
    return new Failure(`cannot reach Redis at ${where}: ${message}`);
  }
  return error;
}

/** Run `body` on the queue named `name`, closed after; with `existing`, a queue with nothing stored fails (exit 1). */
export async function withQueue<T>(
  name: string,
  values: Values,
  existing: boolean,
  body: (q: Queue) => Promise<T>,
): Promise<T> {
  const q = openQueue(name, values);
  try {
    if (existing && !(await q.exists())) {
      const where = redactRedisURL(
        (values["redis-url"] as string | undefined) ?? DEFAULT_REDIS_URL,
      );
      throw new Failure(
        `queue '${name}' not found at ${where}: nothing of it is stored (no config, counters or workers); check the name and --redis-url`,
      );
    }
    return await body(q);
  } catch (error) {
    throw redisFailure(error, (values["redis-url"] as string | undefined) ?? DEFAULT_REDIS_URL);
  } finally {
    await q.close();
  }
}

/**
 * The server's maxmemory-policy: CONFIG GET, else INFO memory (managed services refuse
 * CONFIG); null if neither says. `stats` warns when it may delete tasks.
 */
export async function evictionPolicy(q: Queue): Promise<string | null> {
  try {
    return (await probeServer(q.client)).evictionPolicy;
  } catch {
    return null;
  }
}

/** One line written to stdout. */
export function out(line: string): void {
  process.stdout.write(`${line}\n`);
}

/** One line written to stderr. */
export function note(line: string): void {
  process.stderr.write(`${line}\n`);
}

// eslint-disable-next-line no-control-regex -- control characters are what it finds
const UNSHOWABLE = /[\u0000-\u001f\u007f-\u009f\u202a-\u202e\u2066-\u2069]/g;

/** Stored text as a terminal shows it safely: control characters as escapes, on one line (Python's `terminal_safe`). */
export function terminalSafe(text: string): string {
  return text.replace(UNSHOWABLE, (c) => {
    const code = c.charCodeAt(0);
    return code < 0x100
      ? `\\x${code.toString(16).padStart(2, "0")}`
      : `\\u${code.toString(16).padStart(4, "0")}`;
  });
}

/** JSON with keys sorted at every level, as Python's `json.dumps(..., sort_keys=True)` (with its ", " and ": "). */
export function pyJson(value: unknown, sortKeys = true): string {
  if (value === null || value === undefined) return "null";
  if (Array.isArray(value)) return `[${value.map((v) => pyJson(v, sortKeys)).join(", ")}]`;
  if (typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>);
    if (sortKeys) entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${asciiJson(k)}: ${pyJson(v, sortKeys)}`).join(", ")}}`;
  }
  if (typeof value === "string") return asciiJson(value);
  return JSON.stringify(value);
}

function asciiJson(text: string): string {
  return JSON.stringify(text).replace(
    /[\u007f-\uffff]/g,
    (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
  );
}

function iso(date: Date | null): string | null {
  // pydantic's JSON form of a UTC time: microseconds, "Z"
  return date === null ? null : date.toISOString().replace(/\.(\d{3})Z$/, ".$1000Z");
}

/** A task as the Python CLI's `--json` shows it (its model's field names). */
export function taskJson(t: Task): Record<string, unknown> {
  return {
    id: t.id,
    state: t.state,
    name: t.name,
    payload: t.payload,
    priority: t.priority,
    attempts: t.attempts,
    max_attempts: t.maxAttempts,
    lost: t.lost,
    cost: t.cost,
    cost_used: t.costUsed,
    deferred: t.deferred,
    timeout: t.timeoutMs === null ? null : t.timeoutMs / 1000,
    created_at: iso(t.createdAt),
    run_at: iso(t.runAt),
    deadline: iso(t.deadline),
    started_at: iso(t.startedAt),
    finished_at: iso(t.finishedAt),
    lease_until: iso(t.leaseUntil),
    progress_at: iso(t.progressAt),
    cancel_requested: iso(t.cancelRequested),
    group: t.group,
    pod: t.pod,
    incarnation: t.incarnation,
    token: t.token,
    error: t.error,
    reason: t.reason,
    result: t.result,
    progress: t.progress,
    after: t.after,
    on_dep_fail: t.onDepFail,
    flow: t.flow,
    history: t.history.map((a) => ({
      attempt: a.attempt,
      pod: a.pod,
      started_at: iso(a.startedAt),
      ended_at: iso(a.endedAt),
      outcome: a.outcome,
      error: a.error,
      traceback: a.traceback,
    })),
  };
}

/** A task's attempts, one line each, then the latest traceback (Python's `history_lines`). */
export function historyLines(history: readonly Attempt[]): string[] {
  if (history.length === 0) return [];
  const when = (d: Date | null): string => (d === null ? "-" : isoSeconds(d).slice(0, 19) + "Z");
  const lines = ["history:"];
  for (const a of history) {
    let error = a.error ?? "";
    if (error.length > 80) error = error.slice(0, 79) + "…";
    lines.push(
      `  ${String(a.attempt).padStart(3)}  ${(a.outcome ?? "-").padEnd(9)}  ${a.pod ?? "-"}  ` +
        `${when(a.startedAt)} .. ${when(a.endedAt)}  ${error}`.trimEnd(),
    );
  }
  const last = history.findLast((a) => a.traceback !== null);
  if (last?.traceback != null) {
    lines.push(`traceback of attempt ${String(last.attempt)}:`);
    for (const line of last.traceback.trimEnd().split("\n")) lines.push("  " + line);
  }
  return lines;
}

/** A time as Python's `isoformat(timespec="seconds")` in UTC. */
export function isoSeconds(date: Date): string {
  return date.toISOString().slice(0, 19) + "+00:00";
}

/** `text` cut to `width` with an ellipsis (Python's `_short`). */
export function short(value: unknown, width = 60): string {
  const text = typeof value === "string" ? value : pyJson(value, false);
  return text.length <= width ? text : `${text.slice(0, width - 1)}…`;
}

/** A finite number of seconds in `[0, max]`, for the filters. */
export function seconds(values: Values, name: string): number | undefined {
  return values[name] as number | undefined;
}
