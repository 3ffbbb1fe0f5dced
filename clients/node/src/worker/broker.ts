/**
 * The worker's side of the protocol: register, claim, heartbeat, finish, release,
 * deregister; one script of the bundle per call, each call bounded by the reply timeout
 * (the Python worker's `worker/broker.py`). A worker killed at any instant leaves the
 * queue consistent: what it held comes back through lease expiry or `requeue`.
 *
 * @module
 */

import { randomBytes } from "node:crypto";

import { Cluster, Redis } from "ioredis";

import { type Bundle, packagedBundle } from "../bundle.js";
import { type Client, Scripts, quiet } from "../connection.js";
import type { TaskRecord } from "../encoding.js";
import { MAX_CHECKPOINT_BYTES, MAX_OUTPUT_BYTES, MAX_OUTPUT_ENTRIES } from "../bounds.js";
import {
  InvalidArgument,
  OutputFull,
  ProtocolError,
  StaleToken,
  TaskfleetError,
} from "../errors.js";
import { dependencyResults } from "../flows.js";
import { quotaRoute } from "../providerquota.js";
import { QueueKeys } from "../keys.js";
import { decodeEnqueue } from "../protocol/replies.js";
import type { ScriptArgs, ScriptName, ScriptRecords } from "../protocol/signatures.js";
import {
  GROUP_AND_TRACE,
  popWork,
  probeWritable,
  readLeaseTtl,
  taskFieldsOfEach,
} from "../protocol/workerstore.js";
import { CONFIG_FIELDS } from "../protocol/defaults.js";
import { type ClaimedTask, type Served, parseClaimRecords } from "./claimed.js";
import { QuotaSlots } from "./quotaslots.js";
import { NoReply, classify } from "./faults.js";
import { Flag, bounded, until } from "./flag.js";
import { MAX_DEFERRALS } from "./failures.js";
import { type WorkerRecord, describeRecord, parseWorkerRecord } from "./identity.js";
import {
  CLAIM_HOUSEKEEPING_BOUND,
  MAX_BATCH,
  REPAIR_BOUND,
  REPAIR_SETTLE_MS,
  SWEEP_BOUND,
} from "./limits.js";
import { logEvent } from "./log.js";

/** Bound on the stored error text of a failed attempt. */
export const MAX_ERROR_CHARS = 8192;
/** Unanswered claim calls remembered for undoing. */
export const MAX_UNANSWERED = 64;
/** How long past its own timeout a blocking pop may take to answer. */
export const BLOCKING_REPLY_MARGIN_MS = 5000;

/** Random bytes drawn at once for token bases (8 a claim): one draw per 256 claims. */
const TOKEN_POOL_BYTES = 8 * 256;
let tokenPool = Buffer.alloc(0);
let tokenAt = 0;

/** A claim's token base: 8 random bytes in hex, from a pool refilled by `randomBytes`. */
export function tokenBase(): string {
  if (tokenAt + 8 > tokenPool.length) {
    tokenPool = randomBytes(TOKEN_POOL_BYTES);
    tokenAt = 0;
  }
  const base = tokenPool.toString("hex", tokenAt, tokenAt + 8);
  tokenAt += 8;
  return base;
}

/** One claim's tasks, and what the queue said besides. */
export interface ClaimResult {
  tasks: ClaimedTask[];
  /** > 0: a rate limit held tasks back; ms until capacity returns. */
  retryAfterMs: number;
  /** ms until the earliest delayed task is due (null: nothing delayed). */
  nextDueMs: number | null;
  /** Tasks were still pending after this claim. */
  morePending: boolean;
}

/** The heartbeat's reply: leases lost, and held tasks whose cancellation was asked for. */
export interface Extended {
  lost: string[];
  cancelled: string[];
}

/** Per-task codes of a completion. */
export const STALE = 0;
export const COMPLETED = 1;
export const RESULT_TOO_LARGE = 2;
export const CANCELLED = 3;
/** Dead: a child the task added at run time failed (its policy `fail`); the result is not stored. */
export const DEPENDENCY_FAILED = 4;
/** Waiting for children it added at run time: its result stored, neither done nor dead yet. */
export const JOINING = 5;

/** A start under the name of a live worker: refused (exit 2). */
export class NameInUse extends TaskfleetError {
  constructor(
    readonly pod: string,
    holder: string,
  ) {
    super(
      `worker name "${pod}" is in use by a live worker (${holder}); give each worker its own --pod`,
    );
  }
}

