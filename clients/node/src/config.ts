/**
 * A queue's shared settings (the `config` hash every script reads at each call), as the
 * Python package's `QueueConfig` checks and stores them: the same fields, bounds and
 * cross-field rules, stored as the same text (`Queue.configure`, `Queue.config`).
 *
 * @module
 */

import { InvalidArgument } from "./errors.js";
import { CONFIG_FIELDS, type ConfigFieldSpec } from "./protocol/defaults.js";
import { floatRepr } from "./pyformat.js";

export { MAX_LOST, MAX_PAYLOAD_BYTES, MIN_LEASE_TTL_S } from "./protocol/defaults.js";

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

/** Every field, in the Python model's order: stored name, kind, bounds and default (the table's). */
const FIELDS: Readonly<Record<keyof QueueConfig, ConfigFieldSpec>> = CONFIG_FIELDS;

const NAMES = Object.keys(FIELDS) as (keyof QueueConfig)[];

/** Every field at its default. */
export function defaultConfig(): QueueConfig {
  return Object.fromEntries(
    NAMES.map((name) => [name, FIELDS[name].default]),
  ) as unknown as QueueConfig;
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
    throw new InvalidArgument(
      `unknown queue config field(s): ${unknown.sort().join(", ")}; known: ${NAMES.join(", ")}`,
    );
  }
  const out = defaultConfig() as unknown as Record<string, number | null>;
  for (const name of NAMES) {
    const value = (settings as Record<string, unknown>)[name];
    if (value === undefined) continue;
    out[name] = checkField(name, FIELDS[name], value);
  }
  const config = out as unknown as QueueConfig;
  if (config.backoffMaxS < config.backoffBaseS)
    throw new InvalidArgument("invalid queue config: backoffMaxS must be >= backoffBaseS");
  if (config.throttleMaxS < config.throttleBaseS)
    throw new InvalidArgument("invalid queue config: throttleMaxS must be >= throttleBaseS");
  return config;
}

function checkField(name: string, field: ConfigFieldSpec, value: unknown): number | null {
  if (value === null) {
    if (field.default === null) return null;
    throw new InvalidArgument(`invalid queue config: ${name} may not be null`);
  }
  if (typeof value !== "number" || !Number.isFinite(value)) {
    throw new InvalidArgument(
      `invalid queue config: ${name} must be a finite number, not ${typeof value === "number" ? String(value) : typeof value}`,
    );
  }
  if (field.int && !Number.isInteger(value))
    throw new InvalidArgument(
      `invalid queue config: ${name} must be a whole number, not ${String(value)}`,
    );
  const low = field.above ? value <= field.min : value < field.min;
  if (low || value > field.max) {
    const from = field.above ? `above ${String(field.min)}` : `at least ${String(field.min)}`;
    throw new InvalidArgument(
      `invalid queue config: ${name} must be ${from} and at most ${String(field.max)}, not ${String(value)}`,
    );
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
