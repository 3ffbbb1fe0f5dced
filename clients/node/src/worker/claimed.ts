/**
 * What a claim hands this worker (`ClaimedTask`), read from the claim script's records:
 * pure, no Redis. The Python worker's rules (`worker/claimed.py`): a record is tagged
 * (`\x013`, then name, value pairs, an empty name and the payload, joined by NUL;
 * docs/protocol.md 4.8) and carries the group, trace context and dependency handle, so
 * nothing is read per task after a claim; a positional record (`id, token, attempts,
 * max_attempts, timeout_s, lost, priority, cost[, waited_ms], payload`, an older
 * producer's hand-off) reads as one with those fields alone, marked `unread`: the broker
 * reads its group and trace from the task hash. A named task's payload is
 * `\x01<name>\x01<json>`. Nothing in a record may crash the
 * worker: a task that can't be run as stored comes back as `Unrunnable`, to be failed
 * for good (reason `bad payload`, `bad task` or `unknown task`); a record that names no
 * task is dropped with a log line.
 *
 * @module
 */

import { pyRepr } from "../errors.js";
import { storedNumberProblem } from "../numbers.js";
import { logEvent } from "./log.js";
import { positionalParts, taggedFields } from "../protocol/claimrecord.js";

/** A task handed to this worker. `token` fences every later write about it. */
export interface ClaimedTask {
  readonly id: string;
  readonly token: string;
  readonly payload: Record<string, unknown>;
  /** Starts of this task, this one included. */
  readonly attempts: number;
  readonly maxAttempts: number;
  /** Seconds; null = no limit. */
  readonly timeout: number | null;
  readonly lost: number;
  readonly priority: number;
  readonly cost: number;
  /** Seconds from when it was ready to its claim; null: unknown. */
  readonly waited: number | null;
  /** Which handler runs it; null: the default one. */
  readonly name: string | null;
  /** The producer's trace context as stored; null when it has none. */
  readonly trace: string | null;
  /** The group it belongs to; null: none. */
  readonly group: string | null;
  /**
   * The JSON list of the tasks it waited for (its dependency results' handle); "": it
   * waited for none; null: not known (a positional record: read from the task).
   */
  readonly after: string | null;
  /** Its deadline to start (epoch ms); null: none. */
  readonly deadlineMs: number | null;
  /** The state an earlier attempt checkpointed (JSON text); null or absent: none. */
  readonly checkpoint?: string | null;
  /**
   * On a Redis Cluster, the estimate (`{name: {unit: amount}}` JSON) of provider quotas in
   * other slots, reserved by the broker before the run starts; null or absent: none.
   */
  readonly quotas?: string | null;
  /** Its record carried no group or trace (an older producer's positional hand-off): the broker reads both from the task hash. */
  readonly unread?: boolean;
}

export { CLAIM_MARK, CLAIM_RECORD, taggedFields } from "../protocol/claimrecord.js";

/** A task that can't be run as stored: `[id, token, error, reason]`. */
export type Unrunnable = [string, string, string, string];

/** The task names a worker has handlers for, and whether it runs tasks without one. */
export class Served {
  constructor(
    readonly names: ReadonlySet<string>,
    readonly unnamed: boolean,
  ) {}

  /** Why a task of this name can't run here (its error), or null when it can. */
  refusal(name: string | null): string | null {
    if (name === null)
      return this.unnamed
        ? null
        : `the task has no name and this worker serves only ${this.listed()}`;
    if (this.names.has(name)) return null;
    return `no handler for task name ${pyRepr(name)}; this worker serves ${this.listed()}`;
  }

  private listed(): string {
    const names = [...this.names].sort().map(pyRepr).join(", ") || "no named tasks";
    return names + (this.unnamed ? " and tasks without a name" : "");
  }
}

function whole(raw: string, what: string): number {
  if (/^-?[0-9]+$/.test(raw)) return Number(raw);
  const value = raw.trim() === "" ? NaN : Number(raw);
  if (!Number.isInteger(value))
    throw new Error(`${what} ${pyRepr(raw.slice(0, 40))} is not an integer`);
  return value;
}

function seconds(raw: string): number {
  const value = raw.trim() === "" ? NaN : Number(raw);
  if (!(Number.isFinite(value) && value > 0))
    throw new Error(`timeout ${pyRepr(raw.slice(0, 40))} is not a positive number of seconds`);
  return value;
}

function waitedS(raw: string): number | null {
  if (raw === "") return null;
  const value = Number(raw) / 1000;
  return Number.isFinite(value) && value >= 0 ? value : null;
}

