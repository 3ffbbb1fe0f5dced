/**
 * Bounds the worker keeps: the Python package's values (`protocol/bounds.py`); those both
 * clients share come from the generated table (`protocol/defaults.ts`).
 *
 * @module
 */

export {
  MAX_BATCH,
  MAX_CONCURRENCY,
  MAX_PAYLOAD_BYTES,
  MIN_HEARTBEAT_S,
  MIN_LEASE_TTL_S,
} from "../protocol/defaults.js";
/** Housekeeping bound of a claim (entries dropped on the way). */
export const CLAIM_HOUSEKEEPING_BOUND = 100;
/** Bound of one sweep call's steps. */
export const SWEEP_BOUND = 1000;
/** Records one repair call reads at most (`protocol/queue_ops.py` REPAIR_BOUND). */
export const REPAIR_BOUND = 500;
/** A dependency that ended this recently is left to the normal resolve (REPAIR_SETTLE_MS). */
export const REPAIR_SETTLE_MS = 5000;
/** Upper bound of --prefetch. */
export const MAX_PREFETCH = 10_000;
