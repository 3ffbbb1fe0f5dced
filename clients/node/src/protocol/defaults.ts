/**
 * The queue config's defaults and the bounds every client keeps: the Python package's
 * `protocol/bounds.py` and `protocol/defaults.py`. This file is generated from
 * `taskfleet/protocol/defaults_table.py` by `make bundle`: edit the table, not this
 * file.
 *
 * @module
 */

/** A delay, a deadline (seconds from now) and every duration of a queue's config: 100 years. */
export const MAX_DURATION_S = 100 * 365 * 24 * 3600;
/** Longest delay. */
export const MAX_DELAY_S = MAX_DURATION_S;
/** Furthest deadline, from now. */
export const MAX_DEADLINE_S = MAX_DURATION_S;
/** A task's timeout (and the queue's default_timeout_s): one year. None: no timeout. */
export const MAX_TIMEOUT_S = 365 * 24 * 3600;
/** Integers the scripts compute with or pass to workers (cost, limits, counts). */
export const MAX_COUNT = 10**9;
/** A task's cost in rate-limit units (0: takes nothing). */
export const MIN_COST = 0;
/** Highest cost of one task. */
export const MAX_COST = MAX_COUNT;
/** Fewest starts a task may have. */
export const MIN_ATTEMPTS = 1;
/** Most starts a task may have (per task or the queue's). */
export const MAX_ATTEMPTS = 10_000;
/** Most lost workers a task may survive. */
export const MAX_LOST = MAX_ATTEMPTS;
/** Lowest priority: pending scores stay exact doubles. */
export const PRIORITY_MIN = -1000;
/** Highest priority. */
export const PRIORITY_MAX = 1000;
/** A task id: 1 to 200 printable characters (ids travel NUL-separated in claim replies). */
export const MAX_TASK_ID_LEN = 200;
/** Most tasks one task may wait for (`after`). */
export const MAX_AFTER = 10_000;
/** Payloads and results: Redis refuses strings over 512 MiB. */
export const MAX_PAYLOAD_BYTES = 512 * 1024 * 1024;
/**
 * Deepest nesting of arrays and objects in a payload: every reader (a worker's handler thread,
 * Lua's cjson, a CLI printing it) can parse and print it with room to spare.
 */
export const MAX_PAYLOAD_DEPTH = 200;
/**
 * Latest epoch ms a `datetime` can hold (9999-12-31T23:59:59.999Z); readers map a stored time
 * beyond it (or before year 1) to None.
 */
export const MAX_EPOCH_MS = 253_402_300_799_999;
/** Earliest epoch ms a reader maps (year 1). */
export const MIN_EPOCH_MS = -62_135_596_800_000;
/**
 * Shortest lease TTL a queue may have: below it a fleet spends its time heartbeating (a lease TTL
 * of 0.01 s made a 3 ms heartbeat).
 */
export const MIN_LEASE_TTL_S = 1.0;
/** Shortest heartbeat a worker beats at. */
export const MIN_HEARTBEAT_S = 0.1;
/**
 * Slots of one worker process (`--concurrency`): a sync handler's threads, an async one's tasks.
 * Above this a claim, a heartbeat or a drain's hand-back grows past what one script call should do;
 * run more processes (`--processes`) or pods instead.
 */
export const MAX_CONCURRENCY = 10_000;
/**
 * Most tasks one script call claims, completes or gives back: the client loops over larger asks in
 * batches of this, so no call blocks Redis for more than a few ms (a release of 18,893 tasks in one
 * call took 885 ms).
 */
export const MAX_BATCH = 100;
/**
 * Retries a handler may ask for (`RetryAfter`) per task without spending an attempt; past this,
 * each one counts as a failed attempt (so `max_attempts` still ends it).
 */
export const MAX_DEFERRALS = 20;
/** Largest checkpoint state of a task (its JSON text): the next attempt's claim carries it. */
export const MAX_CHECKPOINT_BYTES = 1024 * 1024;
/** Most chunks one task's output stream holds (emit), every attempt's together. */
export const MAX_OUTPUT_ENTRIES = 10_000;
/** Most bytes of chunks one task's output stream holds, every attempt's together. */
export const MAX_OUTPUT_BYTES = 16 * 1024 * 1024;

/** A field of a queue's `config` hash: its stored name, kind, bounds, default, unit. */
export interface ConfigFieldSpec {
  readonly stored: string;
  readonly int: boolean;
  /** The lower bound: excluded when `above` (a limit of 0 is unset), else included. */
  readonly min: number;
  readonly above: boolean;
  readonly max: number;
  /** null: unset (no limit). */
  readonly default: number | null;
  readonly unit: string;
  readonly doc: string;
}

