/**
 * A queue's claim pause and spend budget, or one group's own (`group`): pause or resume
 * claims, set the budget at run time, read both. The Python client's `producer/quotas.py`
 * and `protocol/quota.py`, on the same `quota` script and hashes.
 *
 * @module
 */

import type { QueueConfig } from "./config.js";
import type { Control } from "./control.js";
import { checkGroup } from "./control.js";
import { InvalidArgument, ProtocolError, describe, olderWorker } from "./errors.js";
import { readQuota } from "./protocol/groupstore.js";
import type { QuotaArgs } from "./protocol/signatures.js";
import { queueMs } from "./protocol/store.js";

/** A run-time budget setting: an integer >= 0 (0: none), "default" (the config's again), undefined (kept). */
export type BudgetLimit = number | "default";

/** One period of a budget, as `Queue.quota` reads it. */
export interface BudgetPeriod {
  /** 'YYYY-MM-DD' (day) or 'YYYY-MM' (month), UTC. */
  readonly period: string;
  /** Cost units per period; null: no budget. */
  readonly limit: number | null;
  readonly spent: number;
  /** null: no budget. */
  readonly left: number | null;
  /** When the period ends (epoch ms). */
  readonly resetsAtMs: number;
  /** The limit comes from a run-time setting (`setBudget`), not the config. */
  readonly runtime: boolean;
}

/** The claim pause and the budget's spend as the scripts see them now (Python's `QuotaState.as_dict`). */
export interface QuotaState {
  readonly nowMs: number;
  readonly paused: boolean;
  /** 0: no pause on. */
  readonly pausedUntilMs: number;
  readonly pauseLeftMs: number;
  /** Rate limits in a row without a retry-after (the adaptive pause's doublings). */
  readonly streak: number;
  /** The last pause's length. */
  readonly pauseMs: number;
  /** Why the last pause began. */
  readonly reason: string;
  /** Pauses ever begun. */
  readonly pauses: number;
  readonly budget: { readonly day: BudgetPeriod; readonly month: BudgetPeriod };
  /** Whether a budget holds claims back now (a period's spend reached its limit). */
  readonly budgetSpent: boolean;
}

/** Where the quota state lives: the queue's hash, or a group's (its own pause and budget). */
function ops(group: string | undefined): { group: string } {
  return { group: group === undefined ? "" : checkGroup(group) };
}

async function run(c: Control, args: QuotaArgs): Promise<[number, number]> {
  const raw = await c.scripts.run("quota", c.keys, c.bundle.pack("quota", args));
  const refused = Array.isArray(raw) ? olderWorker(c.keys.queue, raw) : null;
  if (refused !== null) throw refused;
  if (!Array.isArray(raw) || raw.length !== 2)
    throw new ProtocolError(`quota: unexpected reply ${JSON.stringify(raw)}`);
  return [Number(raw[0]), Number(raw[1])];
}

/** `pauseClaims`'s `forMs` checked, whole ms (undefined: the adaptive pause). */
export function pauseMs(forMs: unknown): number | undefined {
  if (forMs === undefined) return undefined;
  if (typeof forMs !== "number")
    throw new InvalidArgument(`forMs must be a number of milliseconds, not ${describe(forMs)}`);
  if (!(Number.isFinite(forMs) && forMs >= 0))
    throw new InvalidArgument(`forMs must be >= 0, not ${describe(forMs)}`);
  const ms = Math.trunc(forMs);
  if (ms > 3_153_600_000_000)
    throw new InvalidArgument(`a pause must be 0..100 years in ms, not ${String(ms)}`);
  return ms;
}

/** Options of `Queue.pauseClaims`. */
export interface PauseOptions {
  /** How long, in milliseconds (left out: the adaptive pause, as a `RateLimited` handler's). */
  readonly forMs?: number;
  /** Why (kept with the pause; first 200 characters). */
  readonly reason?: string;
  /** Pause only this group's tasks (the other groups are claimed as before). */
  readonly group?: string;
}

/** Stop claims for `forMs` ms (undefined: the adaptive pause); a longer pause already on is kept. Its end (epoch ms). */
export async function pauseClaims(
  c: Control,
  forMs: number | undefined,
  options: PauseOptions,
): Promise<number> {
  const ms = pauseMs(forMs);
  const where = ops(options.group);
  const reason = options.reason ?? "";
  if (typeof reason !== "string")
    throw new InvalidArgument(`reason must be a string, not ${describe(reason)}`);
  const [until] = await run(c, {
    op: "pause",
    pause_ms: ms ?? "",
    reason: Array.from(reason).slice(0, 200).join(""),
    day_limit: "",
    month_limit: "",
    group: where.group,
    task_id: "",
  });
  return until;
}

