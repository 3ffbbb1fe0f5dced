/**
 * A queue's shared settings (the `config` hash every script reads at each call), as the
 * Python package's `QueueConfig` checks and stores them: the same fields, bounds and
 * cross-field rules, stored as the same text (`Queue.configure`, `Queue.config`).
 *
 * @module
 */

import { MAX_ATTEMPTS, MAX_COUNT, MAX_DURATION_S, MAX_TIMEOUT_S } from "./bounds.js";
import { InvalidArgument } from "./errors.js";
import { floatRepr } from "./pyformat.js";

/** Bound on payloads and results a queue may set (512 MiB, as Redis's largest string). */
export const MAX_PAYLOAD_BYTES = 512 * 1024 * 1024;
/** Shortest lease a queue may set, in seconds. */
export const MIN_LEASE_TTL_S = 1;
/** Most lost workers a task may survive. */
export const MAX_LOST = MAX_ATTEMPTS;

/** A queue's settings; a field left out (or null, where it may be) takes its default. */
export interface QueueConfig {
  /** Tasks running at once, fleet-wide; 0 = no limit. */
  maxConcurrency: number;
  /** Tasks started per period (null: no limit). */
  rateLimitTasks: number | null;
  /** Cost units started per period (null: no limit). */
  rateLimitCost: number | null;
  rateLimitPeriodS: number;
  /** Starts before a failing task goes dead. */
  maxAttempts: number;
  backoffBaseS: number;
  backoffMaxS: number;
  /** ± fraction of each backoff. */
  backoffJitter: number;
  /** Lost workers a task survives; one more and it goes dead. */
  maxLost: number;
  /** A lease not extended for this long expires. */
  leaseTtlS: number;
  doneRetentionS: number;
  deadRetentionS: number;
  /** Bound on payloads and results. */
  maxPayloadBytes: number;
  defaultTimeoutS: number | null;
  /** The fleet's first claim pause after a rate limit without a retry-after. */
  throttleBaseS: number;
  /** Cap of that pause, which doubles with each rate limit in a row. */
  throttleMaxS: number;
  /** Cost units claimed per UTC day (null: no budget). */
  budgetDay: number | null;
  /** Cost units claimed per UTC calendar month. */
  budgetMonth: number | null;
  /** Tasks of one group running at once (every group's default); 0 = no limit. */
  groupMaxConcurrency: number;
  groupRateLimitTasks: number | null;
  groupRateLimitCost: number | null;
  /** Cost units one group claims per UTC day (every group's default; null: none). */
  groupBudgetDay: number | null;
  /** Cost units one group claims per UTC calendar month (every group's default). */
  groupBudgetMonth: number | null;
}

interface Field {
  stored: string;
  int: boolean;
  min: number;
  /** the lower bound excluded (`gt`), else included (`ge`) */
  above: boolean;
  max: number;
  nullable: boolean;
  fallback: number | null;
}

const f = (stored: string, int: boolean, min: number, above: boolean, max: number, fallback: number | null): Field => ({
  stored,
  int,
  min,
  above,
  max,
  nullable: fallback === null,
  fallback,
});

/** Every field, in the Python model's order: stored name, kind, bounds and default. */
const FIELDS: Record<keyof QueueConfig, Field> = {
  maxConcurrency: f("max_concurrency", true, 0, false, MAX_COUNT, 0),
  rateLimitTasks: f("rate_limit_tasks", true, 0, true, MAX_COUNT, null),
  rateLimitCost: f("rate_limit_cost", true, 0, true, MAX_COUNT, null),
  rateLimitPeriodS: f("rate_limit_period_s", false, 0, true, MAX_DURATION_S, 1),
  maxAttempts: f("max_attempts", true, 1, false, MAX_ATTEMPTS, 3),
  backoffBaseS: f("backoff_base_s", false, 0, false, MAX_DURATION_S, 1),
  backoffMaxS: f("backoff_max_s", false, 0, false, MAX_DURATION_S, 300),
  backoffJitter: f("backoff_jitter", false, 0, false, 1, 0.2),
  maxLost: f("max_lost", true, 1, false, MAX_LOST, 3),
  leaseTtlS: f("lease_ttl_s", false, MIN_LEASE_TTL_S, false, MAX_DURATION_S, 30),
  doneRetentionS: f("done_retention_s", false, 0, false, MAX_DURATION_S, 3600),
  deadRetentionS: f("dead_retention_s", false, 0, false, MAX_DURATION_S, 259200),
  maxPayloadBytes: f("max_payload_bytes", true, 0, true, MAX_PAYLOAD_BYTES, 1024 * 1024),
  defaultTimeoutS: f("default_timeout_s", false, 0, true, MAX_TIMEOUT_S, null),
  throttleBaseS: f("throttle_base_s", false, 0, true, MAX_DURATION_S, 1),
  throttleMaxS: f("throttle_max_s", false, 0, true, MAX_DURATION_S, 300),
  budgetDay: f("budget_day", true, 0, true, MAX_COUNT, null),
  budgetMonth: f("budget_month", true, 0, true, MAX_COUNT, null),
  groupMaxConcurrency: f("group_max_concurrency", true, 0, false, MAX_COUNT, 0),
  groupRateLimitTasks: f("group_rate_limit_tasks", true, 0, true, MAX_COUNT, null),
  groupRateLimitCost: f("group_rate_limit_cost", true, 0, true, MAX_COUNT, null),
  groupBudgetDay: f("group_budget_day", true, 0, true, MAX_COUNT, null),
  groupBudgetMonth: f("group_budget_month", true, 0, true, MAX_COUNT, null),
};

