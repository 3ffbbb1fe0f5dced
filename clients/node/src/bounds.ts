/**
 * Bounds on every time and number a task can carry: the same values as the Python
 * package's `taskfleet.protocol.bounds`, both generated from one table
 * (`protocol/defaults.ts`), so that whatever one client stores every reader (the Lua
 * scripts, the Python worker, either client's task reader) can represent.
 *
 * @module
 */

export {
  MAX_AFTER,
  MAX_ATTEMPTS,
  MAX_CHECKPOINT_BYTES,
  MAX_COST,
  MAX_COUNT,
  MAX_DEADLINE_S,
  MAX_DELAY_S,
  MAX_DURATION_S,
  MAX_EPOCH_MS,
  MAX_OUTPUT_BYTES,
  MAX_OUTPUT_ENTRIES,
  MAX_PAYLOAD_DEPTH,
  MAX_TASK_ID_LEN,
  MAX_TIMEOUT_S,
  MIN_ATTEMPTS,
  MIN_COST,
  MIN_EPOCH_MS,
  PRIORITY_MAX,
  PRIORITY_MIN,
} from "./protocol/defaults.js";
