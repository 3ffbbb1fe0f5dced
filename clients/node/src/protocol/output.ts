/**
 * A task's streamed output as stored (the Python client's `protocol/output.py`): entries
 * of the stream `output:<id>` hold `a` (the attempt), `k` (`t` text, `j` JSON text) and
 * `d` (the chunk); the script that finishes the task adds an entry `end` (the state it
 * ended in). A reader blocks on the stream (XREAD BLOCK): no polling.
 *
 * @module
 */

import type { Client } from "../connection.js";
import type { QueueKeys } from "../keys.js";
import { layoutOf } from "./store.js";

/** Entries one read takes. */
export const READ_COUNT = 1000;

/** One chunk of a task's output. */
export interface OutputChunk {
  /** Its stream id: `since` resumes after it. */
  readonly id: string;
  /** The attempt that emitted it. */
  readonly attempt: number;
  /** The chunk: text, or the JSON value a run emitted. */
  readonly data: unknown;
  /** Whether `data` was emitted as JSON (else text). */
  readonly json: boolean;
}

/** An entry as read: a chunk, or (a string) the state the task ended in. */
export type OutputEntry = [string, OutputChunk | string];

function entryOf(id: string, fields: string[]): OutputEntry {
  const f = new Map<string, string>();
  for (let i = 0; i + 1 < fields.length; i += 2)
    f.set(fields[i] as string, fields[i + 1] as string);
  const end = f.get("end");
  if (end !== undefined) return [id, end];
  let data: unknown = f.get("d") ?? "";
  let json = f.get("k") === "j";
  if (json) {
    try {
      data = JSON.parse(data as string);
    } catch {
      json = false; // a foreign writer's: kept as text
    }
  }
  const attempt = Number(f.get("a") ?? "0");
  return [id, { id, attempt: Number.isInteger(attempt) ? attempt : 0, data, json }];
}

type RawEntries = [string, string[]][];

/** Entries after `after` ('0-0': from the first), waiting up to `blockMs` when there is none. */
export async function readOutput(
  client: Client,
  keys: QueueKeys,
  taskId: string,
  after: string,
  blockMs: number,
): Promise<OutputEntry[]> {
  const key = layoutOf(keys).output(taskId);
  const reply = await client.xread("COUNT", READ_COUNT, "BLOCK", blockMs, "STREAMS", key, after);
  if (reply === null || reply.length === 0) return [];
  return (reply[0] as [string, RawEntries])[1].map(([id, fields]) => entryOf(id, fields));
}

/** Entries after `after`, without waiting. */
export async function rangeOutput(
  client: Client,
  keys: QueueKeys,
  taskId: string,
  after: string,
): Promise<OutputEntry[]> {
  const key = layoutOf(keys).output(taskId);
  const raw = (await client.xrange(key, "(" + after, "+", "COUNT", READ_COUNT)) as RawEntries;
  return raw.map(([id, fields]) => entryOf(id, fields));
}

/** The task's state; null when there is no such task. */
export async function taskState(
  client: Client,
  keys: QueueKeys,
  taskId: string,
): Promise<string | null> {
  return client.hget(layoutOf(keys).task(taskId), "state");
}
