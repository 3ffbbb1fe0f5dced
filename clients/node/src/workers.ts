/**
 * The queue's workers as their records say (`Queue.workers`, protocol.md 4.7), and which
 * of them are of an older release: the Python client's reading (`producer/reading.py`:
 * `WorkerInfo`, `older_workers`, `older_workers_note`), with the same words.
 *
 * @module
 */

import { CURRENT_LEVEL, WORKER, WORKER_LEVEL } from "./protocol/layout.js";

/**
 * What a worker of this release serves, as its record's `level` says (generated from
 * Python's `records.WORKER_LEVEL`). A record without a level is a worker of taskfleet
 * 0.1.x: level 1, plain and named tasks. 2 (0.2) also serves flows, groups, claim pauses
 * and spend budgets. 3 (0.3) takes the claim record agreed at register; a level-2 worker
 * is still sent the form it reads, so nothing is refused to it.
 */
export { WORKER_LEVEL };

/**
 * The lowest level a reader takes as current (generated from Python's
 * `records.CURRENT_LEVEL`): a live worker below it is older, and the features it lacks
 * are refused while it serves.
 */
export { CURRENT_LEVEL };

/** The release each level below `WORKER_LEVEL` is: what a reader names it. */
const RELEASE_OF_LEVEL: Readonly<Record<number, string>> = { 1: "0.1.x", 2: "0.2.x" };
/** Older workers a note names; the rest are counted. */
const OLDER_NAMED = 3;

/** A worker of the queue as its record says (`Queue.workers`). */
export interface WorkerInfo {
  readonly pod: string;
  readonly incarnation: string;
  readonly heartbeatMs: number;
  readonly inflight: number;
  readonly concurrency: number;
  readonly draining: boolean;
  /**
   * Slots held by calls it gave up on (their task ended: timed out, lease lost) that still
   * run: it can run `concurrency - held` tasks at once.
   */
  readonly held: number;
  /** Heartbeat within one lease TTL. */
  readonly alive: boolean;
  /**
   * What it serves: `WORKER_LEVEL` for this release; 1 for a 0.1.x worker, which does not
   * serve flows, groups, claim pauses or spend budgets (a missing or unreadable level).
   */
  readonly level: number;
}

/** A record's level as Python's `WorkerRecord.parse` reads it: an integer, else 1. */
function levelOf(value: unknown): number {
  let level = 0;
  if (typeof value === "boolean") level = Number(value);
  else if (typeof value === "number" && Number.isFinite(value)) level = Math.trunc(value);
  else if (typeof value === "string" && /^\s*[+-]?\d+\s*$/.test(value))
    level = Number.parseInt(value, 10);
  return level || 1;
}

/**
 * `pod`'s record (`text`, JSON) read at the server's `nowMs`, or null when this version
 * cannot read it (`sweep` drops it once stale); alive: a heartbeat within `ttlMs`.
 */
export function workerInfo(
  pod: string,
  text: string,
  nowMs: number,
  ttlMs: number,
): WorkerInfo | null {
  let rec: unknown;
  try {
    rec = JSON.parse(text);
  } catch {
    return null;
  }
  if (typeof rec !== "object" || rec === null || Array.isArray(rec)) return null;
  const fields = rec as Record<string, unknown>;
  const stored = fields[WORKER.heartbeat_ms];
  const heartbeat = Number(stored);
  if (stored === undefined || stored === null || !Number.isFinite(heartbeat)) return null;
  return {
    pod,
    incarnation: typeof fields.incarnation === "string" ? fields.incarnation : "",
    heartbeatMs: Math.trunc(heartbeat),
    inflight: Number(fields.inflight ?? 0) || 0,
    concurrency: Number(fields.concurrency ?? 0) || 0,
    draining: fields.draining === true,
    held: Math.max(0, Math.trunc(Number(fields.held ?? 0) || 0)),
    alive: nowMs - heartbeat <= ttlMs,
    level: levelOf(fields.level),
  };
}

/**
 * The live workers (by name, sorted) of a level below `CURRENT_LEVEL`: what they do not
 * serve (flows, groups, claim pauses, spend budgets) goes wrong silently.
 */
export function olderWorkers(found: Iterable<WorkerInfo>): string[] {
  const names: string[] = [];
  for (const w of found) if (w.alive && w.level < CURRENT_LEVEL) names.push(w.pod);
  return names.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
}

/**
 * One line saying that `names` (a few named, the rest counted) serve only `level` and what
 * that means: the words of `taskfleet workers` and the operator.
 */
export function olderWorkersNote(names: readonly string[], level = 1): string {
  let shown = names.slice(0, OLDER_NAMED).join(", ");
  if (names.length > OLDER_NAMED) shown += ` and ${names.length - OLDER_NAMED} more`;
  const release = RELEASE_OF_LEVEL[level] ?? `level ${level}`;
  const [who, verb, them] =
    names.length > 1 ? ["workers", "run", "them"] : ["worker", "runs", "it"];
  return (
    `${who} ${shown} ${verb} taskfleet ${release} (level ${level}): flows, groups, claim ` +
    `pauses and spend budgets are not served by ${them}; upgrade ${them} (docs/upgrade.md)`
  );
}
