/**
 * Schedules as data (the Python package's `protocol/schedules.py` and
 * `producer/scheduling.py`): a schedule's options checked and encoded into the store's
 * fields, its first slot from the server's clock, and a stored schedule read back. The
 * firing itself is the workers' (any Python worker of the queue fires what is due).
 *
 * @module
 */

import { crc32 } from "node:zlib";

import * as bounds from "./bounds.js";
import { parseCron } from "./cron.js";
import { checkedInt, encodePayload, groupProblem, millis } from "./encoding.js";
import { InvalidArgument, describe, pyRepr } from "./errors.js";
import { checkOptionKeys } from "./options.js";
import { floatRepr } from "./pyformat.js";
import { SCHEDULE } from "./protocol/layout.js";
import { nextSlot, zone } from "./slots.js";

/** After downtime: fire the latest missed slot only, or every missed slot (up to a bound). */
export const CATCHUP_POLICIES = ["latest", "all"] as const;
/** Most missed slots `catchup: "all"` fires. */
export const MAX_CATCHUP_LIMIT = 10_000;
/** Longest jitter, in seconds. */
export const MAX_JITTER_S = 86_400;
/** The owner of schedules made through the API (a TaskQueue's spec owns others). */
export const OWNER_API = "";

// In the task id `sched:<name>:<slot>` (at most 200 characters) and in key names.
const NAME = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$/;

/** `name` if a valid schedule name, else an `InvalidArgument`. */
export function validateScheduleName(name: unknown): string {
  if (typeof name !== "string" || !NAME.test(name)) {
    throw new InvalidArgument(
      `invalid schedule name ${typeof name === "string" ? pyRepr(name) : String(name)}: use 1-100 letters, digits, '.', '_', ':' or ` +
        "'-', starting with a letter or digit",
    );
  }
  return name;
}

/** The options of `Queue.schedule`; durations in milliseconds (`...Ms`). */
export interface ScheduleOptions {
  /** IANA zone the cron expression reads in (default UTC). */
  readonly tz?: string;
  /** After downtime: `latest` (default) fires the latest missed slot, `all` every one. */
  readonly catchup?: "latest" | "all";
  /** With `all`: at most this many (the latest), 1..10,000 (default 100). */
  readonly catchupLimit?: number;
  /** Each slot fires up to this many milliseconds late (a fixed draw per slot), 0..86,400,000. */
  readonly jitterMs?: number;
  readonly priority?: number;
  readonly maxAttempts?: number;
  readonly cost?: number;
  /** Milliseconds each run may take (default: the queue's). */
  readonly timeoutMs?: number;
  /** Milliseconds after its firing by which each task must start. */
  readonly deadlineMs?: number;
  /** Store it paused. */
  readonly paused?: boolean;
  /** Each task's group (fair claiming between groups, the group's limits). */
  readonly group?: string;
}

const SCHEDULE_OPTIONS = new Set([
  "tz",
  "catchup",
  "catchupLimit",
  "jitterMs",
  "priority",
  "maxAttempts",
  "cost",
  "timeoutMs",
  "deadlineMs",
  "paused",
  "group",
]);

/** A schedule's definition, checked: the store's fields in the Python client's order and encoding. */
export interface ScheduleDef {
  readonly name: string;
  readonly cron: string;
  readonly tz: string;
  readonly jitterMs: number;
  readonly fields: readonly (readonly [string, string])[];
}

/** `Queue.schedule`'s arguments as a definition; `InvalidArgument` / `InvalidPayload` name what is wrong. */
export function scheduleDef(
  name: string,
  cron: string,
  payload: unknown,
  options: ScheduleOptions = {},
): ScheduleDef {
  validateScheduleName(name);
  checkOptionKeys(options, SCHEDULE_OPTIONS, "schedule options");
  if (typeof cron !== "string")
    throw new InvalidArgument("cron must be a string, e.g. '0 3 * * *'");
  const tz = options.tz ?? "UTC";
  if (typeof tz !== "string")
    throw new InvalidArgument("tz must be an IANA zone name, e.g. 'Europe/Paris'");
  const priority = checkedInt(
    options.priority ?? 0,
    "priority",
    bounds.PRIORITY_MIN,
    bounds.PRIORITY_MAX,
  );
  if (options.maxAttempts !== undefined)
    checkedInt(options.maxAttempts, "max_attempts", 1, bounds.MAX_ATTEMPTS);
  const cost = checkedInt(options.cost ?? 1, "cost", 0, bounds.MAX_COST);
  const catchupLimit = checkedInt(
    options.catchupLimit ?? 100,
    "catchup_limit",
    1,
    MAX_CATCHUP_LIMIT,
  );
  const jitter = millis(options.jitterMs ?? 0, "jitterMs", MAX_JITTER_S) ?? 0;
  const timeout = millis(options.timeoutMs, "timeoutMs", bounds.MAX_TIMEOUT_S);
  const deadline = millis(options.deadlineMs, "deadlineMs", bounds.MAX_DEADLINE_S);
  for (const [what, value] of [
    ["jitterMs", jitter],
    ["timeoutMs", timeout],
    ["deadlineMs", deadline],
  ] as const) {
    if (value !== undefined && value < 0) throw new InvalidArgument(`${what} must not be negative`);
  }
  if (timeout === 0) throw new InvalidArgument("timeoutMs must be positive");
  const text = encodePayload(payload);
  parseCron(cron);
  zone(tz);
  const catchup = options.catchup ?? "latest";
  if (!(CATCHUP_POLICIES as readonly string[]).includes(catchup)) {
    throw new InvalidArgument(
      `catchup must be one of ${CATCHUP_POLICIES.join(", ")}, not ${describe(catchup)}`,
    );
  }
  const jitterMs = Math.trunc(jitter);
  if (options.group !== undefined) {
    const problem = groupProblem(options.group);
    if (problem !== undefined) throw new InvalidArgument(problem);
  }
  const fields: [string, string][] = [
    [SCHEDULE.cron, cron],
    [SCHEDULE.tz, tz],
    [SCHEDULE.payload, text],
    [SCHEDULE.priority, String(priority)],
    [SCHEDULE.max_attempts, options.maxAttempts === undefined ? "" : String(options.maxAttempts)],
    [SCHEDULE.cost, String(cost)],
    [SCHEDULE.timeout, timeout === undefined ? "" : floatRepr(timeout / 1000)],
    [SCHEDULE.deadline_ms, deadline === undefined ? "" : String(Math.trunc(deadline))],
    [SCHEDULE.catchup, catchup],
    [SCHEDULE.catchup_limit, String(catchupLimit)],
    [SCHEDULE.jitter_ms, String(jitterMs)],
    ["group", options.group ?? ""],
  ];
  return { name, cron, tz, jitterMs, fields };
}

