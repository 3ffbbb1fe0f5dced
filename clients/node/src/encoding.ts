/**
 * What an enqueue takes, validated and encoded for the enqueue script, before anything is
 * sent (pure: no Redis). The rules and messages are the Python package's
 * (`producer/encoding.py`, `protocol/tasknames.py`, `protocol/bounds.py`): a task one
 * client refuses, the other refuses too, and one both accept is stored as the same bytes.
 *
 * @module
 */

import { randomBytes } from "node:crypto";

import * as bounds from "./bounds.js";
import { InvalidArgument, InvalidPayload, pyRepr } from "./errors.js";
import { quotasJson } from "./providerquota.js";
import { numberProblem, pathStep } from "./numbers.js";
import { unknownOptionHint } from "./options.js";
import type { AnyPayload, JsonCompatible } from "./json.js";
import { compareCodePoints, floatRepr, formatG } from "./pyformat.js";

/**
 * The options of one enqueue (`Queue.enqueue`). Durations are milliseconds, as Node's
 * `setTimeout` and BullMQ take them, in options named `...Ms`; the old names in seconds
 * (`delay`, `timeout`, a number as `deadline`) are refused, naming the new one.
 */
export interface EnqueueOptions<Name extends string = string> {
  /** -1000..1000; higher runs first (default 0). */
  readonly priority?: number;
  /** Milliseconds before it may run (default: now). */
  readonly delayMs?: number;
  /** By when it must have started, else it goes dead with reason `expired`. */
  readonly deadline?: Date;
  /** As `deadline`, in milliseconds from now. */
  readonly deadlineMs?: number;
  /** Starts it may have, 1..10,000 (default: the queue's `max_attempts`). */
  readonly maxAttempts?: number;
  /**
   * Its id (1-200 printable characters; default: 32 random hex digits). Enqueueing the
   * same id again with the same payload and options changes nothing; with others it
   * throws `TaskExists`.
   */
  readonly taskId?: string;
  /** Units it takes from the queue's cost rate limit, 0..1e9 (default 1). */
  readonly cost?: number;
  /** Milliseconds one run may take, > 0, at most a year (default: the queue's). */
  readonly timeoutMs?: number;
  /**
   * The name of the handler that runs it, among those its workers serve (default: the
   * workers' default handler). A name no worker serves makes the task go dead, reason
   * `unknown task`.
   */
  readonly name?: Name;
  /**
   * Ids of tasks of this queue (or earlier tasks of the same `enqueueMany`) it waits for:
   * it stays `waiting`, never claimed, until every one is done (docs/flows.md).
   */
  readonly after?: readonly string[];
  /** With `after`, when one ends dead or cancelled: `fail` it (default), `ignore` that one, or `cancel` it and the rest. */
  readonly onDepFail?: "fail" | "ignore" | "cancel";
  /**
   * The group it belongs to (a tenant, a customer): a queue's workers claim fairly between
   * its groups, so one group's backlog never starves another (default: none). 1-100
   * letters, digits, `.`, `_`, `:`, `@` or `-`, starting with a letter or digit.
   */
  readonly group?: string;
  /**
   * The provider quotas its run reserves when claimed (`Quota`, docs/quotas.md): quota
   * name -> { unit: estimate }, e.g. `{ openai: { requests: 1, input_tokens: 3000 } }`.
   * A claim starts it only when every quota named can admit the estimate now.
   */
  readonly quotas?: Readonly<Record<string, Readonly<Record<string, number>>>>;
}

/** One task of `Queue.enqueueMany`: its payload and its options. */
export interface EnqueueItem<
  Payload = AnyPayload,
  Name extends string = string,
> extends EnqueueOptions<Name> {
  readonly payload: JsonCompatible<Payload>;
}

