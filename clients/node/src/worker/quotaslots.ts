/**
 * Provider quotas in other slots of a Redis Cluster: a run's reservation on the quota's
 * own slot (docs/protocol.md 4.17, "Quotas in other slots"), as the Python worker's
 * `worker/quotaslots.py`.
 *
 * On a cluster the claim hands over a task naming a quota with its estimate (the
 * record's `quotas`); this worker reserves it on each quota's slot (`pq_run` `reserve`)
 * before the run starts. A quota that cannot admit it now ends the reservations made so
 * far (refunded) and sends the task back to delayed, not an attempt (`pq_defer`). The
 * heartbeat pushes the reservations on; the run's outcome ends them. A worker that dies
 * leaves them to expire one lease after its last heartbeat. On a single server nothing
 * here runs (`remote` is false).
 *
 * @module
 */

import type { Bundle } from "../bundle.js";
import type { KeyRoute, Scripts } from "../connection.js";
import type { QueueKeys } from "../keys.js";
import { quotaRoute } from "../providerquota.js";
import { runMember } from "../protocol/index.js";
import type { ClaimedTask } from "./claimed.js";
import { logEvent } from "./log.js";

/** How long a task waits delayed when its quota's slot did not answer (ms). */
const UNREACHABLE_WAIT_MS = 1000;

interface Reserved {
  readonly member: string;
  readonly names: readonly string[];
}

/** This worker's runs holding reservations on quotas' own slots, by claim token. */
export class QuotaSlots {
  /** Runs holding reservations, by claim token. */
  readonly runs = new Map<string, Reserved>();

  constructor(
    /** Quotas may lie in other slots (a cluster): claimed tasks may carry estimates. */
    readonly remote: boolean,
    private readonly keys: QueueKeys,
    private readonly scripts: Scripts,
    private readonly bundle: Bundle,
    private readonly bound: <T>(call: Promise<T>) => Promise<T>,
    private readonly leaseMs: () => Promise<number>,
  ) {}

  private run(script: "pq_run" | "pq_defer", route: KeyRoute, argv: (string | Buffer)[]) {
    return this.bound(this.scripts.run(script, route, argv));
  }

  private pqRun(
    name: string,
    args: { op: string; lease_ms?: number; units?: string; refund?: number },
    members: readonly string[],
  ): Promise<unknown> {
    const argv = this.bundle.pack(
      "pq_run",
      { name, n: members.length, ...args },
      members.map((member) => ({ member })),
    );
    return this.run("pq_run", quotaRoute(name), argv);
  }

  /** `tasks` less those a quota could not admit now (sent back to delayed). */
  async admit(tasks: ClaimedTask[]): Promise<ClaimedTask[]> {
    if (!tasks.some((task) => task.quotas != null)) return tasks;
    const kept: ClaimedTask[] = [];
    for (const task of tasks)
      if (task.quotas == null || (await this.reserve(task))) kept.push(task);
    return kept;
  }

  private async reserve(task: ClaimedTask): Promise<boolean> {
    let want: unknown;
    try {
      want = JSON.parse(task.quotas ?? "");
    } catch {
      return true; // unreadable: reserves nothing, as a claim on one server
    }
    if (typeof want !== "object" || want === null || Array.isArray(want)) return true;
    const member = runMember(this.keys, task.id, task.token);
    const lease = await this.leaseMs();
    const done: string[] = [];
    for (const name of Object.keys(want).sort()) {
      const units = (want as Record<string, unknown>)[name];
      if (typeof units !== "object" || units === null) continue;
      let wait: number;
      let unknown = false;
      try {
        const op = { op: "reserve", lease_ms: lease, units: JSON.stringify(units) };
        wait = Number(await this.pqRun(name, op, [member]));
      } catch (error) {
        unreachable(name, error);
        // the reserve may have been applied with its reply lost: ended below too
        wait = UNREACHABLE_WAIT_MS;
        unknown = true;
      }
      if (wait > 0) {
        for (const earlier of unknown ? [...done, name] : done) {
          try {
            await this.pqRun(earlier, { op: "end", refund: 1 }, [member]);
          } catch (error) {
            unreachable(earlier, error); // left to expire one lease from now
          }
        }
        const argv = this.bundle.pack("pq_defer", {
          task_id: task.id,
          token: task.token,
          wait_ms: wait,
          name,
        });
        try {
          await this.run("pq_defer", this.keys, argv);
        } catch (error) {
          // the queue's own Redis failed: the task is not run unreserved; it comes back
          // when its lease runs out, and the rest of the claim runs
          logEvent("warning", "quota_defer_failed", {
            task: task.id,
            error: String(error).slice(0, 200),
          });
        }
        return false;
      }
      if (wait === 0) done.push(name);
    }
    if (done.length > 0) this.runs.set(task.token, { member, names: done });
    return true;
  }

  /** A run's settlement on the quota's slot: 1 settled, 0 no such reservation, -2 no quota. */
  async settle(taskId: string, token: string, name: string, used: string): Promise<number> {
    const member = runMember(this.keys, taskId, token);
    return Number(await this.pqRun(name, { op: "settle", units: used }, [member]));
  }

  /**
   * Push on the expiry of the reservations of runs still held (a heartbeat). Never
   * throws: a quota's slot out of reach only lets its reservations expire.
   */
  async extend(tokens: Iterable<string>): Promise<void> {
    const byName = this.byName(tokens, false);
    if (byName.size === 0) return;
    const lease = await this.leaseMs();
    for (const [name, members] of byName) {
      try {
        await this.pqRun(name, { op: "extend", lease_ms: lease }, members);
      } catch (error) {
        // never in the way of the heartbeat's own work (lost and cancelled runs)
        unreachable(name, error);
      }
    }
  }

  /** The runs under `tokens` ended (`refund`: given back): their reservations end. */
  async end(tokens: Iterable<string>, refund = false): Promise<void> {
    for (const [name, members] of this.byName(tokens, true)) {
      try {
        await this.pqRun(name, { op: "end", refund: refund ? 1 : 0 }, members);
      } catch (error) {
        unreachable(name, error); // left to expire one lease from now
      }
    }
  }

  private byName(tokens: Iterable<string>, drop: boolean): Map<string, string[]> {
    const out = new Map<string, string[]>();
    if (this.runs.size === 0) return out;
    for (const token of tokens) {
      const run = this.runs.get(token);
      if (run === undefined) continue;
      if (drop) this.runs.delete(token);
      for (const name of run.names) {
        const members = out.get(name) ?? [];
        members.push(run.member);
        out.set(name, members);
      }
    }
    return out;
  }
}

function unreachable(quota: string, error: unknown): void {
  logEvent("warning", "quota_slot_unreachable", { quota, error: String(error).slice(0, 200) });
}
