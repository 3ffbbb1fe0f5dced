/**
 * The queue's event stream (docs/protocol.md, 4.17): `Queue.events` yields each task's
 * lifecycle events in order from a stream id, blocking until new ones arrive.
 *
 * @module
 */

import { InvalidArgument } from "./errors.js";
import type { Blockers } from "./waiting.js";
import type { QueueKeys } from "./keys.js";
import type { Store } from "./protocol/index.js";
import { lastEventId, readEvents } from "./protocol/reads.js";

/** One event of a queue; `id` is its stream id: resume after it with `since`. */
export interface QueueEvent {
  readonly id: string;
  /** enqueued, started, progress, done, failed, retried, dead, cancelled, lost, requeued. */
  readonly event: string;
  readonly taskId: string;
  /** For started and failed: the attempt's number. */
  readonly attempt: number | null;
  readonly at: Date;
}

/** How long one blocking read waits before it is sent again (no poll: it returns on arrival). */
export const BLOCK_MS = 5000;
const STREAM_ID = /^\d{1,20}(-\d{1,20})?$/;

/** The events after `since` ("0": all retained; undefined: from now on), for ever. */
export async function* events(
  store: Store,
  keys: QueueKeys,
  blockers: Blockers,
  since: string | undefined,
  batch = 500,
): AsyncGenerator<QueueEvent, void, undefined> {
  const given: unknown = since;
  if (given !== undefined && (typeof given !== "string" || !STREAM_ID.test(given))) {
    throw new InvalidArgument(
      `since must be a stream id such as '1700000000000-0', not ${JSON.stringify(given)}`,
    );
  }
  let last = since ?? (await lastEventId(store));
  const blocker = blockers.take();
  try {
    for (;;) {
      const found = await readEvents(blocker, keys, last, BLOCK_MS, batch);
      for (const e of found) {
        last = e.streamId;
        const attempt = e.fields.attempt;
        yield {
          id: e.streamId,
          event: e.fields.event ?? "",
          taskId: e.fields.id ?? "",
          attempt: attempt === undefined ? null : Number(attempt),
          at: new Date(Number(e.streamId.split("-")[0])),
        };
      }
    }
  } finally {
    // a consumer that stops mid-read may leave its read out: the connection is closed
    blockers.give(blocker, false);
  }
}