/** One task as the enqueue script takes it: the fields of its record, encoded. */
export interface TaskRecord {
  readonly task_id: string;
  readonly payload: string;
  readonly priority: number;
  readonly delay_ms: number;
  readonly deadline: string;
  readonly max_attempts: string;
  readonly cost: number;
  readonly timeout_s: string;
  readonly after: string;
  readonly on_dep_fail: string;
  readonly group: string;
  readonly quotas: string;
}

/** The names `EnqueueOptions` takes. */
export const ENQUEUE_OPTION_NAMES: ReadonlySet<string> = new Set([
  "priority",
  "delayMs",
  "deadline",
  "deadlineMs",
  "maxAttempts",
  "taskId",
  "cost",
  "timeoutMs",
  "name",
  "after",
  "onDepFail",
  "group",
  "quotas",
]);
const OPTION_NAMES: ReadonlySet<string> = new Set(["payload", ...ENQUEUE_OPTION_NAMES]);

// protocol/groups.py: no braces (a key's hash tag), no whitespace or NUL.
const GROUP = /^[A-Za-z0-9][A-Za-z0-9._:@-]{0,99}$/;

/** Why `group` is no group name (one line), or undefined when it is one. */
export function groupProblem(group: unknown): string | undefined {
  if (typeof group === "string" && GROUP.test(group)) return undefined;
  const repr = typeof group === "string" ? pyRepr(group) : String(group);
  return (
    "group must be 1-100 characters of letters, digits, '.', '_', ':', '@' or '-', " +
    `starting with a letter or digit, not ${repr.slice(0, 60)}`
  );
}

// Random bytes are drawn 4 KiB at a time (as node's randomUUID pools them): one call of
// the system's generator per 170 enqueues instead of two per enqueue.
const POOL_SIZE = 4096;
let pool = Buffer.alloc(0);
let poolAt = 0;

/** `n` bytes of the cryptographic generator as 2n hex digits. */
function randomHex(n: number): string {
  if (poolAt + n > pool.length) {
    pool = randomBytes(POOL_SIZE);
    poolAt = 0;
  }
  poolAt += n;
  return pool.toString("hex", poolAt - n, poolAt);
}

/** A random id: 128 bits as 32 hex digits (as the Python client makes them). */
export function newTaskId(): string {
  return randomHex(16);
}

/** Claim tokens for tasks an enqueue hands straight to idle workers (unique per call). */
export function tokenBase(): string {
  return randomHex(8);
}

const TOO_DEEP = `payload is nested more than ${bounds.MAX_PAYLOAD_DEPTH} levels of arrays and objects deep`;

