/**
 * What an error from a Redis call means for the worker: one pure function, `classify`,
 * with the Python worker's classes and policies (`protocol/faults.py`).
 *
 * - `wait`: Redis can't serve us right now (unreachable, busy, loading, full, a replica,
 *   a cluster in motion...): stop claiming, keep what is held, probe, resume.
 * - `stop`: Redis refuses our credentials or rights: exit with one line (exit 2).
 * - `fail task`: Redis refused the request itself (a script error...): retrying can't help.
 *
 * An error that is no Redis error (a bug: a `TypeError`, a `ProtocolError`) is `null`:
 * the loop lets it go up and the worker fails loudly (exit 1).
 *
 * @module
 */

import { TaskfleetError } from "../errors.js";

export type Policy = "wait" | "stop" | "fail task";

/** One class of Redis trouble; its value is what logs and metrics say. */
export type Fault =
  | "unreachable"
  | "busy"
  | "loading"
  | "full"
  | "misconf"
  | "noreplicas"
  | "readonly"
  | "masterdown"
  | "clusterdown"
  | "tryagain"
  | "moved"
  | "noscript"
  | "auth"
  | "permission"
  | "refused";

export interface RedisFault {
  readonly fault: Fault;
  readonly policy: Policy;
  /** Redis answers reads but refuses writes: a read alone can't tell the outage is over. */
  readonly writesRefused: boolean;
}

/** A call that got no reply within its bound (the connection counts as broken). */
export class NoReply extends Error {
  constructor(ms: number) {
    super(`no reply from Redis within ${ms / 1000} s`);
    this.name = "NoReply";
  }
}

const WRITES_REFUSED: ReadonlySet<Fault> = new Set<Fault>([
  "full",
  "misconf",
  "noreplicas",
  "readonly",
]);

/** What to do about each refusal of writes, for the log line that says so. */
export const WHAT_TO_DO: Readonly<Partial<Record<Fault, string>>> = {
  full: "Redis is full (maxmemory): raise maxmemory or free memory",
  misconf: "Redis can't save its RDB snapshot: fix its disk (see its log)",
  noreplicas: "fewer replicas than min-replicas-to-write are connected",
  readonly: "the server is a replica now (a failover?): point workers at the master",
};

const BY_CODE: Readonly<Record<string, Fault>> = {
  BUSY: "busy",
  UNKILLABLE: "busy",
  LOADING: "loading",
  OOM: "full",
  MISCONF: "misconf",
  NOREPLICAS: "noreplicas",
  READONLY: "readonly",
  MASTERDOWN: "masterdown",
  CLUSTERDOWN: "clusterdown",
  TRYAGAIN: "tryagain",
  MOVED: "moved",
  ASK: "moved",
  NOSCRIPT: "noscript",
  UNBLOCKED: "unreachable",
};

/** Why Redis refused our credentials (`authentication`) or rights (`permission`), else null. */
export function authFailure(error: unknown): "authentication" | "permission" | null {
  if (!(error instanceof Error)) return null;
  const message = error.message;
  if (message.startsWith("WRONGPASS") || message.startsWith("NOAUTH")) return "authentication";
  if (message.startsWith("NOPERM") || message.includes("can't run this command"))
    return "permission";
  return null;
}

function fault(kind: Fault, policy: Policy): RedisFault {
  return { fault: kind, policy, writesRefused: WRITES_REFUSED.has(kind) };
}

/** What `error` from a Redis call means, or null when it is no Redis error (a bug). */
export function classify(error: unknown): RedisFault | null {
  if (!(error instanceof Error)) return null;
  if (
    error instanceof TaskfleetError ||
    error instanceof TypeError ||
    error instanceof RangeError ||
    error instanceof ReferenceError ||
    error instanceof SyntaxError
  ) {
    return null;
  }
  const auth = authFailure(error);
  if (auth !== null) return fault(auth === "authentication" ? "auth" : "permission", "stop");
  if (error.name === "ReplyError") {
    const code = error.message.split(" ", 1)[0] ?? "";
    let waited = BY_CODE[code];
    if (waited === undefined && code === "ERR") {
      // a fault inside a script, as Redis before 7.0 wraps it: "ERR Error running script ...: -OOM ..."
      const at = error.message.indexOf(": -");
      if (at >= 0) waited = BY_CODE[error.message.slice(at + 3).split(" ", 1)[0] ?? ""];
    }
    return waited !== undefined ? fault(waited, "wait") : fault("refused", "fail task");
  }
  // ioredis' own: a closed or refused connection, retries used up, a call without a reply
  return fault("unreachable", "wait");
}

export { SAFE_EVICTION_POLICY } from "../protocol/serverprobe.js";