/**
 * Another incarnation registered under our name since: it took back all we held. A
 * TaskfleetError, so no loop takes it for an outage (its loop stops the worker).
 */
export class IdentityTaken extends TaskfleetError {
  constructor(readonly holder: string) {
    super(`another worker registered under this name (${holder})`);
    this.name = "IdentityTaken";
  }
}

/**
 * This worker's pod is gone from the Kubernetes API: the operator took back its tasks and
 * left a tombstone (a force-deleted pod's container still running). It may not register
 * again: it stops claiming and exits.
 */
export class PodGone extends IdentityTaken {
  constructor(
    readonly pod: string,
    readonly untilMs: number,
  ) {
    super("nobody: the pod is gone");
    this.message = `worker "${pod}": its pod is gone from the Kubernetes API and its tasks were taken back; it may not register again`;
    this.name = "PodGone";
  }
}

/** A report of a run: latest progress JSON and cost (null: none). */
export interface Report {
  taskId: string;
  token: string;
  progress: string | null;
  cost: number | null;
}

/** One planned firing of a schedule (`schedule_fire`'s record). */
export interface FirePlan {
  name: string;
  rev: string;
  expected: number;
  slots: number[];
  skipped: number;
  nextSlot: number | null;
  nextDueMs: number;
}

/** A due schedule as `schedule_due` returns it. */
export interface Due {
  name: string;
  rev: string;
  nextSlot: number;
  cron: string;
  tz: string;
  catchup: string;
  catchupLimit: number;
  jitterMs: number;
}

function list(raw: unknown, script: string): unknown[] {
  if (!Array.isArray(raw))
    throw new ProtocolError(`${script}: unexpected reply ${JSON.stringify(raw)}`);
  return raw as unknown[];
}

type RawClaim = {
  retryAfterMs: number;
  nextDueMs: number | null;
  morePending: boolean;
  records: unknown[];
};

/**
 * A claim reply; throws `IdentityTaken` when it is `{-1, record}`: another incarnation
 * registered under our name since, nothing was claimed. Null for `{-1, ""}`: the name has
 * no readable record (a registered caller's claim), nothing was claimed: register again.
 */
function rawClaim(raw: unknown[], script: string): RawClaim | null {
  if (raw.length === 2 && Number(raw[0]) === -1) {
    const record = String(raw[1]);
    if (record === "") return null;
    throw new IdentityTaken(describeRecord(parseWorkerRecord(record)));
  }
  if (raw.length < 3)
    throw new ProtocolError(`${script}: unexpected claim reply ${JSON.stringify(raw)}`);
  const due = Number(raw[1]);
  return {
    retryAfterMs: Number(raw[0]),
    nextDueMs: due < 0 ? null : due,
    morePending: Number(raw[2]) === 1,
    records: raw.slice(3),
  };
}

/** One worker process's connection to one queue. */
export class Broker {
  readonly keys: QueueKeys;
  concurrency = 0;
  private readonly bundle: Bundle;
  private readonly scripts: Scripts;
  private blocking: Client | null = null;
  private unanswered: string[] = [];
  private blockingCut = new Flag();
  /** Registered: claims and beats then need our own record (one gone sends us through register again). */
  private registered = false;
  /** Where this worker's next repair call starts in the waiting set. */
  private repairCursor = 0;
  /** Runs holding reservations on provider quotas in other slots (a Redis Cluster). */
  readonly quotaSlots: QuotaSlots;
  private leaseMs: number | null = null;

  constructor(
    readonly queue: string,
    readonly client: Client,
    readonly pod: string,
    readonly incarnation: string,
    private readonly options: {
      replyTimeoutMs: number;
      host: string;
      served: Served | null;
      waitReplicas?: number;
      waitTimeoutMs?: number;
    },
  ) {
    this.bundle = packagedBundle();
    this.keys = new QueueKeys(queue, this.bundle);
    this.scripts = new Scripts(client, this.bundle);
    this.quotaSlots = new QuotaSlots(
      client instanceof Cluster,
      this.keys,
      this.scripts,
      this.bundle,
      (call) => this.bound(call),
      () => this.queueLeaseMs(),
    );
  }

  /** The queue's lease TTL (ms), read once: a quota reservation lasts as long as a lease. */
  private async queueLeaseMs(): Promise<number> {
    if (this.leaseMs === null) {
      const raw = await this.bound(readLeaseTtl(this.client, this.keys));
      const ttl = Number(raw);
      this.leaseMs = Math.max(
        1,
        Math.round((ttl > 0 ? ttl : CONFIG_FIELDS.leaseTtlS.default) * 1000),
      );
    }
    return this.leaseMs;
  }

