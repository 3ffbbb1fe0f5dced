"""Python's garbage collector on a large heap: what the operator holds for long, frozen.

With thousands of TaskQueues the operator holds millions of objects for as long as each
TaskQueue exists (kopf's state of every object, its indexes, parsed specs, `Queue`s), and
every full collection walks them all: 0.9 s with 10,000 TaskQueues. The collector ran one
about every 15 s at rest there, and each freed next to nothing: objects that live a few
milliseconds in the sweep threads (replies, status dicts) outlive two young collections,
and their count is what triggers the next full one. About 6 % of a core went to it.

`gc.freeze()` takes every object alive at that moment out of the collector's walks; what
is made later is collected as before. A frozen object that later becomes garbage in a
reference cycle (kopf's state of a deleted TaskQueue) would stay until unfrozen, so
`refreeze_loop` unfreezes, collects everything and freezes again every
``TASKFLEET_GC_REFREEZE_INTERVAL`` (300 s): such garbage is freed within one interval,
for the price of one full collection per interval instead of one every few seconds.
Measured: bench/journal/2026-11-29-operator-10000.md.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time

__all__ = ["REFREEZE_INTERVAL_S", "refreeze", "refreeze_loop"]

_log = logging.getLogger(__name__)

#: How often the frozen objects are collected again (the settings' default).
REFREEZE_INTERVAL_S = 300.0


def refreeze() -> int:
    """Unfreeze, collect every generation, and freeze what is left; how many objects are
    frozen now."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


async def refreeze_loop(every_s: float = REFREEZE_INTERVAL_S) -> None:
    """Forever: `refreeze` now, then every ``every_s``. Runs on the event loop (a
    collection holds the GIL: no other thread runs meanwhile anyway). Runs for the
    operator's life."""
    while True:
        started = time.perf_counter()
        try:
            frozen = refreeze()
        except Exception:  # never let one failed pass end the loop
            _log.exception("garbage collector refreeze failed")
        else:
            spent_ms = (time.perf_counter() - started) * 1000
            _log.debug("collected and froze %d objects in %.0f ms", frozen, spent_ms)
        await asyncio.sleep(every_s)
