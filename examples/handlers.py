"""How to write a taskfleet handler.

Run one with ``taskfleet worker --queue q --handler examples.handlers:thumbnail``.

A handler takes the payload dict and returns JSON data; raising fails the attempt (it is
retried with backoff up to max_attempts). Delivery is at-least-once: a task whose worker
died mid-run runs again elsewhere, so make the effect idempotent, e.g. keyed by task id.
The handlers the demo and the end-to-end tests use ship in the image as
``taskfleet.samples`` (``sleep_and_record``, ``async_sleep_and_record``, ``echo``, ``fail``).
"""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

from taskfleet import current_task

OUT = Path("/tmp/taskfleet-example-out")


def thumbnail(payload: dict[str, Any]) -> dict[str, Any]:
    """A sync handler (runs in a thread): CPU work is fine, the heartbeat keeps beating."""
    source = str(payload["source"])
    digest = hashlib.sha256(source.encode()).hexdigest()
    # Idempotent: the output is named by the input, so a second run overwrites, not adds.
    OUT.mkdir(parents=True, exist_ok=True)
    target = OUT / f"{digest[:16]}.txt"
    target.write_text(f"thumbnail of {source}\n")
    return {"path": str(target), "attempt": current_task().attempt}


async def notify(payload: dict[str, Any]) -> str:
    """An async handler (runs on the worker's loop): many can wait on I/O at once."""
    await asyncio.sleep(float(payload.get("latency", 0.05)))  # stands in for an HTTP call
    # A real call would pass current_task().task_id as its idempotency key.
    return f"notified {payload.get('to', 'nobody')}"