  private bound<T>(promise: Promise<T>, ms: number = this.options.replyTimeoutMs): Promise<T> {
    return bounded(promise, ms, () => new NoReply(ms));
  }

  private async call<S extends ScriptName>(
    script: S,
    args: ScriptArgs[S],
    records: readonly ScriptRecords[S][] = [],
  ): Promise<unknown> {
    if (this.unanswered.length > 0) await this.disown();
    return this.bound(this.scripts.run(script, this.keys, this.bundle.pack(script, args, records)));
  }

  /** A call that claims under `base`; remembered for disown when it got no reply. */
  private async claiming<S extends ScriptName>(
    script: S,
    base: string,
    args: ScriptArgs[S],
    records: readonly ScriptRecords[S][] = [],
    completes = false,
  ): Promise<unknown> {
    try {
      const replicas = this.options.waitReplicas ?? 0;
      if (!completes || replicas === 0) return await this.call(script, args, records);
      if (this.unanswered.length > 0) await this.disown();
      const timeout = this.options.waitTimeoutMs ?? 1000;
      const argv = this.bundle.pack(script, args, records);
      const [reply, acked] = await this.bound(
        this.scripts.runAndWait(script, this.keys, argv, replicas, timeout),
        this.options.replyTimeoutMs + (timeout || 60_000),
      );
      if (acked < replicas)
        logEvent("warning", "completion_not_replicated", {
          replicas: acked,
          wanted: replicas,
          timeout_ms: timeout,
        });
      return reply;
    } catch (error) {
      // No reply: it may have claimed nothing, or may yet claim. Either way its tasks are none of ours.
      if (base !== "" && classify(error)?.policy === "wait") {
        this.unanswered.push(base);
        this.unanswered = this.unanswered.slice(-MAX_UNANSWERED);
      }
      throw error;
    }
  }

  private async disown(): Promise<void> {
    const bases = [...this.unanswered];
    const argv = this.bundle.pack(
      "disown",
      { pod: this.pod, incarnation: this.incarnation },
      bases.map((token_base) => ({ token_base })),
    );
    const released = Number(await this.bound(this.scripts.run("disown", this.keys, argv)));
    this.unanswered = this.unanswered.filter((b) => !bases.includes(b));
    if (released > 0)
      logEvent("info", "unanswered_claims_released", { tasks: released, claims: bases.length });
  }

  private tokenBase(): string {
    return tokenBase();
  }

  /**
   * Record this worker; take back what earlier incarnations of the name held (returns
   * how many). With `inUse`, another incarnation's record is judged first: a live one
   * makes it throw `NameInUse` (nothing changed).
   */
  async register(
    concurrency: number,
    inUse?: (record: WorkerRecord) => string | null,
  ): Promise<number> {
    this.concurrency = concurrency;
    let expected = inUse === undefined ? "*" : "";
    for (;;) {
      const reply = list(
        await this.call("register", {
          pod: this.pod,
          incarnation: this.incarnation,
          concurrency,
          host: this.options.host,
          expected,
        }),
        "register",
      );
      if (reply.length === 3 && Number(reply[0]) === -2)
        throw new PodGone(this.pod, Number(reply[1]));
      if (reply.length === 3 && Number(reply[0]) === -1) {
        if (inUse === undefined)
          throw new ProtocolError("register: refused a takeover of any incarnation");
        const record = parseWorkerRecord(String(reply[1]), Number(reply[2]));
        const live = inUse(record);
        if (live !== null) throw new NameInUse(this.pod, live);
        expected = record.incarnation;
        continue;
      }
      if (reply.length !== 2)
        throw new ProtocolError(`register: unexpected reply ${JSON.stringify(reply)}`);
      this.registered = true;
      return Number(reply[0]) + Number(reply[1]);
    }
  }

