/**
 * The Redis outage gate, as the Python worker's (`worker/gate.py`): the first failing
 * call starts one probe; every loop waits on it.
 *
 * A loop whose call fails hands the error to `waitOut`, which classifies it:
 * - a fault to wait out logs the outage once, starts the one probe (capped, jittered
 *   exponential backoff) and returns when Redis answers again (and takes writes again
 *   after a refused write), or when one of the flags the caller gives up on is set;
 * - credentials or rights refused throw `FatalStop` (exit 2);
 * - anything else is thrown again: the loop dies and the worker fails loudly (exit 1).
 *
 * @module
 */

import { type RedisFault, WHAT_TO_DO, authFailure, classify } from "./faults.js";
import { Flag, sleep, waitAny } from "./flag.js";
import { formatError } from "./failures.js";
import { logEvent } from "./log.js";

/** Exit code of a worker stopped by bad configuration found while running. */
export const EXIT_BAD_CONFIG = 2;

/** Stop now with `code`: Redis refused our credentials, or our name was taken over. */
export class FatalStop extends Error {
  readonly code: number;

  constructor(code: number) {
    super(`stop with exit code ${code}`);
    this.name = "FatalStop";
    this.code = code;
  }
}

/** The outage probe met an error that is no outage: the worker must stop (exit 1). */
export class ProbeFailed extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ProbeFailed";
  }
}

export interface GateOptions {
  /** One call that must succeed (throws while Redis is away). */
  readonly reconnect: () => Promise<void>;
  /** Runs once the probe succeeds (heartbeat at once). */
  readonly reachable: () => void;
  /** After a refused write: does Redis take writes again? */
  readonly writable?: () => Promise<void>;
  readonly backoffBaseMs: number;
  readonly backoffMaxMs: number;
}

/** Open while Redis answers; closed from a failed call until the probe gets a reply. */
export class RedisGate {
  readonly open = new Flag();
  fatal: FatalStop | null = null;
  failed: ProbeFailed | null = null;
  fault: RedisFault | null = null;
  refusedWrites = 0;
  reconnects = 0;
  private outageMs = 0;
  private downSince: number | null = null;
  private reopenedAt = -Infinity;
  private lastDelay: number;
  private probe: Promise<void> | null = null;
  private readonly closed = new Flag();

  constructor(private readonly options: GateOptions) {
    this.open.set();
    this.lastDelay = options.backoffBaseMs;
  }

  /** Seconds Redis was unreachable, the outage going on included. */
  outageSeconds(now: number = performance.now()): number {
    return (this.outageMs + (this.downSince !== null ? now - this.downSince : 0)) / 1000;
  }

  /** Whether the outage going on is Redis refusing writes. */
  get refusingWrites(): boolean {
    return this.fault !== null && this.fault.writesRefused && !this.open.isSet();
  }

  /** Wait until Redis answers again, or one of `giveUp` is set; see the module's doc. */
  async waitOut(error: unknown, ...giveUp: Flag[]): Promise<void> {
    const found = classify(error);
    if (found === null || found.policy === "fail task") throw error;
    if (found.policy === "stop") this.checkAuth(error);
    if (found.writesRefused) this.refusedWrites += 1;
    if (this.open.isSet()) {
      this.open.clear();
      this.fault = found;
      logOutage(found, error);
      this.probe = this.probeUntilUp();
    } else if (found.writesRefused && this.fault !== null && !this.fault.writesRefused) {
      this.fault = found;
    }
    await waitAny([this.open, ...giveUp]);
    if (this.fatal !== null) throw this.fatal;
    if (this.failed !== null) throw this.failed;
  }

  private checkAuth(error: unknown): never {
    if (this.fatal === null) {
      const kind = authFailure(error);
      this.fatal = new FatalStop(EXIT_BAD_CONFIG);
      logEvent("error", "redis_auth_failed", {
        kind,
        error: formatError(error),
        note:
          "check the user and password of TASKFLEET_REDIS_URL (--redis-url) and the user's ACL; " +
          "tasks held come back when their leases expire",
      });
    }
    throw this.fatal;
  }

  private async probeUntilUp(): Promise<void> {
    const started = performance.now();
    this.downSince = started;
    let delay = this.options.backoffBaseMs;
    if (started - this.reopenedAt < 2 * this.options.backoffMaxMs) {
      delay = Math.min(this.lastDelay * 2, this.options.backoffMaxMs); // a relapse
    }
    let attempts = 0;
    for (;;) {
      await sleep(delay / 2 + Math.random() * (delay / 2), this.closed);
      if (this.closed.isSet()) return;
      attempts += 1;
      try {
        await this.options.reconnect();
        if (this.fault?.writesRefused === true && this.options.writable !== undefined)
          await this.options.writable();
      } catch (error) {
        const found = classify(error);
        if (found?.policy === "wait") {
          if (found.writesRefused) this.refusedWrites += 1;
          delay = Math.min(delay * 2, this.options.backoffMaxMs);
          continue;
        }
        if (found?.policy === "stop") {
          try {
            this.checkAuth(error);
          } catch {
            // recorded in this.fatal: every waiter throws it
          }
        } else {
          logEvent("error", "redis_probe_failed", { error: formatError(error) });
          this.failed = new ProbeFailed(`the Redis probe failed: ${formatError(error)}`);
        }
        this.open.set();
        return;
      }
      const outage = performance.now() - started;
      this.outageMs += outage;
      this.downSince = null;
      this.reopenedAt = performance.now();
      this.lastDelay = delay;
      this.reconnects += 1;
      const fields: Record<string, unknown> = { outage_s: Math.round(outage / 10) / 100, attempts };
      if (this.fault !== null) fields.fault = this.fault.fault;
      logEvent("info", "redis_reachable", fields);
      this.fault = null;
      this.open.set();
      this.options.reachable();
      return;
    }
  }

  /** Stop a probe still running (the worker is exiting). */
  async close(): Promise<void> {
    this.closed.set();
    const probe = this.probe;
    this.probe = null;
    if (probe !== null) await probe;
  }
}

function logOutage(found: RedisFault, error: unknown): void {
  if (found.writesRefused) {
    logEvent("warning", "redis_refusing_writes", {
      fault: found.fault,
      error: formatError(error),
      note: `${WHAT_TO_DO[found.fault] ?? ""}; tasks held are kept and claiming resumes when Redis takes writes again`,
    });
  } else {
    logEvent("warning", "redis_unreachable", { fault: found.fault, error: formatError(error) });
  }
}
