/**
 * A schedule's slots: the instants its cron expression names in its time zone, with the
 * Python package's conventions across daylight-saving changes (`protocol/slots.py`):
 *
 * - a time that does not exist (the clock jumps over it): a fixed-time schedule fires once
 *   at the instant of the jump; a wildcard one has no slot there;
 * - a time that exists twice: a fixed-time schedule fires at its first occurrence only; a
 *   wildcard one at both.
 *
 * Offsets come from the runtime's time-zone data (`Intl`), the Python client's from
 * `zoneinfo`: the same IANA database, possibly of another release.
 *
 * @module
 */

import { type Cron, DAY } from "./cron.js";
import { InvalidArgument, pyRepr } from "./errors.js";

/** Longest stretch of a clock going back. */
export const FOLD_MARGIN = 3 * 3600;
/** How far ahead a slot is looked for (seconds). */
export const HORIZON = 9 * 366 * DAY;

/** A time zone: UTC, or an IANA zone read through `Intl`. */
export interface Zone {
  readonly name: string;
  readonly utc: boolean;
  readonly format?: Intl.DateTimeFormat;
}

const zones = new Map<string, Zone>();
const UTC: Zone = { name: "UTC", utc: true };

/** The zone named `name` (IANA, e.g. `Europe/Paris`); `InvalidArgument` if unknown. */
export function zone(name: unknown): Zone {
  if (name === "UTC" || name === "Etc/UTC" || name === "Z") return UTC;
  const problem = new InvalidArgument(
    `unknown time zone ${typeof name === "string" ? pyRepr(name) : String(name)}: use an IANA name such as 'UTC' or 'Europe/Paris'`,
  );
  if (
    typeof name !== "string" ||
    name === "" ||
    name !== name.trim() ||
    name.includes("..") ||
    name.startsWith("/")
  ) {
    throw problem;
  }
  const cached = zones.get(name);
  if (cached !== undefined) return cached;
  if (!/^[A-Za-z][A-Za-z0-9_+\-/]*$/.test(name)) throw problem;
  let format: Intl.DateTimeFormat;
  try {
    format = new Intl.DateTimeFormat("en-US", {
      timeZone: name,
      hourCycle: "h23",
      year: "numeric",
      month: "numeric",
      day: "numeric",
      hour: "numeric",
      minute: "numeric",
      second: "numeric",
      era: "short",
    });
  } catch {
    throw problem;
  }
  const found: Zone = { name, utc: false, format };
  zones.set(name, found);
  return found;
}

/** The zone's UTC offset at instant `t` (epoch seconds), in seconds. */
export function offsetAt(t: number, tz: Zone): number {
  if (tz.format === undefined) return 0;
  const parts: Record<string, string> = {};
  for (const p of tz.format.formatToParts(new Date(t * 1000))) parts[p.type] = p.value;
  let year = Number(parts.year);
  if (parts.era === "BC" || parts.era === "B") year = 1 - year;
  const wall = Date.UTC(
    year,
    Number(parts.month) - 1,
    Number(parts.day),
    Number(parts.hour),
    Number(parts.minute),
    Number(parts.second),
  );
  // Date.UTC maps years 0..99 to 1900..1999: set the year again when it is one of those
  const fixed = year >= 0 && year < 100 ? new Date(wall).setUTCFullYear(year) : wall;
  return Math.round(fixed / 1000) - Math.floor(t);
}

/**
 * The offsets a wall time `n` (naive seconds) has with Python's fold 0 and fold 1: equal
 * for a time that exists once; fold 0's larger for a repeated time, smaller for a skipped one.
 */
export function naiveOffsets(n: number, tz: Zone): [number, number] {
  const before = offsetAt(n - DAY, tz);
  const after = offsetAt(n + DAY, tz);
  const valid = (o: number): boolean => offsetAt(n - o, tz) === o;
  if (before === after) {
    const o = valid(before) ? before : offsetAt(n - before, tz);
    return [o, o];
  }
  const [b, a] = [valid(before), valid(after)];
  if (b && a) return [before, after]; // repeated: fold 0 is the earlier instant
  if (b) return [before, before];
  if (a) return [after, after];
  return [before, after]; // skipped
}

function transitionIn(lo: number, hi: number, before: number, tz: Zone): number {
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (offsetAt(mid, tz) === before) lo = mid;
    else hi = mid;
  }
  return hi;
}

function nearTransition(t: number, tz: Zone): boolean {
  const off = offsetAt(t, tz);
  return offsetAt(t - FOLD_MARGIN, tz) !== off || offsetAt(t + FOLD_MARGIN, tz) !== off;
}

function instants(cron: Cron, n: number, tz: Zone): number[] {
  const [o0, o1] = naiveOffsets(n, tz);
  if (o0 === o1) return [n - o0];
  if (o0 > o1) return cron.fixed ? [n - o0] : [n - o0, n - o1];
  if (!cron.fixed) return [];
  return [transitionIn(n - o1, n - o0, o0, tz)];
}

/** The slots in (after, until], ascending, at most the first `limit`. */
export function slotsBetween(
  cron: Cron,
  tz: Zone,
  after: number,
  until: number,
  limit: number,
): number[] {
  if (tz.utc) {
    const out: number[] = [];
    let n = cron.nextNaive(after);
    while (n !== null && n <= until && out.length < limit) {
      out.push(n);
      n = cron.nextNaive(n);
    }
    return out;
  }
  const found = new Set<number>();
  let start = after + offsetAt(after, tz);
  let end = until + offsetAt(until, tz);
  if (nearTransition(after, tz)) start -= FOLD_MARGIN;
  if (nearTransition(until, tz)) end += FOLD_MARGIN;
  let n = cron.nextNaive(start);
  while (n !== null && n <= end) {
    for (const slot of instants(cron, n, tz)) if (after < slot && slot <= until) found.add(slot);
    n = cron.nextNaive(n);
  }
  return [...found].sort((a, b) => a - b).slice(0, limit);
}

/** The first slot strictly after instant `after` (epoch seconds); null when none within nine years. */
export function nextSlot(cron: Cron, tz: Zone, after: number): number | null {
  if (tz.utc) return cron.nextNaive(after);
  const off = offsetAt(after, tz);
  if (offsetAt(after + FOLD_MARGIN, tz) === off) {
    const n = cron.nextNaive(after + off);
    if (n === null) return null;
    const candidate = n - off;
    const [o0, o1] = naiveOffsets(n, tz);
    if (offsetAt(candidate, tz) === off && o0 === off && o1 === off) return candidate;
  }
  let window = 3600;
  while (window <= HORIZON) {
    const found = slotsBetween(cron, tz, after, after + window, 1);
    if (found[0] !== undefined) return found[0];
    if (cron.nextNaive(after + offsetAt(after, tz) - FOLD_MARGIN) === null) return null;
    window *= 8;
  }
  return null;
}
