/**
 * Groups within a queue at run time: each group's own settings (weight, concurrency cap,
 * rate limits; `Queue.setGroup` / `Queue.groupSettings`) and the groups with tasks now
 * (`Queue.groups`). The Python client's `protocol/groups.py`, on the same keys.
 *
 * @module
 */

import type { Control } from "./control.js";
import { checkGroup } from "./control.js";
import { InvalidArgument, describe } from "./errors.js";
import { floatRepr } from "./pyformat.js";
import { MAX_COUNT } from "./bounds.js";
import { UNIT_NAME } from "./providerquota.js";
import {
  GROUP_SETTING_FIELDS,
  GROUP_WEIGHT,
  readFairBy,
  readGroup,
  readGroupCounts,
  writeFairBy,
  writeGroupSettings,
} from "./protocol/groupstore.js";

/** The largest weight a group may have: scores of the ring stay exact doubles. */
export const MAX_WEIGHT = 1000;

/**
 * One group's own settings; null or left out: the queue's default for every group holds
 * (the config's `group*` fields).
 */
export interface GroupSettings {
  /** Its share of the claims against the other groups (1 = an equal share), > 0 and <= 1000. */
  readonly weight?: number | null;
  /** Its tasks running at once (0: no limit). */
  readonly maxConcurrency?: number | null;
  /** Tasks of it started per `rateLimitPeriodS`. */
  readonly rateLimitTasks?: number | null;
  /** Cost units of it started per `rateLimitPeriodS`. */
  readonly rateLimitCost?: number | null;
}

/** A group's settings as stored: each null where the queue's default holds. */
export interface StoredGroupSettings {
  readonly weight: number | null;
  readonly maxConcurrency: number | null;
  readonly rateLimitTasks: number | null;
  readonly rateLimitCost: number | null;
}

/** One group's tasks now: pending (waiting in its zset) and running, and its own claim pause's end (epoch ms, 0: none). */
export interface GroupCount {
  readonly group: string;
  readonly pending: number;
  readonly running: number;
  readonly pausedUntilMs: number;
}

/** `settings` checked (one line on what to fix), as the hash fields to store. */
export function groupFields(settings: GroupSettings): Record<string, string> {
  const out: Record<string, string> = {};
  const w = settings.weight;
  if (w !== undefined && w !== null) {
    if (typeof w !== "number" || !Number.isFinite(w) || !(w > 0 && w <= MAX_WEIGHT)) {
      throw new InvalidArgument(
        `weight must be a number > 0 and <= ${MAX_WEIGHT}, not ${describe(w)}`,
      );
    }
    out[GROUP_WEIGHT] = floatRepr(w);
  }
  for (const [name, field, low] of GROUP_SETTING_FIELDS) {
    const v = settings[name];
    if (v === undefined || v === null) continue;
    if (typeof v !== "number" || !Number.isInteger(v) || v < low || v > MAX_COUNT) {
      throw new InvalidArgument(
        `${field} must be an integer ${low}..${MAX_COUNT}, not ${describe(v)}`,
      );
    }
    out[field] = String(v);
  }
  return out;
}

/**
 * Replace `group`'s own settings in one transaction (all left out: it keeps none). A
 * group parked by its old limits is looked at again by the next claim; the hash's other
 * fields (the group's claim pause and budget) are kept.
 */
export async function setGroup(c: Control, group: string, settings: GroupSettings): Promise<void> {
  checkGroup(group);
  const fields = groupFields(settings);
  await writeGroupSettings(c, group, fields);
}

/**
 * Make the groups fair by their settled use of `unit` of the provider quotas their tasks
 * name (`"output_tokens"`, say), weighted as by claims; null or `"claims"`: by claims.
 */
export async function setFairBy(c: Control, unit: string | null): Promise<void> {
  const given: unknown = unit;
  if (given === null || given === "claims") return writeFairBy(c, null);
  if (typeof given !== "string" || !UNIT_NAME.test(given))
    throw new InvalidArgument(
      `fairBy: invalid quota unit ${describe(given)}: use 1-64 lower-case letters, digits or '_', starting with a letter, or 'claims'`,
    );
  return writeFairBy(c, given);
}

/** The unit the groups are fair by; null: by claims. */
export async function fairBy(c: Control): Promise<string | null> {
  return readFairBy(c);
}

function stored(raw: string | undefined): number | null {
  if (raw === undefined || raw.trim() === "") return null;
  const value = Number(raw);
  return Number.isFinite(value) ? value : null;
}

/** `group`'s own settings; a value that does not read is null (the default holds). */
export async function groupSettings(c: Control, group: string): Promise<StoredGroupSettings> {
  checkGroup(group);
  const raw = await readGroup(c, group);
  const none: StoredGroupSettings = {
    weight: null,
    maxConcurrency: null,
    rateLimitTasks: null,
    rateLimitCost: null,
  };
  const weight = stored(raw[GROUP_WEIGHT]);
  const read: Record<string, number | null> = { weight };
  for (const [name, field] of GROUP_SETTING_FIELDS) {
    const v = stored(raw[field]);
    read[name] = v === null ? null : Math.trunc(v);
  }
  try {
    groupFields(read); // out of bounds: none of them holds, as in Python
  } catch {
    return none;
  }
  return { ...none, ...read };
}

/**
 * Every group with pending or running tasks, and how many of each (pending: waiting in
 * its own zset), with its own claim pause's end; most pending first, then most running,
 * then by name.
 */
export async function groups(c: Control, nowMs: number): Promise<GroupCount[]> {
  const out = (await readGroupCounts(c)).map((stored): GroupCount => {
    let until = Math.trunc(Number(stored.pausedUntil ?? "0"));
    if (!Number.isFinite(until) || until <= nowMs) until = 0;
    return {
      group: stored.group,
      pending: stored.pending,
      running: Number(stored.running ?? 0),
      pausedUntilMs: until,
    };
  });
  return out.sort(
    (a, b) =>
      b.pending - a.pending ||
      b.running - a.running ||
      (a.group < b.group ? -1 : a.group > b.group ? 1 : 0),
  );
}
