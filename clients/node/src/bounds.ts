/**
 * Bounds on every time and number a task can carry: the same values as the Python
 * package's `taskfleet.protocol.bounds`, so that whatever one client stores every reader
 * (the Lua scripts, the Python worker, either client's task reader) can represent.
 *
 * @module
 */

/** A delay, a deadline (seconds from now) and any duration of a queue's config: 100 years. */
export const MAX_DURATION_S = 100 * 365 * 24 * 3600;
/** Longest delay, in seconds. */
export const MAX_DELAY_S = MAX_DURATION_S;
/** Furthest deadline, in seconds from now. */
export const MAX_DEADLINE_S = MAX_DURATION_S;
/** A task's timeout: one year at most. */
export const MAX_TIMEOUT_S = 365 * 24 * 3600;
/** Integers the scripts compute with or pass to workers (cost, limits, counts). */
export const MAX_COUNT = 10 ** 9;
/** A task's cost in rate-limit units (0 takes nothing from the cost limit). */
export const MIN_COST = 0;
/** Highest cost of one task. */
export const MAX_COST = MAX_COUNT;
/** Starts a task may have. */
export const MIN_ATTEMPTS = 1;
/** Most starts a task may have. */
export const MAX_ATTEMPTS = 10_000;
/** Lowest priority (pending scores stay exact doubles within this range). */
export const PRIORITY_MIN = -1000;
/** Highest priority. */
export const PRIORITY_MAX = 1000;
/** A task id: 1 to 200 printable characters (ids travel NUL-separated in claim replies). */
export const MAX_TASK_ID_LEN = 200;
/** Most tasks one task may wait for (`after`). */
export const MAX_AFTER = 10_000;
/** Deepest nesting of arrays and objects in a payload. */
export const MAX_PAYLOAD_DEPTH = 200;
/** Latest epoch ms a reader maps to a time (9999-12-31T23:59:59.999Z); later reads as null. */
export const MAX_EPOCH_MS = 253_402_300_799_999;
/** Earliest epoch ms a reader maps to a time (year 1). */
export const MIN_EPOCH_MS = -62_135_596_800_000;
