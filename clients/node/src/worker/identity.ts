/**
 * Who a worker is (its name) and where its process runs (its whereabouts), as the Python
 * worker records and judges them (`worker/identity.py`): a worker that finds its name
 * held by another incarnation takes over only when that one is gone.
 *
 * @module
 */

import { randomBytes } from "node:crypto";
import { readFileSync, readlinkSync } from "node:fs";
import { hostname } from "node:os";

import { WORKER } from "../protocol/layout.js";
import { formatG } from "../pyformat.js";
import { pidAlive, processStart } from "./runtime.js";

/** A holder we can't look into is alive while its heartbeat is younger than this many intervals. */
export const REMOTE_ALIVE_BEATS = 2;

/** `<hostname>-<pid>-<6 hex>`: unique per process, a valid Kubernetes-style name. */
export function defaultPodName(): string {
  const host =
    hostname()
      .toLowerCase()
      .replace(/[^a-z0-9.-]+/g, "-")
      .replace(/^[.-]+|[.-]+$/g, "")
      .slice(0, 40) || "worker";
  return `${host}-${process.pid}-${randomBytes(3).toString("hex")}`;
}

function namespace(kind: string): string | null {
  try {
    const link = readlinkSync(`/proc/self/ns/${kind}`);
    const inode = link.slice(link.indexOf("[") + 1).replace(/\]$/, "");
    return link.includes("[") && inode !== "" ? inode : null;
  } catch {
    return null;
  }
}

function bootId(): string | null {
  try {
    return readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim() || null;
  } catch {
    return null;
  }
}

function word(value: string): string {
  return value.replace(/[\s=]+/g, "-") || "-";
}

/** Where a worker process runs: enough for its peers to tell it alive or gone. */
export interface Whereabouts {
  readonly host: string;
  readonly pid: number | null;
  readonly start: string | null;
  readonly boot: string | null;
  readonly netns: string | null;
  readonly pidns: string | null;
  readonly beat: number | null;
}

/** This process's whereabouts. */
export function localWhereabouts(heartbeatInterval: number): Whereabouts {
  return {
    host: hostname(),
    pid: process.pid,
    start: processStart(process.pid),
    boot: bootId(),
    netns: namespace("net"),
    pidns: namespace("pid"),
    beat: heartbeatInterval,
  };
}

/** `host=H pid=N start=S boot=B netns=I pidns=I beat=F` (`-` for unknown). */
export function encodeWhereabouts(w: Whereabouts): string {
  const fields: [string, string | null][] = [
    ["host", w.host],
    ["pid", w.pid === null ? null : String(w.pid)],
    ["start", w.start],
    ["boot", w.boot],
    ["netns", w.netns],
    ["pidns", w.pidns],
    ["beat", w.beat === null ? null : formatG(w.beat)],
  ];
  return fields.map(([k, v]) => `${k}=${v === null ? "-" : word(v)}`).join(" ");
}

/** The whereabouts of a worker record (null: none recorded, or unreadable). */
export function parseWhereabouts(text: string | null | undefined): Whereabouts | null {
  if (text === null || text === undefined || text === "") return null;
  const fields = new Map<string, string | null>();
  for (const item of text.split(/\s+/)) {
    const eq = item.indexOf("=");
    if (eq >= 0)
      fields.set(item.slice(0, eq), item.slice(eq + 1) === "-" ? null : item.slice(eq + 1));
  }
  const pid = fields.get("pid") ?? null;
  const beat = fields.get("beat") ?? null;
  if ((pid !== null && !/^[0-9]+$/.test(pid)) || (beat !== null && !Number.isFinite(Number(beat))))
    return null;
  return {
    host: fields.get("host") ?? "?",
    pid: pid === null ? null : Number(pid),
    start: fields.get("start") ?? null,
    boot: fields.get("boot") ?? null,
    netns: fields.get("netns") ?? null,
    pidns: fields.get("pidns") ?? null,
    beat: beat === null ? null : Number(beat),
  };
}

/** Is the worker that holds our name (another incarnation) alive? The Python worker's judgement. */
export function holderAlive(
  holder: Whereabouts | null,
  heartbeatAgeMs: number,
  me: Whereabouts,
  defaultBeat: number,
): boolean {
  if (holder === null) return false;
  if (holder.boot !== null && holder.boot === me.boot) {
    if (holder.pidns !== null && holder.pidns === me.pidns) {
      if (holder.pid === null) return false;
      if (holder.pid === me.pid && holder.start === me.start) return false;
      return pidAlive(holder.pid) && processStart(holder.pid) === holder.start;
    }
    if (holder.netns !== null && holder.netns === me.netns) return false;
  }
  const beat = holder.beat !== null && holder.beat > 0 ? holder.beat : defaultBeat;
  return heartbeatAgeMs < REMOTE_ALIVE_BEATS * beat * 1000;
}

/** Another incarnation's record in `workers`, as `register` or `extend` found it. */
export interface WorkerRecord {
  readonly incarnation: string;
  readonly heartbeatAgeMs: number;
  readonly host: string;
}

export function parseWorkerRecord(raw: string, nowMs?: number): WorkerRecord {
  let data: unknown;
  try {
    data = JSON.parse(raw);
  } catch {
    data = null;
  }
  if (typeof data !== "object" || data === null || Array.isArray(data))
    return { incarnation: "", heartbeatAgeMs: 0, host: "" };
  const rec = data as Record<string, unknown>;
  const heartbeat = rec[WORKER.heartbeat_ms];
  const age =
    nowMs !== undefined && typeof heartbeat === "number"
      ? Math.max(0, nowMs - Math.trunc(heartbeat))
      : 0;
  return {
    incarnation: typeof rec.incarnation === "string" ? rec.incarnation : "",
    heartbeatAgeMs: age,
    host: typeof rec.host === "string" ? rec.host : "",
  };
}

/** `pid N on host H` (or `incarnation X` when no whereabouts were recorded). */
export function describeRecord(record: WorkerRecord): string {
  const where = parseWhereabouts(record.host);
  if (where?.pid !== null && where !== null) return `pid ${where.pid} on host ${where.host}`;
  return `incarnation ${record.incarnation}`;
}