function kindOf(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  if (typeof value === "object") return Object.prototype.toString.call(value).slice(8, -1);
  return typeof value;
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return false;
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/**
 * The JSON data of a value that is no plain object or array (a class instance, a `Date`):
 * its `toJSON()` when it has one, else its own enumerable fields when it is an object of
 * a class (tagged "Object"); undefined for what JSON can't hold (a `Map`, a `Set`, ...).
 */
function plainData(value: object, key: string): { data: unknown } | undefined {
  const toJSON: unknown = (value as { toJSON?: unknown }).toJSON;
  if (typeof toJSON === "function")
    return { data: (toJSON as (k: string) => unknown).call(value, key) };
  if (Object.prototype.toString.call(value) !== "[object Object]") return undefined;
  return { data: value };
}

/** What a value JSON can't hold is, for the error line. */
function notJson(value: unknown): string {
  if (value === undefined) return "undefined (in an array)";
  if (typeof value === "object" && value !== null) return `a ${kindOf(value)}`;
  return `a ${typeof value}`;
}

/**
 * A payload's JSON text: compact, keys sorted by code point, non-ASCII text as is, exactly
 * what the Python client stores for the same object. Plain objects, arrays, strings,
 * finite numbers, booleans and null are written as they are. A class instance (a DTO) is
 * its own enumerable fields, or what its `toJSON()` returns (a `Date`: its ISO text), as
 * `JSON.stringify` writes it; a field holding `undefined` is left out, as there too.
 * Anything else (a function, a symbol, a bigint, `undefined` in an array, a `Map`, a
 * `Set`, a cycle, NaN, a lone surrogate) is an `InvalidPayload` naming its path.
 */
export function encodePayload(payload: unknown): string {
  let top: unknown = payload;
  if (typeof payload === "object" && payload !== null && !Array.isArray(payload)) {
    if (!isPlainObject(payload)) top = plainData(payload, "")?.data;
  }
  if (typeof top !== "object" || top === null || Array.isArray(top)) {
    throw new InvalidPayload(
      `payload must be a JSON object (a plain object or a class instance), not ${kindOf(payload)}`,
    );
  }
  const parts: string[] = [];
  const ancestors = new Set<object>();
  // the keys from the payload down to the value written, for the line naming a bad one
  const trail: (string | number)[] = [];
  const where = (): string => trail.reduce<string>((path, key) => pathStep(path, key), "payload");
  const refuse = (what: string): never => {
    throw new InvalidPayload(`payload is not JSON-serialisable: ${where()} is ${what}`);
  };
  const write = (value: unknown, depth: number): void => {
    if (value === null) {
      parts.push("null");
    } else if (typeof value === "boolean") {
      parts.push(value ? "true" : "false");
    } else if (typeof value === "number") {
      if (Number.isSafeInteger(value)) {
        parts.push(String(value));
      } else {
        // the number rule: no NaN or infinity, no integer past ±(2^53-1); the walk names where
        if (numberProblem(value, where()) !== undefined) {
          throw new InvalidPayload(numberProblem(value, where()) as string);
        }
        // any other number (a fraction, 1e21 and up) as Python's float repr
        parts.push(floatRepr(value));
      }
    } else if (typeof value === "string") {
      if (!value.isWellFormed()) {
        refuse("a string holding a lone surrogate (not UTF-8)");
      }
      parts.push(JSON.stringify(value));
    } else if (Array.isArray(value) || isPlainObject(value)) {
      if (depth > bounds.MAX_PAYLOAD_DEPTH) throw new InvalidPayload(TOO_DEEP);
      if (ancestors.has(value)) refuse("a cycle: it holds an object that holds it");
      ancestors.add(value);
      if (Array.isArray(value)) {
        parts.push("[");
        for (let i = 0; i < value.length; i++) {
          if (i > 0) parts.push(",");
          trail.push(i);
          const item: unknown = value[i];
          if (item === undefined) refuse(notJson(item));
          write(item, depth + 1);
          trail.pop();
        }
        parts.push("]");
      } else {
        parts.push("{");
        const keys = Object.keys(value).sort(compareCodePoints);
        let first = true;
        for (const key of keys) {
          const item = value[key];
          if (item === undefined) continue; // as JSON.stringify: an unset optional field
          if (!key.isWellFormed())
            refuse("an object with a key holding a lone surrogate (not UTF-8)");
          if (!first) parts.push(",");
          first = false;
          parts.push(JSON.stringify(key), ":");
          trail.push(key);
          write(item, depth + 1);
          trail.pop();
        }
        parts.push("}");
      }
      ancestors.delete(value);
    } else if (typeof value === "object") {
      const key = trail.length === 0 ? "" : String(trail[trail.length - 1]);
      const found = plainData(value, key);
      if (found === undefined) refuse(notJson(value));
      const data = (found as { data: unknown }).data;
      if (data === value) {
        // a class instance: its own enumerable fields, as a plain object's
        if (ancestors.has(value)) refuse("a cycle: it holds an object that holds it");
        ancestors.add(value);
        write({ ...(value as Record<string, unknown>) }, depth);
        ancestors.delete(value);
      } else {
        if (data === undefined || typeof data === "function" || typeof data === "symbol")
          refuse(`${notJson(data).replace(" (in an array)", "")} from its toJSON()`);
        write(data, depth);
      }
    } else {
      refuse(notJson(value));
    }
  };
  write(top, 1);
  return parts.join("");
}

function span(seconds: number): string {
  const years = seconds / (365 * 24 * 3600);
  return years >= 1 ? `${formatG(years)} years` : `${formatG(seconds / 86400)} days`;
}

/** Seconds as a finite number at most `high` (callers check their lower bound). */
export function seconds(value: unknown, what: string, high: number): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "number" || !Number.isFinite(value)) {
    throw new InvalidArgument(`${what} must be seconds (a finite number)`);
  }
  if (value > high) {
    throw new InvalidArgument(
      `${what} must be at most ${high} s (${span(high)}), not ${formatG(value)}`,
    );
  }
  return value;
}