const NAMES = Object.keys(FIELDS) as (keyof QueueConfig)[];

/** Every field at its default. */
export function defaultConfig(): QueueConfig {
  return Object.fromEntries(NAMES.map((name) => [name, FIELDS[name].fallback])) as unknown as QueueConfig;
}

/**
 * `settings` checked (unknown fields, types, bounds, the caps not below their bases) and
 * completed with the defaults; `InvalidArgument` names the first field to fix.
 */
export function checkConfig(settings: Readonly<Partial<QueueConfig>>): QueueConfig {
  const given: unknown = settings; // from JavaScript callers too: anything may come
  if (given === null || typeof given !== "object" || Array.isArray(given)) {
    throw new InvalidArgument("the queue config must be an object of settings");
  }
  const unknown = Object.keys(settings).filter((k) => !(k in FIELDS));
  if (unknown.length > 0) {
    throw new InvalidArgument(`unknown queue config field(s): ${unknown.sort().join(", ")}; known: ${NAMES.join(", ")}`);
  }
  const out = defaultConfig() as unknown as Record<string, number | null>;
  for (const name of NAMES) {
    const value = (settings as Record<string, unknown>)[name];
    if (value === undefined) continue;
    out[name] = checkField(name, FIELDS[name], value);
  }
  const config = out as unknown as QueueConfig;
  if (config.backoffMaxS < config.backoffBaseS) throw new InvalidArgument("invalid queue config: backoffMaxS must be >= backoffBaseS");
  if (config.throttleMaxS < config.throttleBaseS) throw new InvalidArgument("invalid queue config: throttleMaxS must be >= throttleBaseS");
  return config;
}

function checkField(name: string, field: Field, value: unknown): number | null {
  if (value === null) {
    if (field.nullable) return null;
    throw new InvalidArgument(`invalid queue config: ${name} may not be null`);
  }
  if (typeof value !== "number" || !Number.isFinite(value)) {
    throw new InvalidArgument(`invalid queue config: ${name} must be a finite number, not ${typeof value === "number" ? String(value) : typeof value}`);
  }
  if (field.int && !Number.isInteger(value)) throw new InvalidArgument(`invalid queue config: ${name} must be a whole number, not ${String(value)}`);
  const low = field.above ? value <= field.min : value < field.min;
  if (low || value > field.max) {
    const from = field.above ? `above ${String(field.min)}` : `at least ${String(field.min)}`;
    throw new InvalidArgument(`invalid queue config: ${name} must be ${from} and at most ${String(field.max)}, not ${String(value)}`);
  }
  return value;
}

/** The `config` hash's fields for `config` (unset ones left out), as Python stores them. */
export function configFields(config: QueueConfig): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name of NAMES) {
    const value = config[name];
    if (value === null) continue;
    const field = FIELDS[name];
    out[field.stored] = field.int ? String(value) : floatRepr(value);
  }
  return out;
}

/**
 * The stored `config` hash read: each field the number stored, else its default (as the
 * scripts read it; a stored value the checks would refuse is shown as it is).
 */
export function parseConfig(raw: Readonly<Record<string, string>>): QueueConfig {
  const out = defaultConfig() as unknown as Record<string, number | null>;
  for (const name of NAMES) {
    const text = raw[FIELDS[name].stored];
    if (text === undefined || text.trim() === "") continue;
    const value = Number(text);
    if (Number.isFinite(value)) out[name] = value;
  }
  return out as unknown as QueueConfig;
}