/** Every field of the `config` hash by its camelCase name, in QueueConfig's order. */
export const CONFIG_FIELDS = {
  maxConcurrency: {
    stored: "max_concurrency",
    int: true,
    min: 0,
    above: false,
    max: MAX_COUNT,
    default: 0,
    unit: "tasks",
    doc: "tasks running at once, fleet-wide; 0 = no limit",
  },
  rateLimitTasks: {
    stored: "rate_limit_tasks",
    int: true,
    min: 0,
    above: true,
    max: MAX_COUNT,
    default: null,
    unit: "tasks",
    doc: "tasks started per period",
  },
  rateLimitCost: {
    stored: "rate_limit_cost",
    int: true,
    min: 0,
    above: true,
    max: MAX_COUNT,
    default: null,
    unit: "cost",
    doc: "cost units started per period",
  },
  rateLimitPeriodS: {
    stored: "rate_limit_period_s",
    int: false,
    min: 0,
    above: true,
    max: MAX_DURATION_S,
    default: 1,
    unit: "s",
    doc: "the period of both rate limits",
  },
  maxAttempts: {
    stored: "max_attempts",
    int: true,
    min: 1,
    above: false,
    max: MAX_ATTEMPTS,
    default: 3,
    unit: "starts",
    doc: "starts before a failing task goes dead (of a task enqueued without its own)",
  },
  backoffBaseS: {
    stored: "backoff_base_s",
    int: false,
    min: 0,
    above: false,
    max: MAX_DURATION_S,
    default: 1,
    unit: "s",
    doc: "first retry delay",
  },
  backoffMaxS: {
    stored: "backoff_max_s",
    int: false,
    min: 0,
    above: false,
    max: MAX_DURATION_S,
    default: 300,
    unit: "s",
    doc: "longest retry delay",
  },
  backoffJitter: {
    stored: "backoff_jitter",
    int: false,
    min: 0,
    above: false,
    max: 1,
    default: 0.2,
    unit: "fraction",
    doc: "+- fraction of each backoff",
  },
  maxLost: {
    stored: "max_lost",
    int: true,
    min: 1,
    above: false,
    max: MAX_LOST,
    default: 3,
    unit: "losses",
    doc: "lost workers a task survives; one more and it goes dead",
  },
  leaseTtlS: {
    stored: "lease_ttl_s",
    int: false,
    min: MIN_LEASE_TTL_S,
    above: false,
    max: MAX_DURATION_S,
    default: 30,
    unit: "s",
    doc: "a lease not extended for this long expires",
  },
  doneRetentionS: {
    stored: "done_retention_s",
    int: false,
    min: 0,
    above: false,
    max: MAX_DURATION_S,
    default: 3600,
    unit: "s",
    doc: "how long done tasks are kept (0: deleted at completion)",
  },
  deadRetentionS: {
    stored: "dead_retention_s",
    int: false,
    min: 0,
    above: false,
    max: MAX_DURATION_S,
    default: 259200,
    unit: "s",
    doc: "how long dead and cancelled tasks are kept",
  },
  maxPayloadBytes: {
    stored: "max_payload_bytes",
    int: true,
    min: 0,
    above: true,
    max: MAX_PAYLOAD_BYTES,
    default: 1048576,
    unit: "bytes",
    doc: "bound on payloads and results",
  },
  defaultTimeoutS: {
    stored: "default_timeout_s",
    int: false,
    min: 0,
    above: true,
    max: MAX_TIMEOUT_S,
    default: null,
    unit: "s",
    doc: "a task's timeout when it sets none; unset: none",
  },
  throttleBaseS: {
    stored: "throttle_base_s",
    int: false,
    min: 0,
    above: true,
    max: MAX_DURATION_S,
    default: 1,
    unit: "s",
    doc: "the fleet's first claim pause after a rate limit without a retry-after",
  },
  throttleMaxS: {
    stored: "throttle_max_s",
    int: false,
    min: 0,
    above: true,
    max: MAX_DURATION_S,
    default: 300,
    unit: "s",
    doc: "cap of that pause, which doubles with each rate limit in a row",
  },
  budgetDay: {
    stored: "budget_day",
    int: true,
    min: 0,
    above: true,
    max: MAX_COUNT,
    default: null,
    unit: "cost",
    doc: "cost units claimed per UTC day; claims wait for the next day past it",
  },
  budgetMonth: {
    stored: "budget_month",
    int: true,
    min: 0,
    above: true,
    max: MAX_COUNT,
    default: null,
    unit: "cost",
    doc: "cost units claimed per UTC calendar month",
  },
  groupMaxConcurrency: {
    stored: "group_max_concurrency",
    int: true,
    min: 0,
    above: false,
    max: MAX_COUNT,
    default: 0,
    unit: "tasks",
    doc: "tasks of one group running at once (every group's default); 0 = no limit",
  },
  groupRateLimitTasks: {
    stored: "group_rate_limit_tasks",
    int: true,
    min: 0,
    above: true,
    max: MAX_COUNT,
    default: null,
    unit: "tasks",
    doc: "tasks of one group started per rate_limit_period_s (every group's default)",
  },
  groupRateLimitCost: {
    stored: "group_rate_limit_cost",
    int: true,
    min: 0,
    above: true,
    max: MAX_COUNT,
    default: null,
    unit: "cost",
    doc: "cost of one group started per rate_limit_period_s (every group's default)",
  },
  groupBudgetDay: {
    stored: "group_budget_day",
    int: true,
    min: 0,
    above: true,
    max: MAX_COUNT,
    default: null,
    unit: "cost",
    doc: "cost units one group claims per UTC day (every group's default)",
  },
  groupBudgetMonth: {
    stored: "group_budget_month",
    int: true,
    min: 0,
    above: true,
    max: MAX_COUNT,
    default: null,
    unit: "cost",
    doc: "cost units one group claims per UTC calendar month (every group's default)",
  },
} as const satisfies Record<string, ConfigFieldSpec>;
