/**
 * How a handler's run ends: the errors a handler throws on purpose (`PermanentFailure`,
 * `RetryAfter`), the one-line text an attempt's failure is stored as, and a result as
 * the JSON stored on the task. The Python worker's rules (`worker/handlers.py`,
 * `worker/context.py`): a task one worker fails permanently, the other does too.
 *
 * @module
 */

import { inspect } from "node:util";

import * as bounds from "../bounds.js";
import { TaskfleetError } from "../errors.js";
import { numberProblem, valueProblem } from "../numbers.js";
import { MAX_PAYLOAD_BYTES } from "./limits.js";

/** How much of an error's text is kept on the task. */
export const MAX_ERROR_CHARS = 2000;

/**
 * Thrown by a handler: this task can never succeed. It goes dead at once, reason
 * `permanent`, with this message as its error; no attempt is left to retry.
 */
export class PermanentFailure extends TaskfleetError {}

/** Most retries a handler may ask for per task before they count as failed attempts. */
export const MAX_DEFERRALS = 20;

/** The longest delay a handler may ask for, in milliseconds (the protocol's bound). */
export const MAX_DELAY_MS = bounds.MAX_DELAY_S * 1000;

/**
 * `value` as a delay in milliseconds, or a one-line error naming `what`: a number that is
 * negative, not finite or past `MAX_DELAY_MS` is a misread, never clamped.
 */
function checkDelayMs(value: unknown, what: string): number {
  if (typeof value !== "number")
    throw new TypeError(`${what} must be milliseconds (a number), not ${typeof value}`);
  if (!(Number.isFinite(value) && value >= 0 && value <= MAX_DELAY_MS))
    throw new RangeError(`${what} must be 0..${MAX_DELAY_MS} ms, not ${String(value)}`);
  return value;
}

/**
 * Thrown by a handler: run this task again after `delayMs` milliseconds (as `setTimeout`
 * and BullMQ count: `new RetryAfter(60_000)` is one minute), for an upstream rate limit's
 * Retry-After or a dependency that is down. The cause is outside the task, so the attempt
 * is given back, up to 20 times per task; past that each one counts as a failed attempt
 * and `maxAttempts` ends the task. The retry waits `delayMs` either way.
 */
export class RetryAfter extends TaskfleetError {
  /** Milliseconds to wait before the task runs again. */
  readonly delayMs: number;

  constructor(delayMs: number, message = "") {
    const checked = checkDelayMs(delayMs, "RetryAfter delayMs");
    super(message);
    this.delayMs = checked;
  }
}

/**
 * Thrown by a handler that met a provider's rate limit (an HTTP 429): the whole queue
 * stops claiming until the limit resets, not only this task. `retryAfterMs`: the
 * provider's Retry-After in milliseconds (a header's seconds times 1000); null when it
 * gave none: the fleet then pauses the queue's `throttleBaseMs`, doubled for each rate
 * limit met in a row (up to `throttleMaxMs`) and shortened again by successes. The task
 * waits the pause out, its attempt given back.
 * `scope: "group"`: only the task's group pauses (a quota that is the group's own, such
 * as a tenant's API key); a task without a group pauses the queue. The default stays
 * "queue": a provider's quota usually belongs to the key the whole queue calls with.
 */
export class RateLimited extends TaskfleetError {
  /** The provider's Retry-After in milliseconds, or null. */
  readonly retryAfterMs: number | null;
  /** What pauses: the whole queue, or the task's group alone. */
  readonly scope: "queue" | "group";
  /** A provider quota's name (`Quota`): that quota pauses, in every queue, instead of this queue. */
  readonly quota: string | null;

  constructor(
    retryAfterMs: number | null = null,
    message = "",
    options: { scope?: "queue" | "group"; quota?: string } = {},
  ) {
    const scope: string = options.scope ?? "queue"; // a JavaScript caller may pass anything
    if (scope !== "queue" && scope !== "group")
      throw new RangeError(`RateLimited scope must be "queue" or "group", not ${scope}`);
    const quota: unknown = options.quota ?? null;
    if (quota !== null && (typeof quota !== "string" || quota === ""))
      throw new TypeError("RateLimited quota must be a provider quota's name");
    const after =
      retryAfterMs === null ? null : checkDelayMs(retryAfterMs, "RateLimited retryAfterMs");
    super(message || (after === null ? "rate limited" : `rate limited, retry after ${after} ms`));
    this.retryAfterMs = after;
    this.scope = scope;
    this.quota = quota;
  }
}

