"""The handler of ``bench.output_latency``: emits ``chunks`` chunks, one every
``every_ms``, each carrying the wall-clock time it was emitted at."""

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
