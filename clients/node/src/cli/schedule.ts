/**
 * `taskfleet-node schedule add|ls|rm|pause|resume`: a queue's schedules, as the Python
 * `taskfleet schedule` shows and changes them.
 *
 * @module
 */

import { BadInput, Failure, type Opt, help } from "../cli.js";
import { InvalidArgument, InvalidPayload, ScheduleNotFound, ScheduleOwned } from "../errors.js";
import type { Schedule } from "../schedules.js";
import {
  HELP_OPTION,
  JSON_OPTION,
  PROG,
  REDIS_OPTION,
  out,
  parseCommand,
  pyJson,
  terminalSafe,
  withQueue,
} from "./output.js";

function when(slot: number | null): string {
  return slot === null ? "-" : `${new Date(slot * 1000).toISOString().slice(0, 19)}Z`;
}

function scheduleJson(s: Schedule): Record<string, unknown> {
  return {
    name: s.name,
    cron: s.cron,
    tz: s.tz,
    payload: s.payload,
    priority: s.priority,
    group: s.group,
    max_attempts: s.maxAttempts,
    cost: s.cost,
    timeout_s: s.timeoutMs === null ? null : s.timeoutMs / 1000,
    deadline_s: s.deadlineMs === null ? null : s.deadlineMs / 1000,
    catchup: s.catchup,
    catchup_limit: s.catchupLimit,
    jitter_s: s.jitterMs / 1000,
    paused: s.paused,
    owner: s.owner || "api",
    last_slot: s.lastSlot,
    next_slot: s.nextSlot,
    next_due_ms: s.nextDueMs,
    fired: s.fired,
    skipped: s.skipped,
    error: s.error,
  };
}

const ADD_OPTIONS: readonly Opt[] = [
  { name: "payload", kind: "string", help: "Task payload, a JSON object [default: {}]." },
  { name: "tz", kind: "string", help: "IANA time zone of the cron [default: UTC]." },
  {
    name: "catchup",
    kind: "choice",
    choices: ["latest", "all"],
    help: "After downtime: fire the latest missed slot, or all [default: latest].",
  },
  { name: "catchup-limit", kind: "int", min: 1, max: 10_000, help: "[default: 100]" },
  {
    name: "jitter",
    kind: "float",
    min: 0,
    max: 86_400,
    help: "Seconds each slot may fire late [default: 0].",
  },
  { name: "priority", kind: "int", help: "[default: 0]" },
  { name: "max-attempts", kind: "int", min: 1, help: "Starts allowed [default: the queue's]." },
  {
    name: "timeout",
    kind: "float",
    min: 0,
    help: "Seconds a run may take [default: the queue's].",
  },
  {
    name: "deadline",
    kind: "float",
    min: 0,
    help: "Seconds after firing by which each task must start.",
  },
  { name: "group", kind: "string", help: "Each task's group (fair claiming between groups)." },
  { name: "paused", kind: "flag", help: "Store it paused." },
];

