"""An events consumer as a process of its own, for tests that kill it:

    python -m tests.workers.events_consumer REDIS_URL QUEUE SINCE OUT

appends ``<stream id> <event> <task id>`` for each event of QUEUE after SINCE to OUT,
one line each, written at once (a SIGKILL loses at most the line being written)."""

from __future__ import annotations

import sys

from taskfleet.producer.queue import Queue


def main(redis_url: str, queue: str, since: str, out: str) -> None:
    with Queue(queue, redis_url=redis_url) as q, open(out, "a", buffering=1) as f:
        for event in q.events(since=since):
            f.write(f"{event.id} {event.event} {event.task_id}\n")


if __name__ == "__main__":
    main(*sys.argv[1:5])
