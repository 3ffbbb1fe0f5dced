/**
 * The everyday commands of `taskfleet-node`, with the Python `taskfleet` command's names,
 * options, output and exit codes: configure, stats, ls (alias list), task (alias show),
 * cancel, retry, purge, workers, schedule, provider-quota. Each opens a `Queue` (the public API) for its
 * calls and closes it. Bad input: one line, exit 2, nothing stored; a queue with nothing
 * stored or an unknown task id: one line, exit 1.
 *
 * @module
 */

import { BadInput, Failure, type Opt, type Values, help } from "../cli.js";
import { defaultConfig, type QueueConfig } from "../config.js";
import { configFromMs, configToMs } from "../configms.js";
import { CancelOutcome } from "../control.js";
import { InvalidArgument, TaskNotFound } from "../errors.js";
import { TaskState } from "../tasks.js";
import { WORKER_LEVEL, olderWorkersNote, olderWorkers } from "../workers.js";
import { configFields, checkConfig } from "../config.js";
import { MAX_ATTEMPTS, MAX_DURATION_S } from "../bounds.js";
import {
  HELP_OPTION,
  evictionPolicy,
  historyLines,
  JSON_OPTION,
  PROG,
  REDIS_OPTION,
  isoSeconds,
  note,
  out,
  parseCommand,
  positionals,
  pyJson,
  short,
  taskJson,
  terminalSafe,
  withQueue,
} from "./output.js";
import { providerQuotaCommand } from "./providerquota.js";
import { scheduleCommand } from "./schedule.js";

type Command = (args: readonly string[]) => Promise<number>;

const STATES = ["pending", "delayed", "running", "waiting", "done", "dead", "cancelled"] as const;
const FINISHED = ["done", "dead", "cancelled"] as const;

const FILTERS: readonly Opt[] = [
  { name: "reason", kind: "string", help: "Only tasks with this reason." },
  {
    name: "older-than",
    kind: "float",
    min: 0,
    max: MAX_DURATION_S,
    help: "Only tasks finished (or, not finished, created) more than this many seconds ago.",
  },
  {
    name: "newer-than",
    kind: "float",
    min: 0,
    max: MAX_DURATION_S,
    help: "Only tasks finished (or created) less than this many seconds ago.",
  },
];
const GROUP_FILTER: Opt = { name: "group", kind: "string", help: "Only tasks of this group." };

/** Parse a command's arguments; `--help` prints its usage and resolves to null. */
function parse(
  args: readonly string[],
  opts: readonly Opt[],
  usage: string,
  names: readonly string[],
  optional = 0,
): [Values, (string | undefined)[]] | null {
  const all = [...opts, JSON_OPTION, REDIS_OPTION, HELP_OPTION].filter(
    (o, i, list) => list.findIndex((x) => x.name === o.name) === i,
  );
  const [values, given] = parseCommand(args, all);
  if (values.help === true) {
    out(help(`Usage: ${PROG} ${usage}`, all));
    return null;
  }
  if (names.length === 0) return [values, given];
  return [values, positionals(given, names, optional)];
}

// -- configure ----------------------------------------------------------------------------

