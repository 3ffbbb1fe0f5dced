/**
 * Script replies read into values, their refusals into errors, shared by the producer
 * and the worker.
 *
 * @module
 */

import type { TaskRecord } from "../encoding.js";
import {
  DependencyCycle,
  InvalidArgument,
  InvalidPayload,
  OlderWorker,
  ProtocolError,
  StaleToken,
  TaskExists,
} from "../errors.js";

/** A reply that must be a non-empty list. */
export function replyList(script: string, raw: unknown): unknown[] {
  if (!Array.isArray(raw) || raw.length === 0)
    throw new ProtocolError(`${script}: unexpected reply ${JSON.stringify(raw)}`);
  return raw as unknown[];
}

/** The enqueue script's reply: per task, whether it was created; its refusals as errors. */
export function decodeEnqueue(
  raw: unknown,
  batch: readonly TaskRecord[],
  queue: string,
  parent?: string,
): boolean[] {
  const reply = replyList("enqueue", raw);
  const code = Number(reply[0]);
  if (code === -5) throw new StaleToken(parent ?? "?");
  if (code === -6) throw new OlderWorker(queue, String(reply[1]), String(reply[2]));
  const task = (index: unknown): string => batch[Number(index) - 1]?.task_id ?? "?";
  if (code === -7) throw new DependencyCycle(task(reply[1]), parent ?? "?");
  if (code === -8) {
    throw new InvalidArgument(
      `more than ${Number(reply[1])} tasks wait for '${parent ?? "?"}': too many to check its children for a dependency cycle; add children that are new tasks waiting for no existing one`,
    );
  }
  if (code === -1) {
    throw new InvalidPayload(
      `payload of task ${task(reply[1])} is ${Number(reply[2])} bytes; the queue allows ${Number(reply[3])} (max_payload_bytes)`,
    );
  }
  if (code === -2) throw new TaskExists(task(reply[1]), String(reply[2]));
  if (code === -3)
    throw new InvalidArgument(`task id '${task(reply[1])}' appears twice in one enqueue`);
  if (code === -4) {
    const index = Number(reply[1]);
    const dep = String(reply[2]);
    // a task may wait only for earlier ones: a cycle can never be stored
    if (batch.slice(index).some((r) => r.task_id === dep))
      throw DependencyCycle.later(task(index), dep);
    throw new InvalidArgument(
      `task '${task(reply[1])}' waits for '${String(reply[2])}' (after), which is no task of this queue nor an earlier task of this enqueue`,
    );
  }
  if (code !== 1 || reply.length !== batch.length + 1)
    throw new ProtocolError(`enqueue: unexpected reply ${JSON.stringify(raw)}`);
  return reply.slice(1).map((x) => Number(x) === 1);
}
