"""The operator's garbage collector settings: long-lived objects frozen, refrozen in a
loop (taskfleet_operator.collector).

Each case runs in a fresh interpreter: freezing is process-wide, and a test process that
shares its collector with pytest would change what every later test sees.
"""

from __future__ import annotations

from tests.fresh_interpreter import run_json

_LOOP = """
import asyncio, gc, json, weakref
from taskfleet_operator import collector

class Node:
    pass

def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a

async def main():
    kept = cycle()
    ref = weakref.ref(kept)
    loop = asyncio.create_task(collector.refreeze_loop(every_s=0.05))
    for _ in range(500):  # the first pass runs at once
        await asyncio.sleep(0.01)
        if gc.get_freeze_count():
            break
    frozen = gc.get_freeze_count()
    del kept  # garbage now, in a cycle, and frozen: a collection does not walk it
    gc.collect()
    alive_after_a_collection = ref() is not None
    for _ in range(500):  # the loop's next pass unfreezes and collects it
        await asyncio.sleep(0.01)
        if ref() is None:
            break
    freed = ref() is None
    loop.cancel()
    print(json.dumps({"frozen": frozen, "alive_after_a_collection": alive_after_a_collection,
                      "freed": freed, "still_frozen": gc.get_freeze_count()}))

asyncio.run(main())
"""


def test_the_loop_freezes_what_lives_and_frees_frozen_cycles_at_its_next_pass() -> None:
    result = run_json(_LOOP)
    # Frozen: out of every collection's walk (a plain collection leaves the frozen cycle).
    assert result["frozen"] > 1000, result
    assert result["alive_after_a_collection"], result
    # The next pass unfroze, collected and froze again: the cycle is gone, the rest frozen.
    assert result["freed"], result
    assert result["still_frozen"] > 1000, result