const CONFIG_NAMES = Object.keys(defaultConfig()) as (keyof QueueConfig)[];
const snake = (name: string): string => name.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
const STORED = new Map(CONFIG_NAMES.map((name) => [snake(name), name]));
const NUMBER = /^\s*[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?\s*$/;

/** The config's fields in the Python model's order, as Python prints them (`None` as null). */
function configShown(config: QueueConfig): [string, string | null][] {
  const stored = configFields(config);
  return [...STORED.keys()].map((field) => [field, stored[field] ?? null]);
}

async function configure(args: readonly string[]): Promise<number> {
  const opts: Opt[] = [
    {
      name: "set",
      kind: "multi",
      help: "A QueueConfig field to set (repeatable), e.g. --set lease_ttl_s=60; FIELD= (empty) returns it to its default.",
    },
    { name: "lease-ttl", kind: "float", help: "Same as --set lease_ttl_s=S." },
  ];
  const parsed = parse(
    args,
    opts,
    "configure QUEUE [--set FIELD=VALUE]... [--json]\n\nShow or change the queue's shared settings.",
    ["QUEUE"],
  );
  if (parsed === null) return 0;
  const [v, [queue]] = parsed;
  const settings = [...((v.set as string[] | undefined) ?? [])];
  if (v["lease-ttl"] !== undefined) settings.push(`lease_ttl_s=${String(v["lease-ttl"])}`);
  const changes = new Map<keyof QueueConfig, string | null>();
  for (const item of settings) {
    const at = item.indexOf("=");
    const field = at < 0 ? item : item.slice(0, at);
    const name = STORED.get(field);
    if (at < 0 || name === undefined) {
      throw new BadInput(
        `--set takes FIELD=VALUE with FIELD one of: ${[...STORED.keys()].join(", ")}; got '${item}'`,
      );
    }
    const text = item.slice(at + 1);
    if (text !== "" && !NUMBER.test(text))
      throw new BadInput(`invalid queue config: ${field}: '${text}' is not a number`);
    changes.set(name, text === "" ? null : text);
  }
  return withQueue(queue as string, v, false, async (q) => {
    // the CLI speaks the stored config's seconds, as the Python CLI does
    let current = checkConfig(configFromMs(await q.config()));
    if (changes.size > 0) {
      const data: Record<string, number | null> = { ...current };
      for (const [name, text] of changes)
        data[name] = text === null ? defaultConfig()[name] : Number(text);
      try {
        current = checkConfig(data);
      } catch (error) {
        if (error instanceof InvalidArgument) throw new BadInput(error.message);
        throw error;
      }
      current = checkConfig(configFromMs(await q.configure(configToMs(current))));
    }
    const shown = configShown(current);
    if (v.json === true)
      out(`{${shown.map(([k, value]) => `"${k}": ${value ?? "null"}`).join(", ")}}`);
    else for (const [k, value] of shown) out(`${k}: ${value ?? ""}`);
    return 0;
  });
}

// -- stats --------------------------------------------------------------------------------

/** Groups `stats` shows (most pending first). */
const TOP_GROUPS = 10;

async function stats(args: readonly string[]): Promise<number> {
  const parsed = parse(
    args,
    [],
    "stats QUEUE [--json]\n\nCounts of QUEUE's tasks by state, its workers and its counters.",
    ["QUEUE"],
  );
  if (parsed === null) return 0;
  const [v, [queue]] = parsed;
  return withQueue(queue as string, v, false, async (q) => {
    const data = (await q.stats()) as unknown as Record<string, number>;
    const groups = await q.groups();
    const policy = await evictionPolicy(q);
    const paused = groups.filter((g) => g.pausedUntilMs > 0).length;
    const top = groups.slice(0, TOP_GROUPS);
    if (policy !== null && policy !== "noeviction") {
      note(
        `${PROG}: warning: Redis maxmemory-policy is '${policy}': a full Redis deletes tasks; set maxmemory-policy noeviction`,
      );
    }
    if (v.json === true) {
      const topJson = top.map((g) => ({
        group: g.group,
        paused_until_ms: g.pausedUntilMs,
        pending: g.pending,
        running: g.running,
      }));
      out(pyJson({ ...data, groups: groups.length, groups_paused: paused, top_groups: topJson }));
      return 0;
    }
    const width = Math.max(0, ...Object.keys(data).map((k) => k.length));
    for (const [key, value] of Object.entries(data)) out(`${key.padEnd(width)}  ${value}`);
    if (groups.length > 0) {
      out(`${"groups".padEnd(width)}  ${groups.length} (most pending first)`);
      if (paused > 0) out(`${"groups_paused".padEnd(width)}  ${paused}`);
      for (const g of top) {
        let line = `  ${g.group}  pending=${g.pending}  running=${g.running}`;
        if (g.pausedUntilMs > 0) line += `  paused_until_ms=${g.pausedUntilMs}`;
        out(terminalSafe(line));
      }
    }
    return 0;
  });
}

// -- ls -----------------------------------------------------------------------------------

function filterOptions(v: Values): { reason?: string; olderThan?: number; newerThan?: number } {
  return {
    ...(v.reason !== undefined ? { reason: v.reason as string } : {}),
    ...(v["older-than"] !== undefined ? { olderThan: v["older-than"] as number } : {}),
    ...(v["newer-than"] !== undefined ? { newerThan: v["newer-than"] as number } : {}),
  };
}

function oneOf<T extends string>(value: string, choices: readonly T[], what: string): T {
  if (!(choices as readonly string[]).includes(value)) {
    throw new BadInput(
      `invalid value for '${what}': '${value}' is not one of ${choices.map((c) => `'${c}'`).join(", ")}`,
    );
  }
  return value as T;
}

async function ls(args: readonly string[]): Promise<number> {
  const opts: Opt[] = [
    { name: "limit", kind: "int", min: 1, max: 10_000, help: "Page size [default: 50]." },
    { name: "cursor", kind: "string", help: "The next page, as the previous page said." },
    ...FILTERS,
    GROUP_FILTER,
  ];
  const parsed = parse(
    args,
    opts,
    `ls QUEUE {${STATES.join("|")}} [options]\n\nList QUEUE's tasks in STATE.`,
    ["QUEUE", "STATE"],
  );
  if (parsed === null) return 0;
  const [v, [queue, stateText]] = parsed;
  const state = oneOf(stateText as string, STATES, "STATE");
  return withQueue(queue as string, v, true, async (q) => {
    let page;
    try {
      page = await q.list(state, {
        limit: (v.limit as number | undefined) ?? 50,
        cursor: (v.cursor as string | undefined) ?? null,
        ...filterOptions(v),
        ...(v.group !== undefined ? { group: v.group as string } : {}),
      });
    } catch (error) {
      if (error instanceof InvalidArgument) throw new BadInput(error.message);
      throw error;
    }
    if (v.json === true) {
      out(pyJson({ tasks: page.tasks.map(taskJson), cursor: page.cursor }));
      return 0;
    }
    for (const t of page.tasks) {
      const when = t.finishedAt ?? t.runAt ?? t.createdAt;
      const detail =
        t.error !== null && t.error !== ""
          ? t.error
          : t.progress !== null && t.progress !== undefined
            ? t.progress
            : "";
      const parts = [t.id, t.state, `attempts=${t.attempts}`];
      if (when !== null) parts.push(isoSeconds(when));
      if (t.reason !== null && t.reason !== "") parts.push(`reason=${t.reason}`);
      if (t.group !== null && t.group !== "") parts.push(`group=${t.group}`);
      if (detail !== "") parts.push(short(detail));
      out(terminalSafe(parts.join("  ")));
    }
    if (page.cursor !== null) note(`${PROG}: more: --cursor ${page.cursor}`);
    return 0;
  });
}

// -- task ---------------------------------------------------------------------------------

async function task(args: readonly string[]): Promise<number> {
  const parsed = parse(args, [], "task QUEUE TASK_ID [--json]\n\nShow one task of QUEUE.", [
    "QUEUE",
    "TASK_ID",
  ]);
  if (parsed === null) return 0;
  const [v, [queue, taskId]] = parsed;
  return withQueue(queue as string, v, false, async (q) => {
    const found = await q.get(taskId as string);
    if (found === null) throw new Failure(`task '${taskId}' not found in queue '${queue}'`);
    const data = taskJson(found);
    if (v.json === true) {
      out(pyJson(data));
      return 0;
    }
    delete data.history; // shown as lines of its own, after the fields
    const width = Math.max(...Object.keys(data).map((k) => k.length));
    for (const [key, value] of Object.entries(data)) {
      if (value === null || value === "" || value === undefined) continue;
      const shown =
        typeof value === "string" || typeof value === "number" || typeof value === "boolean"
          ? String(value)
          : pyJson(value, false);
      out(`${key.padEnd(width)}  ${terminalSafe(shown)}`);
    }
    const flow = found.flow !== null && found.flow !== "" ? await q.flow(found.flow) : null;
    if (flow !== null) {
      // the flow it belongs to, as its record stands (the tree of its links is Python's alone)
      const tally = `open=${flow.open} done=${flow.done} dead=${flow.dead} cancelled=${flow.cancelled}`;
      const state =
        flow.endedAt === null
          ? "running"
          : `ended ${flow.outcome ?? ""} at ${flow.endedAt.toISOString().replace(/\.(\d{3})Z$/, ".$1000+00:00")}`;
      out(`${"flow_state".padEnd(width)}  ${state}  ${tally}`);
    }
    for (const line of historyLines(found.history)) out(terminalSafe(line));
    return 0;
  });
}

// -- cancel, retry, purge -----------------------------------------------------------------

const CANCEL_WORDS: Record<string, string> = {
  cancelled: "cancelled (it will not run)",
  requested: "cancelling (running: its worker stops it at its next heartbeat)",
  done: "not cancelled: done already",
  dead: "not cancelled: dead already",
  finished: "cancelled already",
  not_found: "not found",
};

function counts(tally: Partial<Record<string, number>>, json: boolean): void {
  if (json) out(pyJson(tally));
  else
    for (const key of Object.keys(tally).sort())
      out(`${tally[key] ?? 0}  ${CANCEL_WORDS[key] ?? key}`);
}

const FLOW_FLAGS = (verb: string): Opt[] => [
  {
    name: "flow",
    kind: "flag",
    help: `${verb} every task linked to the task by after, either way.`,
  },
  {
    name: "branch",
    kind: "flag",
    help: `${verb} the task and every task that waits for it, transitively.`,
  },
];

function flowScope(v: Values): "flow" | "branch" | null {
  if (v.flow === true && v.branch === true)
    throw new BadInput("--flow and --branch are one choice: give one");
  return v.flow === true ? "flow" : v.branch === true ? "branch" : null;
}

function flowTarget(scope: string, ids: readonly string[], other: string | null): string {
  if (other !== null)
    throw new BadInput(`--${scope} acts on one task's ${scope}: not with ${other}`);
  if (ids.length !== 1)
    throw new BadInput(`--${scope} takes exactly one task id, not ${ids.length}`);
  return ids[0] as string;
}

async function onFlow<T>(queue: string, taskId: string, action: () => Promise<T>): Promise<T> {
  try {
    return await action();
  } catch (error) {
    if (error instanceof TaskNotFound)
      throw new BadInput(`task '${taskId}' not found in queue '${queue}'`);
    throw error;
  }
}

async function cancel(args: readonly string[]): Promise<number> {
  const opts: Opt[] = [
    { name: "group", kind: "string", help: "Cancel every unfinished task of this group." },
    ...FLOW_FLAGS("Cancel"),
  ];
  const parsed = parse(
    args,
    opts,
    "cancel QUEUE [TASK_IDS]... [--group G] [--flow|--branch] [--json]\n\nCancel tasks of QUEUE.",
    [],
  );
  if (parsed === null) return 0;
  const [v, given] = parsed;
  const [queue, ...ids] = given as string[];
  if (queue === undefined) throw new BadInput("missing argument 'QUEUE'");
  const json = v.json === true;
  const scope = flowScope(v);
  const group = v.group as string | undefined;
  if (scope !== null) {
    const taskId = flowTarget(scope, ids, group !== undefined ? "--group" : null);
    return withQueue(queue, v, true, async (q) => {
      const outcomes = await onFlow(queue, taskId, () =>
        q.cancelFlow(taskId, { branch: scope === "branch" }),
      );
      const tally: Record<string, number> = {};
      for (const o of Object.values(outcomes)) tally[o] = (tally[o] ?? 0) + 1;
      counts(tally, json);
      return 0;
    });
  }
  if (ids.length > 0 === (group !== undefined))
    throw new BadInput("name the tasks to cancel: task ids, or --group, not both");
  return withQueue(queue, v, true, async (q) => {
    if (group !== undefined) {
      let tally;
      try {
        tally = await q.cancelGroup(group);
      } catch (error) {
        if (error instanceof InvalidArgument) throw new BadInput(error.message);
        throw error;
      }
      counts(tally, json);
      return 0;
    }
    const outcomes = await q.cancelMany(ids);
    if (json) out(pyJson(outcomes));
    else for (const [id, o] of Object.entries(outcomes)) out(`${id}  ${CANCEL_WORDS[o] ?? o}`);
    const missing = Object.entries(outcomes).find(([, o]) => o === CancelOutcome.NotFound);
    if (missing !== undefined)
      throw new Failure(`task '${missing[0]}' not found in queue '${queue}'`);
    return 0;
  });
}

async function retry(args: readonly string[]): Promise<number> {
  const opts: Opt[] = [
    { name: "all", kind: "flag", help: "Every dead task (within the filters)." },
    {
      name: "max-attempts",
      kind: "int",
      min: 1,
      max: MAX_ATTEMPTS,
      help: "The new attempt budget [default: the task's own, or the queue's].",
    },
    ...FILTERS,
    GROUP_FILTER,
    ...FLOW_FLAGS("Retry"),
  ];
  const parsed = parse(
    args,
    opts,
    "retry QUEUE [TASK_IDS]... [--all] [filters] [--json]\n\nSend dead tasks of QUEUE back to pending with a new attempt budget.",
    [],
  );
  if (parsed === null) return 0;
  const [v, given] = parsed;
  const [queue, ...ids] = given as string[];
  if (queue === undefined) throw new BadInput("missing argument 'QUEUE'");
  const json = v.json === true;
  const every = v.all === true;
  const maxAttempts = v["max-attempts"] as number | undefined;
  const filtered =
    v.reason !== undefined ||
    v.group !== undefined ||
    v["older-than"] !== undefined ||
    v["newer-than"] !== undefined;
  const scope = flowScope(v);
  if (scope !== null) {
    let other = every || filtered ? "--all or filters" : null;
    if (maxAttempts !== undefined) other = "--max-attempts";
    const taskId = flowTarget(scope, ids, other);
    return withQueue(queue, v, true, async (q) => {
      const count = await onFlow(queue, taskId, () =>
        q.retryFlow(taskId, { branch: scope === "branch" }),
      );
      if (json) out(pyJson({ retried: count }));
      else
        out(
          `${count} dead or cancelled task(s) of the ${scope} back (pending, or waiting for their dependencies)`,
        );
      return 0;
    });
  }
  if (ids.length > 0 && (every || filtered))
    throw new BadInput("give task ids, or --all / filters, not both");
  if (ids.length === 0 && !(every || filtered))
    throw new BadInput("name the dead tasks to retry: task ids, --all, or a filter");
  return withQueue(queue, v, true, async (q) => {
    let count: number;
    const skipped: Record<string, string> = {};
    const again: Record<string, string> = {};
    const budget = maxAttempts !== undefined ? { maxAttempts } : {};
    try {
      if (ids.length > 0) {
        const states = await Promise.all(ids.map(async (id) => [id, await q.get(id)] as const));
        const missing = states.find(([, t]) => t === null);
        if (missing !== undefined)
          throw new Failure(`task '${missing[0]}' not found in queue '${queue}'`);
        count = await q.retry({ taskIds: ids, ...budget });
        for (const [id, t] of states)
          if (t !== null && t.state !== TaskState.Dead) skipped[id] = t.state;
        for (const id of ids) {
          if (id in skipped) continue;
          const now = await q.get(id);
          if (now !== null && now.state === TaskState.Dead && now.reason === "dependency failed")
            again[id] = now.error ?? "";
        }
        count -= Object.keys(again).length;
      } else {
        count = await q.retry({
          ...filterOptions(v),
          ...(v.group !== undefined ? { group: v.group as string } : {}),
          ...budget,
        });
      }
    } catch (error) {
      if (error instanceof InvalidArgument) throw new BadInput(error.message);
      throw error;
    }
    if (json) {
      out(pyJson({ retried: count, skipped, ended_again: again }));
      return 0;
    }
    out(`${count} dead task(s) back (pending, or waiting for their dependencies)`);
    for (const [id, state] of Object.entries(skipped))
      note(`${PROG}: ${id} is ${state}, not dead: left as it is`);
    for (const [id, error] of Object.entries(again)) {
      note(
        terminalSafe(
          `${PROG}: ${id} ended again at once: ${error}; retry that one first, or the whole flow with --flow`,
        ),
      );
    }
    return 0;
  });
}

async function purge(args: readonly string[]): Promise<number> {
  const opts: Opt[] = [
    { name: "done", kind: "flag", help: "Delete done tasks." },
    { name: "dead", kind: "flag", help: "Delete dead tasks." },
    { name: "cancelled", kind: "flag", help: "Delete cancelled tasks." },
    ...FILTERS,
  ];
  const parsed = parse(
    args,
    opts,
    "purge QUEUE --done|--dead|--cancelled [filters] [--json]\n\nDelete QUEUE's finished tasks of one state now.",
    ["QUEUE"],
  );
  if (parsed === null) return 0;
  const [v, [queue]] = parsed;
  // click's flag_value options share one destination: the last given wins
  const given = args
    .map((a) => a.slice(2))
    .filter((a): a is (typeof FINISHED)[number] => (FINISHED as readonly string[]).includes(a));
  const state = given.at(-1);
  if (state === undefined)
    throw new BadInput("say which finished tasks to delete: --done, --dead or --cancelled");
  return withQueue(queue as string, v, true, async (q) => {
    const count = await q.purgeTasks(state, filterOptions(v));
    if (v.json === true) out(`{"state": "${state}", "deleted": ${count}}`);
    else out(`${count} ${state} task(s) deleted`);
    return 0;
  });
}

// -- workers ------------------------------------------------------------------------------

async function workers(args: readonly string[]): Promise<number> {
  const parsed = parse(
    args,
    [],
    "workers QUEUE [--json]\n\nQUEUE's workers: what each holds, its heartbeat's age, whether it drains, its level.",
    ["QUEUE"],
  );
  if (parsed === null) return 0;
  const [v, [queue]] = parsed;
  return withQueue(queue as string, v, true, async (q) => {
    const found = await q.workers();
    const running = new Map<string, string[]>();
    let cursor: string | null = "0";
    while (cursor !== null && found.length > 0) {
      const page: Awaited<ReturnType<typeof q.list>> = await q.list(TaskState.Running, {
        limit: 10_000,
        cursor,
      });
      for (const t of page.tasks)
        if (t.pod !== null) running.set(t.pod, [...(running.get(t.pod) ?? []), t.id]);
      cursor = page.cursor;
    }
    const now = Date.now();
    const rows = found.map((w) => ({
      pod: w.pod,
      incarnation: w.incarnation,
      alive: w.alive,
      heartbeat_age_s: Math.round(Math.max(0, now - w.heartbeatMs) / 100) / 10,
      inflight: w.inflight,
      held: w.held,
      concurrency: w.concurrency,
      draining: w.draining,
      holds: running.get(w.pod) ?? [],
      level: w.level,
    }));
    if (v.json === true) {
      out(pyJson(rows));
      return 0;
    }
    if (rows.length === 0) out(`no workers of '${queue}' are registered`);
    for (const row of rows) {
      const state = row.draining ? "draining" : row.alive ? "alive" : "silent";
      const holds = row.holds.join(",") || "-";
      const level = `level ${row.level}${row.level < WORKER_LEVEL ? " (0.1.x)" : ""}`;
      const kept = row.held > 0 ? `  held ${row.held}` : "";
      const age = Number.isInteger(row.heartbeat_age_s)
        ? `${row.heartbeat_age_s}.0`
        : String(row.heartbeat_age_s);
      out(
        terminalSafe(
          `${row.pod}  ${state}  beat ${age}s ago  ${level}  holds ${row.holds.length}/${row.concurrency}${kept}  ${short(holds)}`,
        ),
      );
    }
    const older = olderWorkers(found);
    if (older.length > 0) out(terminalSafe(olderWorkersNote(older)));
    return 0;
  });
}

/** The everyday commands by name, with the aliases a Node user types. */
export const EVERYDAY: Readonly<Record<string, Command>> = {
  configure,
  stats,
  ls,
  list: ls,
  task,
  show: task,
  cancel,
  retry,
  purge,
  workers,
  schedule: scheduleCommand,
  "provider-quota": providerQuotaCommand,
};
