"""The operator's C heap: freed memory goes back to the kernel (taskfleet_operator.heap).

Each case runs in a fresh interpreter: it fragments the C heap the way a burst does
(many small objects, a few kept scattered through it, the rest freed) and reads its own
RSS, which a test process that shares its heap with pytest could not do cleanly.
"""

from __future__ import annotations

import sys

import pytest

from tests.fresh_interpreter import run_json

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="glibc's malloc_trim and /proc"
)

# 200 MB of 2 KB objects (above pymalloc's 512 B: they live in the C heap), every 50th kept:
# the kept ones pin the heap's top, so glibc cannot give the freed pages back by itself.
_FRAGMENT = """
import asyncio, json, sys
from taskfleet_operator import heap
limited = heap.limit_arenas()
blocks = [bytes(2048) for _ in range(100_000)]
kept = blocks[::50]
del blocks
before = heap.rss_mb()
"""

_TRIM = (
    _FRAGMENT
    + """
trimmed = heap.trim()
print(json.dumps({"limited": limited, "before": before, "after": heap.rss_mb(),
                  "trimmed": trimmed}))
"""
)

_LOOP = """
import asyncio, json
from taskfleet_operator import heap
async def main():
    async def run(fn, *args):
        return await asyncio.to_thread(fn, *args)
    # the loop's baseline is the RSS now: the burst below grows past it
    loop = asyncio.create_task(heap.trim_loop(run, every_s=0.05, min_growth_mb=8))
    await asyncio.sleep(0)
    blocks = [bytes(2048) for _ in range(100_000)]
    kept = blocks[::50]
    del blocks
    grown = heap.rss_mb()
    for _ in range(200):
        await asyncio.sleep(0.05)
        if heap.rss_mb() < grown / 2:
            break
    loop.cancel()
    print(json.dumps({"grown": grown, "after": heap.rss_mb(), "kept": len(kept)}))
asyncio.run(main())
"""


def test_a_trim_gives_a_fragmented_heap_back() -> None:
    got = run_json(_TRIM)
    assert got["limited"], "glibc's mallopt(M_ARENA_MAX) refused"
    assert got["before"] > 150, f"the heap was not fragmented as planned: {got}"
    assert got["trimmed"]
    # what stays: the kept blocks' pages (every 25th page or so) and the interpreter
    assert got["after"] < got["before"] / 2, got


def test_the_loop_trims_once_the_rss_grew() -> None:
    got = run_json(_LOOP)
    assert got["grown"] > 80, f"the heap did not grow as planned: {got}"
    assert got["after"] < got["grown"] / 2, got