/** When slot `slot` (epoch s) is due: the slot plus its fixed share of the jitter (every firer agrees). */
export function dueMs(name: string, slot: number, jitterMs: number): number {
  if (jitterMs <= 0) return slot * 1000;
  return slot * 1000 + (crc32(`${name}\0${slot}`) % (jitterMs + 1));
}

/** The first slot strictly after `nowMs` (null: none within nine years). */
export function firstSlot(cron: string, tz: string, nowMs: number): number | null {
  return nextSlot(parseCron(cron), zone(tz), Math.floor(nowMs / 1000));
}

/** A schedule as read from the store (`Queue.schedules`). */
export interface Schedule {
  readonly name: string;
  readonly cron: string;
  readonly tz: string;
  readonly payload: Record<string, unknown>;
  readonly priority: number;
  readonly maxAttempts: number | null;
  readonly cost: number;
  /** Milliseconds each run may take; null: the queue's default. */
  readonly timeoutMs: number | null;
  /** Milliseconds after firing; null: none. */
  readonly deadlineMs: number | null;
  readonly catchup: string;
  readonly catchupLimit: number;
  /** Milliseconds. */
  readonly jitterMs: number;
  readonly paused: boolean;
  /** '' = the API / CLI, 'taskqueue' = a TaskQueue's spec. */
  readonly owner: string;
  /** Epoch seconds of the last slot fired. */
  readonly lastSlot: number | null;
  /** Epoch seconds of the next slot to fire (null: none ahead). */
  readonly nextSlot: number | null;
  /** When the next slot is due (epoch ms; null when paused or none). */
  readonly nextDueMs: number | null;
  /** Tasks enqueued. */
  readonly fired: number;
  /** Missed slots the catch-up policy did not fire. */
  readonly skipped: number;
  /** Why the last slot fired nothing ('' = it fired). */
  readonly error: string;
  /** Each task's group; null: none. */
  readonly group: string | null;
}

function intOf(value: string | undefined): number | null {
  return value !== undefined && /^\s*[-+]?[0-9]+\s*$/.test(value) ? Number(value) : null;
}

/** A stored schedule's hash read as the Python client reads it (defaults for what it cannot read). */
export function scheduleFromHash(h: Readonly<Record<string, string>>): Schedule {
  let payload: unknown;
  try {
    payload = JSON.parse(h.payload === undefined || h.payload === "" ? "{}" : h.payload);
  } catch {
    payload = {};
  }
  const timeout = h.timeout ?? "";
  const deadline = intOf(h[SCHEDULE.deadline_ms]);
  const name = h.name ?? "";
  const jitterMs = intOf(h[SCHEDULE.jitter_ms]) ?? 0;
  const paused = h.paused === "1";
  const next = intOf(h[SCHEDULE.next_slot]);
  return {
    name,
    cron: h.cron ?? "",
    tz: h.tz ?? "UTC",
    payload:
      typeof payload === "object" && payload !== null && !Array.isArray(payload)
        ? (payload as Record<string, unknown>)
        : {},
    priority: intOf(h.priority) ?? 0,
    maxAttempts: intOf(h[SCHEDULE.max_attempts]),
    cost: intOf(h.cost) ?? 1,
    timeoutMs: timeout === "" ? null : Math.round(Number(timeout) * 1000 * 1e6) / 1e6,
    deadlineMs: deadline,
    catchup: h.catchup ?? "latest",
    catchupLimit: intOf(h[SCHEDULE.catchup_limit]) || 100,
    jitterMs,
    paused,
    owner: h.owner ?? "",
    lastSlot: intOf(h[SCHEDULE.last_slot]),
    nextSlot: next,
    nextDueMs: next === null || paused ? null : dueMs(name, next, jitterMs),
    fired: intOf(h.fired) ?? 0,
    skipped: intOf(h.skipped) ?? 0,
    error: h.error ?? "",
    group: h.group === undefined || h.group === "" ? null : h.group,
  };
}
