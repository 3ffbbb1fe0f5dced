/**
 * Cron expressions, parsed and matched against wall-clock times: the Python package's
 * `protocol/cron.py`, rule for rule, so a schedule's slots are the same whichever client
 * stored it. Five fields (minute hour day-of-month month day-of-week) or six with seconds
 * first; `*`, numbers, ranges, steps, lists, month and weekday names, weekday 7 = Sunday,
 * macros (`@daily`, ...); both day fields restricted: a day matches either.
 *
 * A wall-clock time here is "naive seconds": seconds since 1970-01-01 00:00 on the clock
 * of the schedule's zone (`slots` maps them to instants).
 *
 * @module
 */

import { InvalidArgument, pyRepr } from "./errors.js";

/** Seconds in a day. */
export const DAY = 86_400;
/** How far ahead a search for the next matching day looks (covers Feb 29 across 2100). */
export const HORIZON_DAYS = 9 * 366;
/** The longest cron expression taken. */
export const MAX_CRON_LENGTH = 200;

const MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"];
const DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
const MACROS: Readonly<Record<string, string>> = {
  "@yearly": "0 0 1 1 *",
  "@annually": "0 0 1 1 *",
  "@monthly": "0 0 1 * *",
  "@weekly": "0 0 * * 0",
  "@daily": "0 0 * * *",
  "@midnight": "0 0 * * *",
  "@hourly": "0 * * * *",
};

class FieldError extends Error {}

function numberOf(text: string, names: readonly string[], offset: number, what: string): number {
  const index = names.indexOf(text.toLowerCase());
  if (names.length > 0 && index >= 0) return index + offset;
  if (!/^[0-9]+$/.test(text))
    throw new FieldError(`${what} field: ${pyRepr(text)} is not a number`);
  return Number(text);
}

function field(
  text: string,
  lo: number,
  hi: number,
  what: string,
  names: readonly string[] = [],
  offset = 0,
): number[] {
  const values = new Set<number>();
  for (const part of text.split(",")) {
    const slash = part.indexOf("/");
    const body = slash < 0 ? part : part.slice(0, slash);
    const stepText = slash < 0 ? "" : part.slice(slash + 1);
    let step = 1;
    if (stepText !== "") {
      if (!/^[0-9]+$/.test(stepText) || Number(stepText) === 0) {
        throw new FieldError(`${what} field: step ${pyRepr(stepText)} must be a positive number`);
      }
      step = Number(stepText);
    }
    let start: number;
    let end: number;
    if (body === "*" || body === "?") {
      [start, end] = [lo, hi];
    } else if (body.includes("-")) {
      const dash = body.indexOf("-");
      start = numberOf(body.slice(0, dash), names, offset, what);
      end = numberOf(body.slice(dash + 1), names, offset, what);
    } else {
      start = numberOf(body, names, offset, what);
      end = stepText !== "" ? hi : start;
    }
    if (!(lo <= start && start <= hi && lo <= end && end <= hi)) {
      throw new FieldError(`${what} field: ${pyRepr(part)} is outside ${lo}-${hi}`);
    }
    if (start > end) throw new FieldError(`${what} field: range ${pyRepr(part)} runs backwards`);
    for (let v = start; v <= end; v += step) values.add(v);
  }
  return [...values].sort((a, b) => a - b);
}

/** The civil date of a day number (days since 1970-01-01). */
function civil(day: number): { year: number; month: number; date: number; weekday: number } {
  const d = new Date(day * DAY * 1000);
  return {
    year: d.getUTCFullYear(),
    month: d.getUTCMonth() + 1,
    date: d.getUTCDate(),
    weekday: d.getUTCDay(),
  };
}

function dayNumber(year: number, month: number, date: number): number {
  return Math.round(Date.UTC(year, month - 1, date) / (DAY * 1000));
}

