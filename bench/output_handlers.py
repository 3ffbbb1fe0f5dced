"""The handlers of ``bench.output_latency`` and ``bench.follow_latency``. ``emitter``
emits ``chunks`` chunks, one every ``every_ms``, each carrying the wall-clock time it was
emitted at."""

from __future__ import annotations

import time
from typing import Any

from taskfleet import current_task


def emitter(payload: dict[str, Any]) -> int:
    task = current_task()
    n, every = int(payload["chunks"]), float(payload["every_ms"]) / 1000
    for i in range(n):
        task.emit({"i": i, "t": time.time()})
        time.sleep(every)
    return n


def stepper(payload: dict[str, Any]) -> int:
    """``bench.follow_latency``'s handler: reports step i of ``steps``, one every
    ``every_ms`` (the worker writes the latest report at most every 0.5 s)."""
    task = current_task()
    n, every = int(payload["steps"]), float(payload["every_ms"]) / 1000
    for i in range(1, n + 1):
        task.progress(done=i, total=n)
        time.sleep(every)
    return n