/**
 * Milliseconds as a finite number at most `highS` seconds, or undefined when not given
 * (callers check their lower bound). The scripts take seconds or ms; callers convert.
 */
export function millis(value: unknown, what: string, highS: number): number | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== "number" || !Number.isFinite(value)) {
    throw new InvalidArgument(`${what} must be milliseconds (a finite number)`);
  }
  if (value > highS * 1000) {
    throw new InvalidArgument(
      `${what} must be at most ${highS * 1000} ms (${span(highS)}), not ${formatG(value)}`,
    );
  }
  return value;
}

function shortValue(value: unknown): string {
  const shown = typeof value === "string" ? pyRepr(value) : String(value);
  return shown.length <= 200 ? shown : `${shown.slice(0, 200)}...`;
}

/** `value` if an integer within `low`..`high`, else an `InvalidArgument` naming `what`. */
export function checkedInt(value: unknown, what: string, low: number, high?: number): number {
  if (typeof value !== "number" || !Number.isInteger(value)) {
    const shown = typeof value === "number" ? formatG(value) : kindOf(value);
    throw new InvalidArgument(`${what} must be an integer, not ${shown}`);
  }
  if (value < low || (high !== undefined && value > high)) {
    const bound = high !== undefined ? `between ${low} and ${high}` : `>= ${low}`;
    throw new InvalidArgument(`${what} must be ${bound}, not ${shortValue(value)}`);
  }
  return value;
}

function deadlineMs(value: Date): number {
  const ms = value.getTime();
  if (Number.isNaN(ms)) throw new InvalidArgument("deadline must be a valid Date");
  if ((ms - Date.now()) / 1000 > bounds.MAX_DEADLINE_S) {
    throw new InvalidArgument(
      `deadline must be at most ${bounds.MAX_DEADLINE_S} s (${span(bounds.MAX_DEADLINE_S)}) ` +
        `from now, not ${value.toISOString()}`,
    );
  }
  if (ms < 0)
    throw new InvalidArgument(`deadline must be after 1970-01-01, not ${value.toISOString()}`);
  return Math.floor(ms);
}

// Letters, digits and `_ . / -`, starting with a letter or digit, at most 100
// (protocol/tasknames.py: the producer's check, the worker's --handler and the CRD's rule).
const TASK_NAME = /^[A-Za-z0-9][A-Za-z0-9_./-]{0,99}$/;
/** Opens and closes the name ahead of a named task's payload. */
export const NAME_MARK = "\x01";

/** Why `name` is no task name (one line), or undefined when it is one. */
export function taskNameProblem(name: unknown): string | undefined {
  if (typeof name === "string" && TASK_NAME.test(name)) return undefined;
  const repr = typeof name === "string" ? pyRepr(name) : String(name);
  const shown = repr.length <= 60 ? repr : `${repr.slice(0, 60)}...`;
  return (
    `task name ${shown} must be 1-100 letters, digits, '_', '.', '/' or '-', ` +
    "starting with a letter or digit"
  );
}

// Python's str.isprintable: no control, format, surrogate, private-use, unassigned or
// separator character but the plain space.
const UNPRINTABLE = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]/u;

