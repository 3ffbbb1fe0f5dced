/**
 * A queue's config in the Node API's unit: every duration in milliseconds, named `...Ms`
 * (`leaseTtlMs`), over the stored config's seconds (`leaseTtlS`, as the scripts and the
 * Python client read it). The conversion is all this module does: the checks, bounds and
 * stored text are `config.ts`'s, in seconds.
 *
 * @module
 */

import { type QueueConfig as StoredConfig, defaultConfig as storedDefault } from "./config.js";
import { InvalidArgument } from "./errors.js";
import { checkOptionKeys } from "./options.js";

/** The stored config's durations, in seconds. */
const DURATIONS = [
  "rateLimitPeriodS",
  "backoffBaseS",
  "backoffMaxS",
  "leaseTtlS",
  "doneRetentionS",
  "deadRetentionS",
  "defaultTimeoutS",
  "throttleBaseS",
  "throttleMaxS",
] as const;
type Duration = (typeof DURATIONS)[number];
type InMs<K extends string> = K extends `${infer Base}S` ? `${Base}Ms` : never;

/**
 * A queue's settings (`Queue.configure`, `Queue.config`), durations in milliseconds:
 * `rateLimitPeriodMs`, `backoffBaseMs`, `backoffMaxMs`, `leaseTtlMs`, `doneRetentionMs`,
 * `deadRetentionMs`, `defaultTimeoutMs`, `throttleBaseMs`, `throttleMaxMs`. The other
 * fields are the stored config's (counts, fractions, bytes).
 */
export type QueueConfig = Omit<StoredConfig, Duration> & {
  [K in Duration as InMs<K>]: StoredConfig[K];
};

const msName = (name: Duration): string => `${name.slice(0, -1)}Ms`;
const NAMES: ReadonlySet<string> = new Set(
  Object.keys(storedDefault()).map((name) =>
    (DURATIONS as readonly string[]).includes(name) ? msName(name as Duration) : name,
  ),
);

/**
 * `settings` (durations in ms) as the stored config's fields (in seconds). An unknown key
 * is refused, the old seconds name (`leaseTtlS`) naming its `...Ms` one; checks are left
 * to `checkConfig`, whose messages name the fields in seconds.
 */
export function configFromMs(settings: Readonly<Partial<QueueConfig>>): Partial<StoredConfig> {
  const given: unknown = settings;
  if (given === null || typeof given !== "object" || Array.isArray(given)) {
    throw new InvalidArgument("the queue config must be an object of settings");
  }
  checkOptionKeys(settings, NAMES, "the queue config");
  const seconds = new Map<string, Duration>(DURATIONS.map((name) => [msName(name), name]));
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(settings)) {
    const name = seconds.get(key);
    if (name === undefined) {
      out[key] = value;
    } else if (value === null || (typeof value === "number" && Number.isFinite(value))) {
      out[name] = value === null ? null : value / 1000;
    } else {
      throw new InvalidArgument(
        `invalid queue config: ${key} must be milliseconds (a finite number), not ${typeof value}`,
      );
    }
  }
  return out;
}

/** The stored config (seconds) in the API's unit (ms). */
export function configToMs(config: StoredConfig): QueueConfig {
  const out: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(config)) {
    if ((DURATIONS as readonly string[]).includes(name)) {
      out[msName(name as Duration)] =
        value === null ? null : Math.round((value as number) * 1000 * 1e6) / 1e6;
    } else {
      out[name] = value;
    }
  }
  return out as QueueConfig;
}

/** Every field at its default, durations in ms. */
export function defaultConfig(): QueueConfig {
  return configToMs(storedDefault());
}

/**
 * `check()` (the stored config's checks, in seconds), its refusal of a duration reworded
 * in the API's unit: the `...Ms` option given and its bounds in milliseconds.
 */
export function storedCheck<T>(check: () => T): T {
  try {
    return check();
  } catch (error) {
    if (!(error instanceof InvalidArgument)) throw error;
    const stored = error.message.startsWith("invalid queue config: ");
    if (!stored || !DURATIONS.some((name) => new RegExp(`\\b${name}\\b`).test(error.message)))
      throw error;
    throw new InvalidArgument(inMs(error.message));
  }
}

/** A stored check's line with each duration field named in ms, and the numbers it bounds in ms. */
function inMs(message: string): string {
  const bounded =
    /^(invalid queue config: )(\w+) must be (above|at least) (\S+) and at most (\S+), not (\S+)$/.exec(
      message,
    );
  const ms = (text: string): string => String(Math.round(Number(text) * 1000 * 1e6) / 1e6);
  if (bounded !== null) {
    const [, head, name, from, low, high, given] = bounded as unknown as string[];
    if ((DURATIONS as readonly string[]).includes(name ?? ""))
      return `${head}${msName(name as Duration)} must be ${from} ${ms(low ?? "")} and at most ${ms(high ?? "")} ms, not ${ms(given ?? "")}`;
  }
  let out = message;
  for (const name of DURATIONS) out = out.replace(new RegExp(`\\b${name}\\b`, "g"), msName(name));
  return out;
}