/** A claim record's task id and token, whichever its form ("" for a part it lacks). */
export function idAndToken(raw: unknown): [string, string] {
  const record = String(raw);
  const tagged = taggedFields(record);
  if (tagged !== null) return [tagged[0].get("id") ?? "", tagged[0].get("token") ?? ""];
  const [id = "", token = ""] = record.split("\0", 2);
  return [id, token];
}

/** The fields a tagged record carries only when set; a positional one carries none. */
function optional(
  f: Map<string, string> | null,
): Pick<
  ClaimedTask,
  "trace" | "group" | "after" | "deadlineMs" | "unread" | "checkpoint" | "quotas"
> {
  if (f === null) return { trace: null, group: null, after: null, deadlineMs: null, unread: true };
  const deadline = f.get("deadline");
  return {
    trace: f.get("trace") ?? null,
    group: f.get("group") ?? null,
    after: f.get("after") ?? "",
    deadlineMs: deadline !== undefined && /^[0-9]+$/.test(deadline) ? Number(deadline) : null,
    checkpoint: f.get("checkpoint") ?? null,
    quotas: f.get("quotas") ?? null,
  };
}

function dropped(record: string): void {
  logEvent("warning", "claim_record_dropped", {
    record: JSON.stringify(record.slice(0, 200)),
    note: "names no task",
  });
}

/** The tasks of a claim reply, and those that can't be run as stored. */
export function parseClaimRecords(
  records: readonly unknown[],
  served: Served | null,
): [ClaimedTask[], Unrunnable[]] {
  const tasks: ClaimedTask[] = [];
  const bad: Unrunnable[] = [];
  for (const raw of records) {
    const record =
      typeof raw === "string" ? raw : Buffer.isBuffer(raw) ? raw.toString("utf8") : String(raw);
    const tagged = taggedFields(record);
    let parts: string[];
    let waited = "";
    let data: string;
    let extra: Map<string, string> | null = null;
    if (tagged !== null) {
      const [f, payload] = tagged;
      const positional = positionalParts(f);
      if (positional === null) {
        dropped(record);
        continue;
      }
      [parts, waited] = positional;
      data = payload;
      extra = f;
    } else {
      parts = [];
      let at = 0;
      while (parts.length < 9) {
        const nul = record.indexOf("\0", at);
        if (nul < 0) break;
        parts.push(record.slice(at, nul));
        at = nul + 1;
      }
      parts.push(record.slice(at));
      if (parts.length === 10) {
        waited = parts.splice(8, 1)[0] ?? "";
      } else if (parts.length !== 9) {
        dropped(record);
        continue;
      }
      data = parts[8] ?? "";
    }
    const [
      id = "",
      token = "",
      attempts = "",
      maxAttempts = "",
      timeout = "",
      lost = "",
      priority = "",
      cost = "",
    ] = parts;
    let fields: Omit<
      ClaimedTask,
      "payload" | "name" | "trace" | "id" | "token" | "group" | "after" | "deadlineMs"
    >;
    try {
      fields = {
        attempts: whole(attempts, "attempts"),
        maxAttempts: whole(maxAttempts, "max_attempts"),
        timeout: timeout === "" ? null : seconds(timeout),
        lost: whole(lost, "lost"),
        priority: whole(priority, "priority"),
        cost: whole(cost, "cost"),
        waited: waitedS(waited),
      };
    } catch (error) {
      bad.push([id, token, `task unreadable: ${(error as Error).message}`, "bad task"]);
      continue;
    }
    let name: string | null = null;
    if (data.startsWith("\x01")) {
      const end = data.indexOf("\x01", 1);
      name = end < 0 ? data.slice(1) : data.slice(1, end);
      data = end < 0 ? "" : data.slice(end + 1);
    }
    if (served !== null) {
      const refusal = served.refusal(name);
      if (refusal !== null) {
        bad.push([id, token, refusal, "unknown task"]);
        continue;
      }
    }
    let payload: unknown;
    try {
      payload = JSON.parse(data);
    } catch (error) {
      bad.push([
        id,
        token,
        `payload is not valid JSON: ${(error as Error).message}`,
        "bad payload",
      ]);
      continue;
    }
    if (typeof payload !== "object" || payload === null || Array.isArray(payload)) {
      bad.push([id, token, "payload is not a JSON object", "bad payload"]);
      continue;
    }
    // an integer past ±(2^53-1) stored by an older writer: JSON.parse rounded it, and a
    // handler must not run on a number other than the one enqueued
    const problem = storedNumberProblem(data, "payload");
    if (problem !== undefined) {
      bad.push([id, token, `${problem} (this worker would read it rounded)`, "bad payload"]);
      continue;
    }
    tasks.push({
      id,
      token,
      payload: payload as Record<string, unknown>,
      name,
      ...optional(extra),
      ...fields,
    });
  }
  return [tasks, bad];
}