function checkTaskId(taskId: unknown): string {
  if (
    typeof taskId !== "string" ||
    taskId === "" ||
    // eslint-disable-next-line @typescript-eslint/no-misused-spread -- code points, as Python's len counts
    [...taskId].length > bounds.MAX_TASK_ID_LEN ||
    !taskId.isWellFormed() ||
    UNPRINTABLE.test(taskId.replaceAll(" ", "a"))
  ) {
    throw new InvalidArgument(
      `task_id must be a non-empty printable string of <= ${bounds.MAX_TASK_ID_LEN} chars`,
    );
  }
  return taskId;
}

/** Validate one task and encode it for the enqueue script (every number within `bounds`). */
export function encodeTask(payload: unknown, options: EnqueueOptions = {}): TaskRecord {
  let text = encodePayload(payload);
  const priority =
    options.priority === undefined
      ? 0
      : checkedInt(options.priority, "priority", bounds.PRIORITY_MIN, bounds.PRIORITY_MAX);
  const cost =
    options.cost === undefined
      ? 1
      : checkedInt(options.cost, "cost", bounds.MIN_COST, bounds.MAX_COST);
  let maxAttempts = "";
  if (options.maxAttempts !== undefined) {
    checkedInt(options.maxAttempts, "max_attempts", bounds.MIN_ATTEMPTS, bounds.MAX_ATTEMPTS);
    maxAttempts = String(options.maxAttempts);
  }
  let delayMs = 0;
  const delay = millis(options.delayMs, "delayMs", bounds.MAX_DELAY_S);
  if (delay !== undefined) {
    if (delay < 0) throw new InvalidArgument(`delayMs must be >= 0, not ${formatG(delay)}`);
    delayMs = Math.ceil(delay);
  }
  let timeoutS = "";
  const timeout = millis(options.timeoutMs, "timeoutMs", bounds.MAX_TIMEOUT_S);
  if (timeout !== undefined) {
    if (timeout <= 0) throw new InvalidArgument(`timeoutMs must be > 0, not ${formatG(timeout)}`);
    timeoutS = floatRepr(timeout / 1000);
  }
  let deadline = "";
  if (options.deadline !== undefined && options.deadlineMs !== undefined) {
    throw new InvalidArgument(
      "give deadline (a Date) or deadlineMs (milliseconds from now), not both",
    );
  }
  if (options.deadline !== undefined) {
    if (!(options.deadline instanceof Date)) {
      throw new InvalidArgument(
        `deadline must be a Date, not ${kindOf(options.deadline)} (for a time from now: deadlineMs, in milliseconds)`,
      );
    }
    deadline = `@${deadlineMs(options.deadline)}`;
  } else if (options.deadlineMs !== undefined) {
    const ahead = millis(options.deadlineMs, "deadlineMs", bounds.MAX_DEADLINE_S);
    if (ahead === undefined || ahead <= 0)
      throw new InvalidArgument("deadlineMs must be > 0 ms from now");
    deadline = String(Math.ceil(ahead));
  }
  if (options.name !== undefined) {
    const problem = taskNameProblem(options.name);
    if (problem !== undefined) throw new InvalidArgument(problem);
    text = `${NAME_MARK}${options.name}${NAME_MARK}${text}`;
  }
  let after = "";
  let onDepFail = "";
  if (options.after !== undefined || options.onDepFail !== undefined) {
    if (options.after !== undefined && delayMs > 0)
      throw new InvalidArgument(
        "after and delayMs cannot be combined (a waiting task runs once ready)",
      );
    [after, onDepFail] = encodeAfter(options.after, options.onDepFail, options.taskId);
  }
  if (options.group !== undefined) {
    const problem = groupProblem(options.group);
    if (problem !== undefined) throw new InvalidArgument(problem);
  }
  return {
    task_id: options.taskId === undefined ? newTaskId() : checkTaskId(options.taskId),
    payload: text,
    priority,
    delay_ms: delayMs,
    deadline,
    max_attempts: maxAttempts,
    cost,
    timeout_s: timeoutS,
    after,
    on_dep_fail: onDepFail,
    group: options.group ?? "",
    quotas: options.quotas === undefined ? "" : quotasJson(options.quotas),
  };
}

