/**
 * A worker's start (the Python worker's `worker/start.py`): check the server's eviction
 * policy, register under its name, read the queue's lease TTL. Each waits out Redis
 * outages through the gate and gives up when a drain is asked for before the worker ran.
 *
 * @module
 */

import type { Client } from "../connection.js";
import { TaskfleetError } from "../errors.js";
import { CONFIG_FIELDS } from "../protocol/defaults.js";
import type { QueueKeys } from "../keys.js";
import { readLeaseTtl } from "../protocol/workerstore.js";
import type { Broker } from "./broker.js";
import { SAFE_EVICTION_POLICY, probeServer } from "../protocol/serverprobe.js";
import { NoReply, authFailure, classify } from "./faults.js";
import { type Flag, bounded } from "./flag.js";
import type { RedisGate } from "./gate.js";
import { type Whereabouts, describeRecord, holderAlive, parseWhereabouts } from "./identity.js";
import { MIN_HEARTBEAT_S } from "./limits.js";
import { logEvent } from "./log.js";
import { isRedisDown } from "./outcomes.js";
import { type Settings, replyTimeoutMs } from "./settings.js";

/** The lease TTL the scripts use when the queue's config sets none they can read. */
export const DEFAULT_LEASE_TTL_S: number = CONFIG_FIELDS.leaseTtlS.default;

/** Why the worker's lease TTL option does nothing (the Python worker says the same). */
export const LEASE_TTL_IGNORED =
  "--lease-ttl is deprecated and ignored: the queue's config sets the lease TTL for all its workers " +
  "(taskfleet configure QUEUE --lease-ttl S, or the TaskQueue's heartbeat.ttlSeconds)";

/** Redis may delete keys when full: acknowledged tasks could vanish. Refused unless allowed. */
export class RedisEvicts extends TaskfleetError {
  constructor(readonly policy: string) {
    super(
      `Redis maxmemory-policy is '${policy}': a full Redis would delete tasks; set maxmemory-policy noeviction ` +
        "(or start with --allow-eviction / TASKFLEET_ALLOW_EVICTION=true to accept losing tasks)",
    );
  }
}

interface Gated {
  readonly gate: RedisGate;
  readonly drain: Flag;
  readonly closing: Flag;
}

/** Register, taking over from an earlier incarnation of our name unless that one is alive (`NameInUse`). */
export async function register(
  broker: Broker,
  settings: Settings,
  me: Whereabouts,
  g: Gated,
): Promise<void> {
  while (!g.drain.isSet()) {
    let taken: number;
    try {
      taken = await broker.register(settings.concurrency, (holder) => {
        const where = parseWhereabouts(holder.host);
        if (!holderAlive(where, holder.heartbeatAgeMs, me, settings.heartbeatInterval)) return null;
        return `${describeRecord(holder)}, heartbeat ${(holder.heartbeatAgeMs / 1000).toFixed(1)} s ago`;
      });
    } catch (error) {
      if (!isRedisDown(error)) throw error;
      await g.gate.waitOut(error, g.drain, g.closing);
      continue;
    }
    if (taken > 0) logEvent("info", "earlier_incarnation_requeued", { tasks: taken });
    return;
  }
}

function number(raw: string | null, fallback: number): number {
  const value = raw === null || raw.trim() === "" ? NaN : Number(raw);
  return Number.isFinite(value) && value > 0 ? value : fallback;
}

/**
 * The heartbeat interval (s) that fits the queue's lease TTL (read, never written). The
 * deprecated `leaseTtl` option changes nothing: a warning names the queue's TTL, which holds.
 */
export async function heartbeatInterval(
  client: Client,
  keys: QueueKeys,
  settings: Settings,
  g: Gated,
): Promise<number> {
  let interval = settings.heartbeatInterval;
  const ms = replyTimeoutMs(settings);
  while (!g.drain.isSet()) {
    let raw: string | null;
    try {
      raw = await bounded(readLeaseTtl(client, keys), ms, () => new NoReply(ms));
    } catch (error) {
      if (!isRedisDown(error)) throw error;
      await g.gate.waitOut(error, g.drain, g.closing);
      continue;
    }
    const ttl = number(raw, DEFAULT_LEASE_TTL_S);
    if (settings.leaseTtl !== null) {
      logEvent("warning", "lease_ttl_option_ignored", {
        lease_ttl_s: ttl,
        given_s: settings.leaseTtl,
        note: LEASE_TTL_IGNORED,
      });
    }
    if (interval * 2 > ttl) {
      interval = Math.max(ttl / 3, MIN_HEARTBEAT_S);
      logEvent("warning", "heartbeat_shortened", {
        lease_ttl_s: ttl,
        heartbeat_interval_s: Math.round(interval * 1000) / 1000,
      });
    }
    break;
  }
  return interval;
}

/** The server's maxmemory-policy (null: it can't tell); `RedisEvicts` when it may delete keys and that is not allowed. */
export async function checkEviction(
  client: Client,
  settings: Settings,
  g: Gated,
): Promise<string | null> {
  const ms = replyTimeoutMs(settings);
  const ask = <T>(p: Promise<T>): Promise<T> => bounded(p, ms, () => new NoReply(ms));
  // A command refused to this user or by a managed service: the worker runs without its
  // answer. Credentials refused are not that: the gate reports them (redis_auth_failed).
  const refused = (error: unknown): boolean => {
    if (authFailure(error) === "authentication") return false;
    const found = classify(error);
    return found !== null && found.policy !== "wait";
  };
  while (!g.drain.isSet()) {
    let policy: string | null = null;
    try {
      policy = (await probeServer(client, { ask, refused })).evictionPolicy;
    } catch (error) {
      if (!isRedisDown(error)) throw error;
      await g.gate.waitOut(error, g.drain, g.closing);
      continue;
    }
    if (policy === null || policy === "") {
      logEvent("warning", "redis_eviction_policy_unknown", {
        note:
          "neither CONFIG GET nor INFO memory answered: make sure the server's maxmemory-policy is noeviction, " +
          "or a full Redis may delete tasks",
      });
      return null;
    }
    if (policy !== SAFE_EVICTION_POLICY) {
      if (!settings.allowEviction) throw new RedisEvicts(policy);
      logEvent("warning", "redis_evicts", {
        maxmemory_policy: policy,
        note:
          "started with --allow-eviction: a full Redis deletes keys, and tasks it acknowledged can vanish " +
          "without running; set maxmemory-policy noeviction",
      });
    }
    return policy;
  }
  return null;
}
