/**
 * Options objects checked for keys they do not take: a misspelt option (`{ priorty: 5 }`)
 * or a symbol key is refused with the key's name, never ignored.
 *
 * @module
 */

import { InvalidArgument } from "./errors.js";

/** How many single-character edits turn `a` into `b` (Levenshtein). */
function distance(a: string, b: string): number {
  let row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++) {
      next.push(
        Math.min(
          (row[j] ?? 0) + 1,
          (next[j - 1] ?? 0) + 1,
          (row[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1),
        ),
      );
    }
    row = next;
  }
  return row[b.length] ?? 0;
}

/** The known name `key` was likely meant as: same letters in another case, or within two edits. */
export function nearest(key: string, known: Iterable<string>): string | undefined {
  let best: string | undefined;
  let bestDistance = 3;
  for (const name of known) {
    const d = name.toLowerCase() === key.toLowerCase() ? 0 : distance(key, name);
    if (d < bestDistance) [best, bestDistance] = [name, d];
  }
  return best;
}

/**
 * Options a BullMQ user types, with what to write here instead. Each is refused (never
 * ignored, never taken as an alias), with this line, where the option it names is known.
 */
const BULLMQ_HINTS: Readonly<Record<string, { readonly where: string; readonly hint: string }>> = {
  attempts: {
    where: "maxAttempts",
    hint: "taskfleet's is 'maxAttempts': starts in all, as BullMQ's attempts",
  },
  jobId: {
    where: "taskId",
    hint: "taskfleet's is 'taskId'; the same id with other options throws TaskExists",
  },
  backoff: {
    where: "taskId",
    hint: "retry backoff is the queue's config: queue.configure({ backoffBaseMs, backoffMaxMs })",
  },
  removeOnComplete: {
    where: "taskId",
    hint: "how long done tasks are kept is the queue's config: queue.configure({ doneRetentionMs })",
  },
  removeOnFail: {
    where: "taskId",
    hint: "how long dead tasks are kept is the queue's config: queue.configure({ deadRetentionMs })",
  },
  repeat: {
    where: "taskId",
    hint: "repeating tasks are schedules: queue.schedule(name, cron, payload)",
  },
  lifo: {
    where: "taskId",
    hint: "taskfleet has no LIFO order; use 'priority' (higher runs first)",
  },
};

/**
 * Why `key` is no option of `known` (one line), naming the option meant: a BullMQ name's
 * counterpart, a duration's `...Ms` name (`timeout`, `leaseTtlS` → `timeoutMs`,
 * `leaseTtlMs`), or a near miss.
 */
export function unknownOptionHint(key: string, known: ReadonlySet<string>): string {
  const bullmq = BULLMQ_HINTS[key];
  if (bullmq !== undefined && known.has(bullmq.where)) return ` (${bullmq.hint})`;
  for (const ms of [`${key}Ms`, `${key.replace(/S$/, "")}Ms`]) {
    if (ms !== key && known.has(ms))
      return ` (durations are milliseconds, in options named ...Ms: '${ms}')`;
  }
  const meant = nearest(key, known);
  return meant === undefined ? "" : ` (did you mean '${meant}'?)`;
}

/**
 * Refuse `options` (an object a caller passed; undefined or null: nothing to check) when it
 * has a key not in `known`, or any symbol key: an `InvalidArgument` naming `what`, the key
 * and the option meant (`unknownOptionHint`).
 */
export function checkOptionKeys(options: unknown, known: ReadonlySet<string>, what: string): void {
  if (options === undefined || options === null) return;
  if (typeof options !== "object")
    throw new InvalidArgument(`${what} must be an object, not ${typeof options}`);
  for (const key of Reflect.ownKeys(options)) {
    if (typeof key === "symbol") {
      throw new InvalidArgument(`${what} takes no symbol keys, not ${key.toString()}`);
    }
    if (known.has(key)) continue;
    throw new InvalidArgument(
      `${what} has no option '${key}'${unknownOptionHint(key, known)}; known: ${[...known].sort().join(", ")}`,
    );
  }
}
