/**
 * Bounds the worker keeps, the Python package's values (`protocol/bounds.py`).
 *
 * @module
 */

/** Largest payload or result any task may store (Redis' string limit). */
export const MAX_PAYLOAD_BYTES = 512 * 1024 * 1024;
/** Shortest lease TTL a queue may set. */
export const MIN_LEASE_TTL_S = 1.0;
/** Shortest heartbeat interval. */
export const MIN_HEARTBEAT_S = 0.1;
/** Most tasks one worker process runs at once. */
export const MAX_CONCURRENCY = 10_000;
/** Most tasks one call claims, completes or releases (larger asks are split). */
export const MAX_BATCH = 100;
/** Housekeeping bound of a claim (entries dropped on the way). */
export const CLAIM_HOUSEKEEPING_BOUND = 100;
/** Bound of one sweep call's steps. */
export const SWEEP_BOUND = 1000;
/** Records one repair call reads at most (`protocol/scripts.py` REPAIR_BOUND). */
export const REPAIR_BOUND = 500;
/** A dependency that ended this recently is left to the normal resolve (REPAIR_SETTLE_MS). */
export const REPAIR_SETTLE_MS = 5000;
/** Upper bound of --prefetch. */
export const MAX_PREFETCH = 10_000;
