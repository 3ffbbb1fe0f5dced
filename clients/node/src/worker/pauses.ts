/**
 * Which held runs a claim pause covers (the Python worker's `HandBack.paused`).
 *
 * After a handler meets a provider's limit (`RateLimited`) or reports its quota spent
 * (`reportQuota`), runs that start before the pause is written wait before their call
 * (`Execution.beginHold`). Once it is written, those it covers go back to the queue
 * without an attempt and the rest call: a queue-wide pause, or a group-scoped one of a
 * task in no group, covers them all; a group's covers that group's tasks alone. The
 * groups are the claim records'; only a pausing task that ended before its pause was
 * written has its group read, in one round trip.
 *
 * @module
 */

import type { Run } from "./execution.js";
import { formatError } from "./failures.js";
import { logEvent } from "./log.js";

/** Claim pauses written, each `[task id, group scope]`. */
export type Pauses = readonly (readonly [string, boolean])[];

/**
 * Of the held `runs`, those `pauses` cover. `groupOf` says the group a held task's claim
 * record carried (undefined: not held now); `groupsOf` reads the others' ("" for none);
 * if it fails, they are all covered, as a queue pause would cover them.
 */
export async function coveredRuns(
  runs: Run[],
  pauses: Pauses,
  groupOf: (taskId: string) => string | null | undefined,
  groupsOf: (taskIds: readonly string[]) => Promise<string[]>,
): Promise<Run[]> {
  if (runs.length === 0 || !pauses.every(([, group]) => group)) return runs;
  const known = new Map<string, string>();
  const unknown: string[] = [];
  for (const [taskId] of pauses) {
    const group = groupOf(taskId);
    if (group === undefined) unknown.push(taskId);
    else known.set(taskId, group ?? "");
  }
  if (unknown.length > 0) {
    try {
      const read = await groupsOf(unknown);
      unknown.forEach((taskId, i) => known.set(taskId, read[i] ?? ""));
    } catch (error) {
      logEvent("warning", "groups_unread", { tasks: runs.length, error: formatError(error) });
      return runs;
    }
  }
  const paused = new Set(pauses.map(([taskId]) => known.get(taskId) ?? ""));
  if (paused.has("")) return runs; // a task in no group paused the queue
  return runs.filter((run) => paused.has(run.task.group ?? ""));
}