const DEP_POLICIES = ["fail", "ignore", "cancel"];

/** `after` as the script's JSON array and the policy, checked as the Python client does. */
function encodeAfter(after: unknown, onDepFail: unknown, taskId: unknown): [string, string] {
  // a policy alone is for the children the task will add at run time (addChildren)
  if (after === undefined) return ["", checkPolicy(onDepFail)];
  if (!Array.isArray(after)) throw new InvalidArgument("after must be a list of task ids");
  if (after.length < 1 || after.length > bounds.MAX_AFTER) {
    throw new InvalidArgument(
      `after must name 1 to ${bounds.MAX_AFTER} task ids, not ${after.length}`,
    );
  }
  const ids = after.map(checkTaskId);
  if (new Set(ids).size !== ids.length) throw new InvalidArgument("after names a task id twice");
  if (typeof taskId === "string" && ids.includes(taskId)) {
    throw new InvalidArgument(`task ${pyRepr(taskId)} cannot wait for itself (after)`);
  }
  return [JSON.stringify(ids), checkPolicy(onDepFail ?? "fail")];
}

function checkPolicy(policy: unknown): string {
  if (typeof policy !== "string" || !DEP_POLICIES.includes(policy)) {
    throw new InvalidArgument(
      `onDepFail must be one of ${DEP_POLICIES.join(", ")}, not ${String(policy)}`,
    );
  }
  return policy;
}

/** One `enqueueMany` item checked: an object of a payload and known options only. */
export function itemRecord(item: unknown): TaskRecord {
  if (typeof item !== "object" || item === null || Array.isArray(item)) {
    throw new InvalidArgument(
      `enqueue item must be an object of a payload and options, not ${kindOf(item)}`,
    );
  }
  const keys = Reflect.ownKeys(item);
  const symbol = keys.find((k) => typeof k === "symbol");
  if (symbol !== undefined)
    throw new InvalidArgument(`an enqueue item takes no symbol keys, not ${symbol.toString()}`);
  const unknown = (keys as string[]).filter((k) => !OPTION_NAMES.has(k));
  if (unknown.length > 0) {
    const hint = unknown.length === 1 ? unknownOptionHint(unknown[0] ?? "", OPTION_NAMES) : "";
    throw new InvalidArgument(`unknown enqueue field(s): ${unknown.sort().join(", ")}${hint}`);
  }
  if (!("payload" in item)) throw new InvalidArgument("enqueue item needs a 'payload'");
  const { payload, ...options } = item as EnqueueItem;
  return encodeTask(payload, options);
}

/** `enqueueMany`'s tasks, each checked, and no id twice. */
export function batchRecords(items: Iterable<unknown>): TaskRecord[] {
  const batch = Array.from(items, itemRecord);
  const seen = new Set<string>();
  for (const record of batch) {
    if (seen.has(record.task_id)) {
      throw new InvalidArgument(`task id ${pyRepr(record.task_id)} appears twice in one enqueue`);
    }
    seen.add(record.task_id);
  }
  return batch;
}

/** The trace context stored with a task: a carrier object (`{traceparent, tracestate}`) as compact JSON. */
export function traceText(carrier: Readonly<Record<string, string>> | undefined): string {
  if (carrier === undefined) return "";
  if (!isPlainObject(carrier) || !Object.values(carrier).every((v) => typeof v === "string")) {
    throw new InvalidArgument(
      "traceContext must be an object of strings, e.g. {traceparent: '00-...'}",
    );
  }
  if (Object.keys(carrier).length === 0) return "";
  const text = encodePayload(carrier);
  if (text.length > 4096)
    throw new InvalidArgument("traceContext is longer than 4096 characters as JSON");
  return text;
}
