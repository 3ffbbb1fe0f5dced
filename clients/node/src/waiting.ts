/**
 * Waiting for tasks to finish without polling (`Queue.wait`), as the Python client does
 * (`producer/waiting.py`): the same waiter lists, so a Node producer waits on tasks any
 * worker finishes.
 *
 * A wait picks a waiter id and runs the watch script on its tasks: each is finished
 * already, or now lists the waiter in its hash, or does not exist (yet). The scripts that
 * finish a task push its id onto the waiter's list, and the wait blocks on that list
 * (BLPOP) on a connection of its own. Registering and looking are one atomic step, so no
 * finish is missed between them. Blocking is bounded by `RECHECK_S`: then the wait looks
 * again, which picks up a task enqueued after the wait began, a waiter evicted by newer
 * ones, or a notification lost in a failover.
 *
 * @module
 */

import { randomBytes } from "node:crypto";

import { Redis } from "ioredis";

import type { Bundle } from "./bundle.js";
import { type Client, type Scripts, quiet } from "./connection.js";
import { InvalidArgument, ProtocolError, WaitTimeout } from "./errors.js";
import type { QueueKeys } from "./keys.js";
import { popFinished, readTasks } from "./protocol/reads.js";
import { type Task, taskFromHash } from "./tasks.js";

/** The longest a wait blocks before it looks at its tasks again (seconds). */
export const RECHECK_S = 1.0;
/** How late a server may answer a blocking pop that timed out (its default hz 10). */
export const SERVER_TICK_S = 0.15;
/** Ids taken off the waiter's list per round trip after the blocking pop. */
export const POP_MAX = 1000;

/** Connections a wait blocks on, kept for the next wait and closed with the queue. */
export class Blockers {
  private readonly free: Client[] = [];
  private readonly all = new Set<Client>();
  private closed = false;

  constructor(private readonly client: Client) {}

  take(): Client {
    if (this.closed) throw new InvalidArgument("the queue is closed");
    const found = this.free.pop();
    if (found !== undefined) return found;
    const made = quiet(
      this.client instanceof Redis ? this.client.duplicate() : this.client.duplicate(),
    );
    this.all.add(made);
    return made;
  }

  give(client: Client, healthy: boolean): void {
    if (healthy && !this.closed) {
      this.free.push(client);
    } else {
      this.all.delete(client);
      client.disconnect();
    }
  }

  close(): void {
    this.closed = true;
    for (const client of this.all) client.disconnect();
    this.all.clear();
    this.free.length = 0;
  }
}

function ids(taskIds: Iterable<string>): string[] {
  const wrong = new InvalidArgument("wait needs a list of task ids (strings), not one string");
  if (typeof taskIds === "string") throw wrong;
  let list: unknown[];
  try {
    list = Array.from(taskIds as Iterable<unknown>);
  } catch {
    throw wrong;
  }
  if (!list.every((i): i is string => typeof i === "string" && i.isWellFormed())) throw wrong;
  return [...new Set(list)];
}

function limit(timeout: unknown): number {
  if (typeof timeout !== "number" || Number.isNaN(timeout)) {
    throw new InvalidArgument(`wait timeout must be a number of seconds, not ${String(timeout)}`);
  }
  return timeout;
}

/** One wait, run: returns the finished tasks by id, or throws `WaitTimeout` with the others. */
export async function wait(
  client: Client,
  blockers: Blockers,
  scripts: Scripts,
  bundle: Bundle,
  keys: QueueKeys,
  taskIds: Iterable<string>,
  timeout: number,
  commandTimeoutMs: number | undefined,
): Promise<Record<string, Task>> {
  let remaining = ids(taskIds);
  const seconds = limit(timeout);
  const deadline = performance.now() + seconds * 1000;
  const finished: Record<string, Task> = {};
  const waiter = randomBytes(8).toString("hex");
  let watching = false;

  const read = async (found: string[]): Promise<void> => {
    if (found.length === 0) return;
    const hashes = await readTasks({ client, keys }, found);
    found.forEach((id, i) => {
      const hash = hashes[i] ?? {};
      const task = Object.keys(hash).length > 0 ? taskFromHash(hash, id) : null;
      if (task?.finished === true) finished[id] = task;
      else watching = false; // pruned, or run again since: watched again at the next look
    });
    remaining = remaining.filter((id) => !(id in finished));
  };

  const blockSeconds = (): number => {
    const left = (deadline - performance.now()) / 1000;
    if (left <= 0) throw new WaitTimeout([...remaining], seconds);
    let block = Math.min(left, RECHECK_S);
    if (commandTimeoutMs !== undefined && commandTimeoutMs > 0) {
      // the pop must answer before the client gives up on the command, and the server
      // may answer a timed-out pop up to a tick late
      const socket = commandTimeoutMs / 1000;
      block = Math.min(block, Math.max(socket - SERVER_TICK_S, socket / 4));
    }
    return Math.max(block, 0.001); // 0 would block forever
  };

  while (remaining.length > 0) {
    if (!watching) {
      const argv = bundle.pack(
        "watch",
        { waiter },
        remaining.map((task_id) => ({ task_id })),
      );
      const flags = String(await scripts.run("watch", keys, argv));
      if (flags.length !== remaining.length || /[^FWA]/.test(flags)) {
        throw new ProtocolError(`watch: unexpected reply ${JSON.stringify(flags)}`);
      }
      watching = true;
      await read(remaining.filter((_, i) => flags[i] === "F"));
      continue;
    }
    const block = blockSeconds();
    const blocker = blockers.take();
    let healthy = false;
    let replies: [Error | null, unknown][] | null;
    try {
      replies = await popFinished(blocker, keys, waiter, block, POP_MAX);
      healthy = true;
    } finally {
      blockers.give(blocker, healthy);
    }
    const [[popError, first] = [null, null], [restError, rest] = [null, null]] = replies ?? [];
    if (popError !== null) throw popError;
    if (restError !== null) throw restError;
    if (first === null) {
      watching = false; // a look now and then (see RECHECK_S)
      continue;
    }
    const popped = new Set<string>([
      String((first as string[])[1]),
      ...((rest as string[] | null) ?? []).map(String),
    ]);
    await read(remaining.filter((id) => popped.has(id)));
  }
  return finished;
}
