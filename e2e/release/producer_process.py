"""A producer on whatever ``taskfleet`` the interpreter running it imports.

The release stage runs it with a previous release's library (its wheel in a throwaway
venv), so tasks enqueued by that version meet workers and an operator of another. It
imports nothing of this repository but the library under test.

One JSON request a line on stdin, ``{"url", "queue", "task_id", "payload", "group"}`` (a
``group`` of null or none: a plain task; a library before groups takes none); one JSON reply
a line on stdout: ``{"id", "version"}``, or ``{"error", "connection"}`` when the enqueue
failed (``connection``: Redis could not be reached, so the caller may retry: an enqueue
with the same ``task_id`` is idempotent).
"""

from __future__ import annotations

import json
import sys

import redis
import taskfleet


def main() -> int:
    for line in sys.stdin:
        request = json.loads(line)
        reply: dict[str, object]
        try:
            with taskfleet.Queue(request["queue"], request["url"]) as queue:
                grouped = {"group": request["group"]} if request.get("group") else {}
                task_id = queue.enqueue(request["payload"], task_id=request["task_id"], **grouped)
            reply = {"id": task_id, "version": taskfleet.__version__}
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            reply = {"error": repr(exc), "connection": True}
        except Exception as exc:
            reply = {"error": repr(exc), "connection": False}
        print(json.dumps(reply), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