/** The first index of `sorted` whose value is >= `value` (bisect_left). */
function bisectLeft(sorted: readonly number[], value: number): number {
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if ((sorted[mid] ?? 0) < value) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** A parsed cron expression. `fixed`: its seconds, minutes and hours are not wildcards. */
export class Cron {
  private readonly dayCache = new Map<number, boolean>();

  constructor(
    readonly text: string,
    readonly seconds: readonly number[],
    readonly minutes: readonly number[],
    readonly hours: readonly number[],
    readonly days: ReadonlySet<number>,
    readonly months: ReadonlySet<number>,
    readonly weekdays: ReadonlySet<number>,
    readonly dayOr: boolean,
    readonly fixed: boolean,
  ) {}

  /** Whether day number `day` (days since 1970-01-01) matches the day fields. */
  dayMatches(day: number): boolean {
    const cached = this.dayCache.get(day);
    if (cached !== undefined) return cached;
    const d = civil(day);
    const byDay = this.days.has(d.date);
    const byWeekday = this.weekdays.has(d.weekday);
    const ok = this.months.has(d.month) && (this.dayOr ? byDay || byWeekday : byDay && byWeekday);
    if (this.dayCache.size > 4096) this.dayCache.clear();
    this.dayCache.set(day, ok);
    return ok;
  }

  private timeAfter(sod: number): number | null {
    const [hours, minutes, seconds] = [this.hours, this.minutes, this.seconds];
    const first = (list: readonly number[]): number => list[0] ?? 0;
    if (sod < 0) return first(hours) * 3600 + first(minutes) * 60 + first(seconds);
    const h = Math.floor(sod / 3600);
    const m = Math.floor((sod % 3600) / 60);
    const s = sod % 60;
    let i = bisectLeft(hours, h);
    if (i < hours.length && hours[i] === h) {
      let j = bisectLeft(minutes, m);
      if (j < minutes.length && minutes[j] === m) {
        const k = bisectLeft(seconds, s + 1);
        if (k < seconds.length) return sod - s + (seconds[k] ?? 0);
        j += 1;
      }
      if (j < minutes.length) return h * 3600 + (minutes[j] ?? 0) * 60 + first(seconds);
      i += 1;
    }
    if (i < hours.length) return (hours[i] ?? 0) * 3600 + first(minutes) * 60 + first(seconds);
    return null;
  }

  /** The first matching wall-clock second strictly after `after` (naive seconds), or null within the horizon. */
  nextNaive(after: number): number | null {
    const day = Math.floor(after / DAY);
    const sod = after - day * DAY;
    if (this.dayMatches(day)) {
      const t = this.timeAfter(sod);
      if (t !== null) return day * DAY + t;
    }
    const first = this.timeAfter(-1) ?? 0;
    let d = day + 1;
    const end = day + HORIZON_DAYS;
    while (d <= end) {
      const c = civil(d);
      if (!this.months.has(c.month)) {
        d = c.month === 12 ? dayNumber(c.year + 1, 1, 1) : dayNumber(c.year, c.month + 1, 1);
        continue;
      }
      if (this.dayMatches(d)) return d * DAY + first;
      d += 1;
    }
    return null;
  }
}

const parsedCache = new Map<string, Cron>();

/** Parse a cron expression; an `InvalidArgument` says what is wrong. */
export function parseCron(text: unknown): Cron {
  if (typeof text !== "string" || text.trim() === "")
    throw new InvalidArgument("cron expression is empty");
  const cached = parsedCache.get(text);
  if (cached !== undefined) return cached;
  if (text.length > MAX_CRON_LENGTH) {
    throw new InvalidArgument(`cron expression is longer than ${MAX_CRON_LENGTH} characters`);
  }
  const expanded = MACROS[text.trim().toLowerCase()] ?? text;
  let parts = expanded.split(/\s+/).filter((p) => p !== "");
  if (parts.length === 5) {
    parts = ["0", ...parts];
  } else if (parts.length !== 6) {
    throw new InvalidArgument(
      `cron ${pyRepr(text)} has ${parts.length} fields; expected 5 (minute hour day month ` +
        "weekday) or 6 (second first), or a macro like @daily",
    );
  }
  const [secondF = "", minuteF = "", hourF = "", dayF = "", monthF = "", weekdayF = ""] = parts;
  let cron: Cron;
  try {
    const weekdays = field(weekdayF, 0, 7, "day-of-week", DAYS);
    const dayStar = dayF.startsWith("*") || dayF.startsWith("?");
    const weekdayStar = weekdayF.startsWith("*") || weekdayF.startsWith("?");
    cron = new Cron(
      text,
      field(secondF, 0, 59, "second"),
      field(minuteF, 0, 59, "minute"),
      field(hourF, 0, 23, "hour"),
      new Set(field(dayF, 1, 31, "day-of-month")),
      new Set(field(monthF, 1, 12, "month", MONTHS, 1)),
      new Set(weekdays.map((w) => w % 7)),
      !dayStar && !weekdayStar,
      ![secondF, minuteF, hourF].some((p) => p.startsWith("*")),
    );
  } catch (error) {
    if (error instanceof FieldError)
      throw new InvalidArgument(`cron ${pyRepr(text)}: ${error.message}`);
    throw error;
  }
  if (!everMatches(cron))
    throw new InvalidArgument(`cron ${pyRepr(text)} never matches a date (e.g. 30 February)`);
  if (parsedCache.size > 4096) parsedCache.clear();
  parsedCache.set(text, cron);
  return cron;
}

function everMatches(cron: Cron): boolean {
  const longest: Readonly<Record<number, number>> = { 2: 29, 4: 30, 6: 30, 9: 30, 11: 30 };
  if (cron.dayOr || cron.weekdays.size === 0) return true;
  const first = Math.min(...cron.days);
  return [...cron.months].some((m) => first <= (longest[m] ?? 31));
}