  /**
   * A claim or beat found no readable record under our name (a successor that took it
   * deregistered since, the operator requeued it, a sweep dropped it, Redis lost its
   * data): register again before working on, judged and taken over atomically as at a
   * start. What we still hold we keep; what was taken from us the next beat reports
   * lost. Throws `IdentityTaken` when another incarnation registered meanwhile, `PodGone`
   * when the operator found the pod gone from the Kubernetes API (tombstoned).
   */
  private async registerAgain(): Promise<void> {
    const reply = list(
      await this.call("register", {
        pod: this.pod,
        incarnation: this.incarnation,
        concurrency: this.concurrency,
        host: this.options.host,
        expected: "",
      }),
      "register",
    );
    if (reply.length === 3 && Number(reply[0]) === -2)
      throw new PodGone(this.pod, Number(reply[1]));
    if (reply.length === 3 && Number(reply[0]) === -1)
      throw new IdentityTaken(
        describeRecord(parseWorkerRecord(String(reply[1]), Number(reply[2]))),
      );
    if (reply.length !== 2)
      throw new ProtocolError(`register: unexpected reply ${JSON.stringify(reply)}`);
    logEvent("warning", "registered_again", {
      pod: this.pod,
      incarnation: this.incarnation,
      note: "no worker record under this name",
      requeued: Number(reply[0]) + Number(reply[1]),
    });
  }

  /** Remove this worker's record, giving back what it still holds (as lost when `failed`). */
  async deregister(failed: boolean): Promise<number> {
    return Number(
      await this.call("deregister", {
        pod: this.pod,
        incarnation: this.incarnation,
        failed: failed ? 1 : 0,
      }),
    );
  }

  /** Take up to `n` tasks; with `idleMs`, a claim that empties the queue registers us for hand-offs. */
  async claim(n: number, idleMs: number, prefetch = 0): Promise<ClaimResult> {
    if (n <= 0) return { tasks: [], retryAfterMs: 0, nextDueMs: null, morePending: false };
    const max = Math.min(n, MAX_BATCH);
    for (let attempt = 0; ; attempt++) {
      const base = this.tokenBase();
      const raw = await this.claiming("claim", base, {
        pod: this.pod,
        incarnation: this.incarnation,
        max_tasks: max,
        token_base: base,
        bound: CLAIM_HOUSEKEEPING_BOUND,
        idle_ms: idleMs,
        prefetch: Math.min(prefetch, max),
        registered: this.registered ? 1 : undefined,
        quota_slots: 1,
      });
      const parsed = rawClaim(list(raw, "claim"), "claim");
      if (parsed !== null) return this.claimed(parsed);
      // gone again just after registering: nothing now, the next claim registers again
      if (attempt > 0) return { tasks: [], retryAfterMs: 1, nextDueMs: null, morePending: false };
      await this.registerAgain();
    }
  }

  /** Completions, then a claim of `n`, in one round trip. */
  async completeAndClaim(
    items: readonly [string, string, string | null][],
    n: number,
    prefetch = 0,
  ): Promise<[number[], ClaimResult]> {
    const max = Math.min(n, MAX_BATCH);
    const base = this.tokenBase();
    const raw = list(
      await this.claiming(
        "complete",
        base,
        {
          pod: this.pod,
          incarnation: this.incarnation,
          max_tasks: max,
          token_base: base,
          bound: CLAIM_HOUSEKEEPING_BOUND,
          idle_ms: 0,
          prefetch: Math.min(prefetch, max),
          registered: this.registered ? 1 : undefined,
          quota_slots: 1,
        },
        items.map(([task_id, token, result]) => ({ task_id, token, result: result ?? "" })),
        true,
      ),
      "complete",
    );
    const parsed = rawClaim(raw.slice(1), "complete");
    if (this.quotaSlots.runs.size > 0) await this.quotaSlots.end(items.map(([, token]) => token));
    if (parsed !== null) return [codes(raw[0]), await this.claimed(parsed)];
    // the completions were applied; the claim needs our record
    await this.registerAgain();
    return [codes(raw[0]), await this.claim(n, 0, prefetch)];
  }

  /**
   * Tasks the running task `parent` (claimed under `token`) waits for, its children, in
   * one enqueue call; `StaleToken` when that run no longer holds it (docs/flows.md).
   */
  async addChildren(parent: string, token: string, batch: readonly TaskRecord[]): Promise<void> {
    const records = batch.map((r) => ({ ...r }));
    decodeEnqueue(
      await this.call(
        "enqueue",
        { token_base: "", trace: "", parent, parent_token: token },
        records,
      ),
      batch,
      this.keys.queue,
      parent,
    );
  }