/** What a handler's error asks for: dead at once, a retry after a delay, a pause of the queue. */
export interface Verdict {
  readonly permanent: boolean;
  readonly retryAfterMs: number | null;
  /** RateLimited: the queue pauses claiming (retryAfterMs: the provider's, or null). */
  readonly throttle?: boolean;
  /** RateLimited with scope "group": only the task's group pauses. */
  readonly groupScope?: boolean;
  /** RateLimited with a quota: that provider quota pauses for retryAfterMs instead. */
  readonly providerQuota?: string;
}

/** A provider quota's pause when RateLimited or reportQuota gives no reset time (ms). */
export const PROVIDER_PAUSE_MS = 1000;

function oneLine(text: string): string {
  let line = text.replace(/[\r\n]+/g, " ").trim();
  if (line.length > MAX_ERROR_CHARS) line = `${line.slice(0, MAX_ERROR_CHARS - 3)}...`;
  return line.toWellFormed();
}

function typeName(error: unknown): string {
  try {
    if (error instanceof Error) {
      const name = error.name;
      return typeof name === "string" && name !== "" ? name : "Error";
    }
  } catch {
    // a getter that throws
  }
  return "Error";
}

/**
 * `Type: message` on one line, truncated: what a task records about a failed attempt.
 * Never throws, whatever was thrown (a string, an object whose getters throw).
 */
export function formatError(error: unknown): string {
  const name = typeName(error);
  let message: string;
  try {
    if (error instanceof Error) {
      const m: unknown = error.message; // a hostile subclass may make it anything
      message = typeof m === "string" ? m : "(the error's message is not text)";
    } else if (typeof error === "string") message = error;
    else message = describeThrown(error);
  } catch {
    message = "(the error's message could not be read)";
  }
  // an error without a message (`throw new Error()`) is stored as its name, as in Python
  return oneLine(
    message.trim() === "" ? name : `${name}: ${message.slice(0, MAX_ERROR_CHARS + 1)}`,
  );
}

/**
 * What a handler threw that is no `Error` (a plain object, a number, undefined), as text:
 * an object as its JSON when it has any, else its `name: message` when it has a message,
 * else as `util.inspect` shows it; never `[object Object]`.
 */
function describeThrown(value: unknown): string {
  if (value === undefined || value === null) return `${String(value)} thrown`;
  if (typeof value !== "object" && typeof value !== "function") {
    return `${typeof value} thrown: ${inspect(value)}`;
  }
  let text: string | undefined;
  try {
    const json: unknown = JSON.stringify(value);
    if (typeof json === "string" && json !== "{}") text = json;
  } catch {
    // a cycle, a bigint, a throwing getter or toJSON: described below instead
  }
  if (text === undefined) {
    try {
      const { name, message } = value as { name?: unknown; message?: unknown };
      if (typeof message === "string" && message !== "") {
        text = typeof name === "string" && name !== "" ? `${name}: ${message}` : message;
      }
    } catch {
      // a getter that throws
    }
  }
  text ??= inspect(value, { depth: 2, breakLength: Infinity });
  return `${typeof value} thrown: ${text}`;
}

/** Whether `error` is a `kind` (by class, or by name: a second copy of this package in a handler's tree). */
function isA(
  error: unknown,
  kind: typeof PermanentFailure | typeof RetryAfter | typeof RateLimited,
): boolean {
  return error instanceof kind || (error instanceof Error && error.name === kind.name);
}

/** The verdict a `PermanentFailure` or `RetryAfter` carries; null for others (and a broken RetryAfter). */
export function verdictOf(error: unknown): Verdict | null {
  try {
    if (isA(error, PermanentFailure)) return { permanent: true, retryAfterMs: null };
    if (isA(error, RateLimited)) {
      const after = storedMs(error, "retryAfterMs", "retryAfter");
      const quota: unknown = (error as { quota?: unknown }).quota;
      if (typeof quota === "string" && quota !== "")
        return {
          permanent: false,
          retryAfterMs: after ?? PROVIDER_PAUSE_MS,
          providerQuota: quota,
        };
      const verdict = { permanent: false, retryAfterMs: after, throttle: true };
      return (error as { scope?: unknown }).scope === "group"
        ? { ...verdict, groupScope: true }
        : verdict;
    }
    if (!isA(error, RetryAfter)) return null;
    const delay = storedMs(error, "delayMs", "delay");
    return delay === null ? null : { permanent: false, retryAfterMs: delay };
  } catch {
    return null;
  }
}

