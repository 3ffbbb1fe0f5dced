/**
 * The reads of a flow walk (cancel and retry of a flow or a branch): each task's state
 * and `after`, and the `by:<id>` fields naming the tasks that wait for it, bounded per
 * step.
 *
 * @module
 */

import { ProtocolError } from "../errors.js";
import { type Store, layoutOf, replies } from "./store.js";

/** The field of a task's hash naming one task that waits for it (`by:<id>` = 1). */
const WAITED_BY_PREFIX = "by:";
/** Fields per HSCAN step. */
export const BY_COUNT = 1000;

/** One HSCAN step's reply: the next cursor and the ids of the `by:` fields it gave. */
function scanStep(reply: unknown): [string, string[]] {
  if (!Array.isArray(reply) || reply.length !== 2 || !Array.isArray(reply[1])) {
    throw new ProtocolError(`HSCAN: unexpected reply ${JSON.stringify(reply)}`);
  }
  const fields = reply[1] as unknown[];
  const ids: string[] = [];
  for (let i = 0; i < fields.length; i += 2)
    ids.push(String(fields[i]).slice(WAITED_BY_PREFIX.length));
  return [String(reply[0]), ids];
}

function byScan(
  s: Store,
  taskId: string,
  cursor: string,
): [string, string, "MATCH", string, "COUNT", number] {
  return [
    layoutOf(s.keys).task(taskId),
    cursor,
    "MATCH",
    `${WAITED_BY_PREFIX}*`,
    "COUNT",
    BY_COUNT,
  ];
}

/** One task's links as first read: its state (null: no such task), its `after` (stored text), and a first step of who waits for it. */
export interface LinkHead {
  readonly state: string | null;
  readonly after: string | null;
  readonly by: string[];
  /** The HSCAN cursor to go on from ("0": all of `by` read). */
  readonly cursor: string;
}

/** Each task's `LinkHead`, in the order asked, in one round trip. */
export async function readLinkHeads(s: Store, taskIds: readonly string[]): Promise<LinkHead[]> {
  const pipe = s.client.pipeline();
  for (const id of taskIds) {
    pipe.hmget(layoutOf(s.keys).task(id), "state", "after");
    pipe.hscan(...byScan(s, id, "0"));
  }
  const values = replies(await pipe.exec());
  if (values.length !== 2 * taskIds.length)
    throw new ProtocolError("the walk's read got fewer replies than it sent commands");
  return taskIds.map((_, n) => {
    const [state = null, after = null] = values[2 * n] as (string | null)[];
    const [cursor, by] = scanStep(values[2 * n + 1]);
    return { state, after, by, cursor };
  });
}

/** The next step of who waits for `taskId` from `cursor`: the next cursor and the ids found. */
export async function scanWaitedBy(
  s: Store,
  taskId: string,
  cursor: string,
): Promise<[string, string[]]> {
  return scanStep(await s.client.hscan(...byScan(s, taskId, cursor)));
}