  /**
   * Store `state` (JSON text) as the task's checkpoint under the run's `token`; `keep`: it
   * stays once the task finished. `StaleToken` when that run no longer holds the task.
   */
  async checkpoint(taskId: string, token: string, state: string, keep: boolean): Promise<void> {
    const raw = await this.call("checkpoint", {
      task_id: taskId,
      token,
      state,
      keep: keep ? 1 : 0,
      max_bytes: MAX_CHECKPOINT_BYTES,
    });
    if (raw === 1) return;
    if (raw === 0) throw new StaleToken(taskId);
    if (raw === -1)
      throw new InvalidArgument(
        `checkpoint state exceeds MAX_CHECKPOINT_BYTES (${MAX_CHECKPOINT_BYTES})`,
      );
    throw new ProtocolError(`checkpoint: unexpected reply ${String(raw)}`);
  }

  /**
   * Append a chunk (`kind` "t" text, "j" JSON text) to the task's output under the run's
   * `token`; its entry id. `StaleToken` when that run no longer holds the task,
   * `OutputFull` past the caps.
   */
  async emit(taskId: string, token: string, kind: string, data: string): Promise<string> {
    const raw = await this.call("emit", {
      task_id: taskId,
      token,
      kind,
      data,
      max_entries: MAX_OUTPUT_ENTRIES,
      max_bytes: MAX_OUTPUT_BYTES,
    });
    if (raw === 0) throw new StaleToken(taskId);
    if (raw === -1)
      throw new OutputFull(
        `task ${taskId}: its output holds ${MAX_OUTPUT_ENTRIES} chunks or ${MAX_OUTPUT_BYTES} bytes (MAX_OUTPUT_ENTRIES, MAX_OUTPUT_BYTES)`,
      );
    if (typeof raw === "string") return raw;
    throw new ProtocolError(`emit: unexpected reply ${String(raw)}`);
  }

  /** The results a task's dependencies handed it, by their id. */
  async dependencyResults(taskId: string, after: string | null): Promise<Record<string, unknown>> {
    return this.bound(dependencyResults(this.client, this.keys, taskId, after));
  }

  /** Finish tasks: per item `COMPLETED`, `STALE`, `RESULT_TOO_LARGE`, `CANCELLED`, `DEPENDENCY_FAILED` or `JOINING`. */
  async complete(items: readonly [string, string, string | null][]): Promise<number[]> {
    const out: number[] = [];
    for (let at = 0; at < items.length; at += MAX_BATCH) {
      const chunk = items
        .slice(at, at + MAX_BATCH)
        .map(([task_id, token, result]) => ({ task_id, token, result: result ?? "" }));
      const replicas = this.options.waitReplicas ?? 0;
      let raw: unknown;
      if (replicas === 0) {
        raw = await this.call("complete", {}, chunk);
      } else {
        raw = await this.claiming("complete", "", {}, chunk, true);
      }
      out.push(...codes(raw));
    }
    if (this.quotaSlots.runs.size > 0) await this.quotaSlots.end(items.map(([, token]) => token));
    return out;
  }

  /** Record a failed attempt; the state it left (`delayed`, `dead`, `cancelled`), or null when stale. */
  async fail(
    taskId: string,
    token: string,
    error: string,
    retryable: boolean,
    reason = "",
    retryAfterMs: number | null = null,
    throttle = false,
    throttleGroup = false,
    traceback = "",
    timedOut = false,
  ): Promise<string | null> {
    const state = String(
      await this.call("fail", {
        task_id: taskId,
        token,
        error: error.slice(0, MAX_ERROR_CHARS),
        retryable: retryable ? 1 : 0,
        jitter: Math.random() * 2 - 1,
        reason,
        retry_after_ms: retryAfterMs ?? undefined,
        max_deferrals: retryAfterMs === null && !throttle ? undefined : MAX_DEFERRALS,
        throttle: throttle ? (throttleGroup ? 2 : 1) : undefined,
        traceback: traceback === "" ? undefined : traceback,
        timed_out: timedOut ? 1 : undefined,
      }),
    );
    if (!["delayed", "dead", "cancelled", "stale"].includes(state))
      throw new ProtocolError(`fail: unexpected reply ${state}`);
    if (this.quotaSlots.runs.size > 0) await this.quotaSlots.end([token]);
    return state === "stale" ? null : state;
  }