/**
 * An error's delay in whole milliseconds: its `ms` field, or else its `seconds` field (a
 * copy of this package before durations were milliseconds, in a handler's tree); null
 * when neither holds a valid delay.
 */
function storedMs(error: unknown, ms: string, seconds: string): number | null {
  const fields = error as Record<string, unknown>;
  const old = fields[seconds];
  const value = ms in fields ? fields[ms] : typeof old === "number" ? old * 1000 : undefined;
  if (typeof value !== "number" || !(value >= 0 && value <= MAX_DELAY_MS)) return null;
  return Math.trunc(value);
}

/** What a handler's error makes of its attempt: the error text and the verdict; never throws. */
/** How much of a failure's stack its attempt keeps: the last frames (as Python's worker). */
export const MAX_TRACEBACK_CHARS = 4096;

/**
 * The error's stack, its last `MAX_TRACEBACK_CHARS` characters (the frames nearest the
 * throw: the handler's file and line); "" when it has none or it cannot be read.
 */
export function formatTraceback(error: unknown): string {
  let text: string;
  try {
    const stack: unknown = error instanceof Error ? error.stack : undefined;
    if (typeof stack !== "string") return "";
    text = stack;
  } catch {
    return ""; // a hostile getter must not lose the outcome
  }
  if (text.length > MAX_TRACEBACK_CHARS) text = "..." + text.slice(-(MAX_TRACEBACK_CHARS - 3));
  return text.toWellFormed();
}

export function failureOf(error: unknown): [string, Verdict | null] {
  let text = formatError(error);
  if (error instanceof ResultTooLarge) return [text, { permanent: true, retryAfterMs: null }];
  const verdict = verdictOf(error);
  if (verdict === null && isA(error, RetryAfter)) {
    text = oneLine(`${text} (RetryAfter without a valid delay: retried after backoff)`);
  }
  return [text, verdict];
}

class NumberRule extends Error {}

/** A handler's result is over what Redis can store. */
export class ResultTooLarge extends TaskfleetError {}

/** A handler's result is no JSON data (a bigint, NaN, a function...). */
export class ResultNotJSON extends TaskfleetError {
  override readonly name = "TypeError";
}

/**
 * The handler's return value as JSON text (`undefined` and `null` are `null`); throws
 * `ResultNotJSON` for what JSON can't hold exactly (NaN, infinities, a bigint, a cycle),
 * `ResultTooLarge` past what any task may store.
 */
export function encodeResult(value: unknown): string {
  if (value === undefined || value === null) return "null";
  let text: unknown;
  try {
    text = JSON.stringify(value, (_key, v: unknown): unknown => {
      if (
        typeof v === "number" &&
        !Number.isSafeInteger(v) &&
        numberProblem(v, "result") !== undefined
      ) {
        throw new NumberRule(numberProblem(v, "result"));
      }
      if (typeof v === "bigint") throw new Error("a bigint is not JSON");
      return v;
    });
  } catch (error) {
    // the number rule: no NaN or infinity, no integer past ±(2^53-1); the walk names where
    if (error instanceof NumberRule)
      throw new ResultNotJSON(valueProblem(value, "result") ?? error.message);
    throw new ResultNotJSON(
      `handler result is not JSON-serialisable: ${error instanceof Error ? error.message : String(error)}`,
    );
  }
  if (typeof text !== "string")
    throw new ResultNotJSON(`handler result is not JSON-serialisable: a ${typeof value}`);
  const size = Buffer.byteLength(text, "utf8");
  if (size > MAX_PAYLOAD_BYTES) {
    throw new ResultTooLarge(
      `handler result is ${size} bytes, over the ${MAX_PAYLOAD_BYTES} any task may store`,
    );
  }
  return text;
}