/** End the claim pause (a group's own, with `group`) and forget the rate limits met in a row. */
export async function resumeClaims(c: Control, group: string | undefined): Promise<void> {
  const where = ops(group);
  await run(c, {
    op: "resume",
    pause_ms: "",
    reason: "",
    day_limit: "",
    month_limit: "",
    group: where.group,
    task_id: "",
  });
}

function limit(name: string, value: unknown): string {
  if (value === undefined || value === null) return "";
  if (value === "default") return "default";
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0 || value > 1e9) {
    throw new InvalidArgument(`${name} must be an int within 0..1000000000 or 'default'`);
  }
  return String(value);
}

/** Options of `Queue.setBudget`. */
export interface BudgetOptions {
  /** Cost units per UTC day; 0: none; "default": the config's again; left out: as it is. */
  readonly day?: BudgetLimit;
  /** Cost units per UTC calendar month (as `day`). */
  readonly month?: BudgetLimit;
  /** That group's own budget, over the config's `groupBudgetDay` / `groupBudgetMonth`. */
  readonly group?: string;
}

/** Set the spend budget at run time over the config's. */
export async function setBudget(c: Control, options: BudgetOptions): Promise<void> {
  const day = limit("day", options.day);
  const month = limit("month", options.month);
  const where = ops(options.group);
  await run(c, {
    op: "budget",
    pause_ms: "",
    reason: "",
    day_limit: day,
    month_limit: month,
    group: where.group,
    task_id: "",
  });
}

/** The UTC day and month `nowMs` falls in and when each ends (ms), as the scripts compute them. */
export function periodOf(nowMs: number): [string, number, string, number] {
  const at = new Date(nowMs);
  const y = at.getUTCFullYear();
  const m = at.getUTCMonth();
  const dayEnd = Date.UTC(y, m, at.getUTCDate()) + 86_400_000;
  const monthEnd = Date.UTC(y, m + 1, 1);
  const pad = (n: number, w = 2): string => String(n).padStart(w, "0");
  const month = `${pad(y, 4)}-${pad(m + 1)}`;
  return [`${month}-${pad(at.getUTCDate())}`, dayEnd, month, monthEnd];
}

function number(raw: string | undefined): number | null {
  if (raw === undefined || raw.trim() === "") return null;
  const value = Number(raw);
  return Number.isFinite(value) ? value : null;
}

/** The quota hash `raw` read as the scripts read it; `budgetDay` / `budgetMonth`: the config's. */
export function quotaState(
  raw: Readonly<Record<string, string>>,
  nowMs: number,
  budgetDay: number | null,
  budgetMonth: number | null,
): QuotaState {
  const int = (field: string): number => Math.trunc(number(raw[field]) ?? 0);
  const [day, dayEnd, month, monthEnd] = periodOf(nowMs);
  const daySet = number(raw.day_limit);
  const monthSet = number(raw.month_limit);
  const dayLimit = daySet !== null ? Math.trunc(daySet) : (budgetDay ?? 0);
  const monthLimit = monthSet !== null ? Math.trunc(monthSet) : (budgetMonth ?? 0);
  const daySpent = raw.day === day ? int("day_spent") : 0;
  const monthSpent = raw.month === month ? int("month_spent") : 0;
  const dayLeft = dayLimit <= 0 ? null : Math.max(0, dayLimit - daySpent);
  const monthLeft = monthLimit <= 0 ? null : Math.max(0, monthLimit - monthSpent);
  const until = int("until");
  const paused = until > nowMs;
  return {
    nowMs,
    paused,
    pausedUntilMs: paused ? until : 0,
    pauseLeftMs: Math.max(0, until - nowMs),
    streak: int("streak"),
    pauseMs: int("pause_ms"),
    reason: raw.reason ?? "",
    pauses: int("pauses"),
    budget: {
      day: {
        period: day,
        limit: dayLimit || null,
        spent: daySpent,
        left: dayLeft,
        resetsAtMs: dayEnd,
        runtime: daySet !== null,
      },
      month: {
        period: month,
        limit: monthLimit || null,
        spent: monthSpent,
        left: monthLeft,
        resetsAtMs: monthEnd,
        runtime: monthSet !== null,
      },
    },
    budgetSpent: dayLeft === 0 || monthLeft === 0,
  };
}

/** The claim pause and budget (the queue's, or `group`'s own under the config's per-group budget) now. */
export async function quota(
  c: Control,
  group: string | undefined,
  config: QueueConfig,
): Promise<QuotaState> {
  const raw = await readQuota(c, ops(group).group);
  const now = await queueMs(c);
  return group === undefined
    ? quotaState(raw, now, config.budgetDay, config.budgetMonth)
    : quotaState(raw, now, config.groupBudgetDay, config.groupBudgetMonth);
}