  /**
   * A handler reported its provider's quota spent (`reportQuota`): every worker stops
   * claiming the queue's tasks (with `taskId`: that task's group's, if it has one) for
   * `pauseMs` (null: the adaptive pause). Returns the pause's end (ms).
   */
  /**
   * A handler threw `RateLimited` with a quota: claims of every task naming that provider
   * quota stop for `pauseMs`, in every queue. A name that is no quota's pauses nothing.
   */
  async pauseProviderQuota(name: string, pauseMs: number, reason: string): Promise<void> {
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$/.test(name)) return;
    const argv = this.bundle.pack("provider_quota", {
      op: "pause",
      name,
      pause_ms: Math.max(0, Math.trunc(pauseMs)),
      reason: reason.slice(0, 200),
    });
    // sent to the quota's slot (a cluster routes it by the quota's hash)
    await this.bound(this.scripts.run("provider_quota", quotaRoute(name), argv));
  }

  /** A run's settlement of provider quota `name` (`task.settle`); `used`: its JSON. */
  async settle(taskId: string, token: string, name: string, used: string): Promise<void> {
    let code = Number(await this.call("settle", { task_id: taskId, token, name, used }));
    // -3: a Redis Cluster, the run's reservation is kept on the quota's own slot
    if (code === -3) code = await this.quotaSlots.settle(taskId, token, name, used);
    if (code === 0) throw new StaleToken(taskId);
    if (code === -1)
      throw new InvalidArgument(`task ${taskId} names no quota "${name}" (enqueue quotas)`);
    if (code === -2) throw new InvalidArgument(`no provider quota "${name}": configure it first`);
  }

  async pauseQuota(pauseMs: number | null, reason: string, taskId = ""): Promise<number> {
    const reply = await this.call("quota", {
      op: "pause",
      pause_ms: pauseMs ?? undefined,
      reason,
      task_id: taskId || undefined,
      reporter: this.pod,
    });
    if (!Array.isArray(reply) || reply.length !== 2)
      throw new ProtocolError(`quota: unexpected reply ${String(reply)}`);
    return Number(reply[0]);
  }

  /** Write handlers' reports; per report, false when refused. */
  async report(reports: readonly Report[]): Promise<boolean[]> {
    if (reports.length === 0) return [];
    const flags = String(
      await this.call(
        "report",
        {},
        reports.map((r) => ({
          task_id: r.taskId,
          token: r.token,
          progress: r.progress ?? "",
          cost: r.cost === null ? "" : r.cost,
        })),
      ),
    );
    if (flags.length !== reports.length)
      throw new ProtocolError(`report: unexpected reply ${flags}`);
    return Array.from(flags, (c) => c === "1");
  }

  /** Give back unfinished tasks (not an attempt, not lost); how many went back. */
  async release(items: readonly [string, string][], unstarted = false): Promise<number> {
    let released = 0;
    for (let at = 0; at < items.length; at += MAX_BATCH) {
      const chunk = items.slice(at, at + MAX_BATCH).map(([task_id, token]) => ({ task_id, token }));
      const args = { pod: this.pod, unstarted: unstarted ? "1" : "" };
      released += Number(await this.call("release", args, chunk));
    }
    // given back, not an attempt: the estimate goes back
    if (this.quotaSlots.runs.size > 0)
      await this.quotaSlots.end(
        items.map(([, token]) => token),
        true,
      );
    return released;
  }

  /** The heartbeat: extend every lease held; throws `IdentityTaken` when another incarnation holds our name. */
  async beat(
    tokens: ReadonlyMap<string, string>,
    inflight: number,
    draining: boolean,
    held = 0,
  ): Promise<Extended> {
    let reply: unknown[] = [];
    for (let attempt = 0; attempt < 2; attempt++) {
      reply = list(
        await this.call(
          "extend",
          {
            pod: this.pod,
            incarnation: this.incarnation,
            inflight,
            draining: draining ? 1 : 0,
            concurrency: this.concurrency,
            host: this.options.host,
            registered: this.registered ? 1 : undefined,
            held: held > 0 ? held : undefined,
          },
          [...tokens].map(([task_id, token]) => ({ task_id, token })),
        ),
        "extend",
      );
      if (reply.length === 0) throw new ProtocolError("extend: empty reply");
      if (typeof reply[0] !== "number") break;
      // {-1, record}: refused, nothing extended
      const record = reply.length > 1 ? String(reply[1]) : "";
      if (record !== "") throw new IdentityTaken(describeRecord(parseWorkerRecord(record)));
      if (attempt > 0) return { lost: [], cancelled: [] }; // gone again at once: the next beat asks
      await this.registerAgain();
    }
    const ids = reply.slice(1).map(String);
    const cut = ids.indexOf("");
    const lost = cut < 0 ? ids : ids.slice(0, cut);
    if (this.quotaSlots.runs.size > 0) {
      await this.quotaSlots.end(lost.flatMap((id) => tokens.get(id) ?? []));
      await this.quotaSlots.extend(tokens.values());
    }
    return { lost, cancelled: cut < 0 ? [] : ids.slice(cut + 1) };
  }

  /** The housekeeping pass, repeated (up to `maxCalls`) while a step is full. */
  async sweep(maxCalls = 1): Promise<void> {
    for (let i = 0; i < maxCalls; i++) {
      const counts = list(await this.call("sweep", { bound: SWEEP_BOUND }), "sweep").map(Number);
      const [
        promoted = 0,
        expired = 0,
        requeued = 0,
        lostDead = 0,
        prunedDone = 0,
        prunedDead = 0,
        ,
        prunedCancelled = 0,
      ] = counts;
      if (
        Math.max(promoted, expired, requeued + lostDead, prunedDone, prunedDead, prunedCancelled) <
        SWEEP_BOUND
      )
        return;
    }
  }

  /**
   * Resolve waiting tasks whose dependencies all ended without waking them (repair.lua),
   * a bounded slice of the waiting set a call, up to `maxCalls` calls while the pass goes
   * on; the tasks repaired, each with the state it left in.
   */
  async repair(maxCalls = 1): Promise<[string, string][]> {
    const repaired: [string, string][] = [];
    for (let i = 0; i < maxCalls; i++) {
      const reply = list(
        await this.call("repair", {
          bound: REPAIR_BOUND,
          cursor: this.repairCursor,
          settle_ms: REPAIR_SETTLE_MS,
        }),
        "repair",
      ).map(String);
      if (reply.length < 2 || reply.length % 2 !== 0)
        throw new ProtocolError("repair: unexpected reply");
      this.repairCursor = Number(reply[0]);
      for (let j = 2; j < reply.length; j += 2)
        repaired.push([reply[j] as string, reply[j + 1] as string]);
      if (reply[1] !== "1") break;
    }
    return repaired;
  }

  /** Claim up to `limit` due schedules for `leaseMs`. */
  async schedulesDue(
    limit: number,
    leaseMs: number,
  ): Promise<{ nowMs: number; nextDueMs: number | null; due: Due[] }> {
    const reply = list(
      await this.call("schedule_due", { limit, lease_ms: leaseMs }),
      "schedule_due",
    );
    if (reply.length < 2 || (reply.length - 2) % 8 !== 0)
      throw new ProtocolError(`schedule_due: unexpected reply`);
    const due: Due[] = [];
    for (let i = 2; i < reply.length; i += 8) {
      const nextSlot = Number(reply[i + 2]);
      const limitAll = Number(reply[i + 6] === "" ? 1 : reply[i + 6]);
      const jitter = Number(reply[i + 7] === "" ? 0 : reply[i + 7]);
      if (![nextSlot, limitAll, jitter].every(Number.isInteger)) continue; // edited by hand: its lease brings it back
      due.push({
        name: String(reply[i]),
        rev: String(reply[i + 1]),
        nextSlot,
        cron: String(reply[i + 3]),
        tz: String(reply[i + 4]),
        catchup: String(reply[i + 5]),
        catchupLimit: limitAll,
        jitterMs: jitter,
      });
    }
    const left = Number(reply[1]);
    return { nowMs: Number(reply[0]), nextDueMs: left < 0 ? null : left, due };
  }

  /** Fire planned slots; each applies only if its schedule is still as read. Returns tasks created. */
  async fireSchedules(plans: readonly FirePlan[]): Promise<number> {
    const reply = list(
      await this.call(
        "schedule_fire",
        {},
        plans.map((p) => ({
          name: p.name,
          rev: p.rev,
          expected: p.expected,
          slots: JSON.stringify(p.slots),
          skipped: p.skipped,
          next_slot: p.nextSlot === null ? "" : p.nextSlot,
          next_due_ms: p.nextDueMs,
        })),
      ),
      "schedule_fire",
    );
    return Number(reply[0]);
  }

  /**
   * Block until a producer hands over a task or signals new work, or `timeoutS`: BLPOP on
   * our wake list and the queue's notify list, on a connection of its own. Null on timeout,
   * else the handed-over task (an empty result when only signalled: claim then).
   */
  async waitForWork(timeoutS: number): Promise<ClaimResult | null> {
    if (this.blocking === null) {
      this.blocking = quiet(
        this.client instanceof Redis ? this.client.duplicate() : this.client.duplicate(),
      );
      this.blockingCut = new Flag();
    }
    const blocking = this.blocking;
    const timeout = Math.max(0.001, timeoutS);
    let popped: { value: { handedOver: string | null } | null } | undefined;
    try {
      popped = await until(
        this.bound(
          popWork(blocking, this.keys, this.pod, timeout),
          timeout * 1000 + Math.max(this.options.replyTimeoutMs, BLOCKING_REPLY_MARGIN_MS),
        ),
        this.blockingCut,
      );
    } catch (error) {
      if (this.blocking === blocking) this.dropBlocking();
      throw error;
    }
    // dropped meanwhile (a drain, a reconnect): a record it popped is lost in transit and
    // comes back by the release at exit or its lease; claim now
    if (popped === undefined || popped.value === null) return null;
    const record = popped.value.handedOver;
    if (record === null) return { tasks: [], retryAfterMs: 0, nextDueMs: null, morePending: false };
    return this.claimed({
      retryAfterMs: 0,
      nextDueMs: null,
      morePending: false,
      records: [record],
    });
  }

  /** End a blocking wait at once (a drain began, Redis came back): its connection is dropped. */
  dropBlocking(): void {
    const blocking = this.blocking;
    this.blocking = null;
    this.blockingCut.set();
    blocking?.disconnect();
  }

  private async claimed(raw: {
    retryAfterMs: number;
    nextDueMs: number | null;
    morePending: boolean;
    records: unknown[];
  }): Promise<ClaimResult> {
    const [parsed, bad] = parseClaimRecords(raw.records, this.options.served);
    for (const [id, token, error, reason] of bad) await this.fail(id, token, error, false, reason);
    if (parsed.some((task) => task.unread === true)) await this.readGroupsAndTraces(parsed);
    // a cluster: quotas in other slots are reserved on their own slots before the run
    const tasks = this.quotaSlots.remote ? await this.quotaSlots.admit(parsed) : parsed;
    return {
      tasks,
      retryAfterMs: raw.retryAfterMs,
      nextDueMs: raw.nextDueMs,
      morePending: raw.morePending,
    };
  }

  /**
   * The group and trace context of tasks an older producer handed over in the positional
   * form, in one round trip (replaced in `tasks`). They are this worker's already: a
   * failure here leaves them ungrouped and untraced, never unrun.
   */
  private async readGroupsAndTraces(tasks: ClaimedTask[]): Promise<void> {
    const unread = tasks.flatMap((task, i) => (task.unread === true ? [[i, task] as const] : []));
    try {
      const ids = unread.map(([, task]) => task.id);
      const replies =
        (await this.bound(taskFieldsOfEach(this.client, this.keys, ids, GROUP_AND_TRACE))) ?? [];
      unread.forEach(([i, task], n) => {
        const [error, value] = replies[n] ?? [null, null];
        if (error) throw error;
        const [group, trace] = (value as (string | null)[] | null) ?? [null, null];
        tasks[i] = { ...task, group: group ?? null, trace: trace ?? null, unread: false };
      });
    } catch (error) {
      logEvent("warning", "group_and_trace_unread", { error: String(error).slice(0, 200) });
    }
  }

  /**
   * Each task's group ("" for none), in one round trip: read only for a task whose
   * group-scoped pause was written after it ended (claim records carry the others').
   */
  async groupsOf(taskIds: readonly string[]): Promise<string[]> {
    const replies =
      (await this.bound(taskFieldsOfEach(this.client, this.keys, taskIds, ["group"]))) ?? [];
    return taskIds.map((_, i) => {
      const [error, value] = replies[i] ?? [null, null];
      if (error) throw error;
      const [group] = (value as (string | null)[] | null) ?? [null];
      return group ?? "";
    });
  }

  /** Return if Redis takes writes now; throw its refusal if not (changes nothing). */
  async writable(): Promise<void> {
    try {
      await this.bound(probeWritable(this.client, this.keys));
    } catch (error) {
      if (classify(error)?.fault === "refused") return; // a server without script flags: no way to ask
      throw error;
    }
  }

  /** Close the wake-up connection (the caller owns `client`). */
  close(): void {
    this.dropBlocking();
  }
}

function codes(raw: unknown): number[] {
  return Array.from(String(raw), Number);
}