function payloadOf(text: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new BadInput(
      `--payload is not valid JSON: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new BadInput(
      `--payload must be a JSON object, got ${Array.isArray(value) ? "list" : value === null ? "NoneType" : typeof value}`,
    );
  }
  return value as Record<string, unknown>;
}

const USAGE = `Usage: ${PROG} schedule COMMAND QUEUE ...

Commands:
  add     QUEUE NAME CRON [options]  Create or change a schedule (quote the cron: '0 3 * * *').
  ls      QUEUE                      List the queue's schedules.
  rm      QUEUE NAME...              Delete schedules (exit 1 if one was not there).
  pause   QUEUE NAME...              Pause schedules.
  resume  QUEUE NAME...              Resume schedules from their first slot after now.`;

/** `schedule SUBCOMMAND ...`. */
export async function scheduleCommand(args: readonly string[]): Promise<number> {
  const [sub, ...rest] = args;
  if (sub === undefined || sub === "--help") {
    out(USAGE);
    return sub === undefined ? 2 : 0;
  }
  if (!["add", "ls", "rm", "pause", "resume"].includes(sub))
    throw new BadInput(`no such command 'schedule ${sub}'; use add, ls, rm, pause or resume`);
  const opts = [...(sub === "add" ? ADD_OPTIONS : []), JSON_OPTION, REDIS_OPTION, HELP_OPTION];
  const [v, given] = parseCommand(rest, opts);
  if (v.help === true) {
    out(help(USAGE, opts));
    return 0;
  }
  const [queue, ...names] = given;
  if (queue === undefined) throw new BadInput("missing argument 'QUEUE'");
  const json = v.json === true;
  if (sub === "ls") {
    if (names.length > 0) throw new BadInput(`got unexpected extra argument (${names[0] ?? ""})`);
    return withQueue(queue, v, false, async (q) => {
      const items = await q.schedules();
      if (json) {
        out(pyJson(items.map(scheduleJson)));
        return 0;
      }
      out(
        `${"NAME".padEnd(24)} ${"CRON".padEnd(20)} ${"TZ".padEnd(18)} ${"STATE".padEnd(7)} ${"NEXT (UTC)".padEnd(21)} FIRED`,
      );
      for (const s of items) {
        const row = `${s.name.padEnd(24)} ${s.cron.padEnd(20)} ${s.tz.padEnd(18)} ${(s.paused ? "paused" : "active").padEnd(7)} ${when(s.nextSlot).padEnd(21)} ${s.fired}`;
        out(terminalSafe(row + (s.error !== "" ? `  error: ${s.error}` : "")));
      }
      return 0;
    });
  }
  if (sub === "add") {
    const [name, cron, extra] = names;
    if (name === undefined) throw new BadInput("missing argument 'NAME'");
    if (cron === undefined) throw new BadInput("missing argument 'CRON'");
    if (extra !== undefined) throw new BadInput(`got unexpected extra argument (${extra})`);
    const payload = payloadOf((v.payload as string | undefined) ?? "{}");
    return withQueue(queue, v, false, async (q) => {
      let stored: Schedule;
      try {
        stored = await q.schedule(name, cron, payload, {
          tz: (v.tz as string | undefined) ?? "UTC",
          catchup: (v.catchup as "latest" | "all" | undefined) ?? "latest",
          catchupLimit: (v["catchup-limit"] as number | undefined) ?? 100,
          jitterMs: ((v.jitter as number | undefined) ?? 0) * 1000,
          priority: (v.priority as number | undefined) ?? 0,
          ...(v["max-attempts"] !== undefined ? { maxAttempts: v["max-attempts"] as number } : {}),
          ...(v.timeout !== undefined ? { timeoutMs: (v.timeout as number) * 1000 } : {}),
          ...(v.deadline !== undefined ? { deadlineMs: (v.deadline as number) * 1000 } : {}),
          ...(v.group !== undefined ? { group: v.group as string } : {}),
          paused: v.paused === true,
        });
      } catch (error) {
        if (
          error instanceof InvalidArgument ||
          error instanceof InvalidPayload ||
          error instanceof ScheduleOwned
        )
          throw new BadInput(error.message);
        throw error;
      }
      out(
        json ? pyJson(scheduleJson(stored)) : `${stored.name}: next slot ${when(stored.nextSlot)}`,
      );
      return 0;
    });
  }
  if (names.length === 0) throw new BadInput("missing argument 'NAMES...'");
  return withQueue(queue, v, false, async (q) => {
    const done: Record<string, boolean> = {};
    for (const name of names) {
      try {
        if (sub === "rm") done[name] = await q.unschedule(name);
        else
          done[name] = sub === "pause" ? await q.pauseSchedule(name) : await q.resumeSchedule(name);
      } catch (error) {
        if (error instanceof ScheduleNotFound) throw new Failure(error.message);
        if (error instanceof InvalidArgument || error instanceof ScheduleOwned)
          throw new BadInput(error.message);
        throw error;
      }
    }
    if (json) out(pyJson(done));
    else if (sub === "rm")
      for (const [name, deleted] of Object.entries(done))
        out(`${name}: ${deleted ? "deleted" : "no such schedule"}`);
    else {
      const word = sub === "pause" ? "paused" : "resumed";
      for (const [name, did] of Object.entries(done))
        out(`${name}: ${did ? word : `already ${word}`}`);
    }
    return sub === "rm" && !Object.values(done).every(Boolean) ? 1 : 0;
  });
}
