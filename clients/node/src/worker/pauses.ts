/**
 * Which held runs a claim pause covers (the Python worker's `HandBack.paused`).
 *
 * After a handler meets a provider's limit (`RateLimited`) or reports its quota spent
 * (`reportQuota`), runs that start before the pause is written wait before their call
 * (`Execution.beginHold`). Once it is written, those it covers go back to the queue
 * without an attempt and the rest call: a queue-wide pause, or a group-scoped one of a
 * task in no group, covers them all; a group's covers that group's tasks alone. Claim
 * records carry no group, so the groups are read from the tasks' hashes here, in one
 * round trip, only when a pause is scoped to a group: never on a claim.
 *
 * @module
 */

import type { Run } from "./execution.js";
import { formatError } from "./failures.js";
import { logEvent } from "./log.js";

/** Claim pauses written, each `[task id, group scope]`. */
export type Pauses = readonly (readonly [string, boolean])[];

/**
 * Of the held `runs`, those `pauses` cover. `groupsOf` reads each task's group ("" for
 * none); if it fails, they are all covered, as a queue pause would cover them.
 */
export async function coveredRuns(runs: Run[], pauses: Pauses, groupsOf: (taskIds: readonly string[]) => Promise<string[]>): Promise<Run[]> {
  if (runs.length === 0 || !pauses.every(([, group]) => group)) return runs;
  const pausedBy = pauses.map(([taskId]) => taskId);
  let groups: string[];
  try {
    groups = await groupsOf([...pausedBy, ...runs.map((run) => run.task.id)]);
  } catch (error) {
    logEvent("warning", "groups_unread", { tasks: runs.length, error: formatError(error) });
    return runs;
  }
  const paused = new Set(groups.slice(0, pausedBy.length));
  if (paused.has("")) return runs; // a task in no group paused the queue
  return runs.filter((_, i) => paused.has(groups[pausedBy.length + i] ?? ""));
}
