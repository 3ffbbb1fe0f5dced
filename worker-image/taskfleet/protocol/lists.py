"""The queue's lists that wake someone up, popped as ``Call`` values (``calls``).

- ``demand``: at most one element, pushed by the scripts when tasks became pending that
  no idle worker took; whoever sizes the fleet pops it (the operator: a blocking pop per
  autoscaled queue, a plain pop for idle ones).
- ``wake:<pod>`` and ``notify``: an idle worker blocks on both; a producer that claimed a
  task for it pushes the claim record onto its ``wake`` list, and ``notify`` says only
  "look again".
- ``waiter:<id>``: a producer's wait; ``watch.lua`` pushes the id of each watched task
  as it finishes.

A blocking pop's client must allow it longer than its ``block_s`` (no shorter socket
timeout): the caller's concern. No pydantic here: a worker waits from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from taskfleet.protocol.calls import Call, call, one
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.records import text

__all__ = ["QueueLists", "Wakeup", "any_demand"]


@dataclass(frozen=True, slots=True)
class Wakeup:
    """What woke an idle worker: a claim record a producer handed it, or (None) a notify
    token: look again."""

    record: bytes | str | None


def _pair(reply: Any) -> tuple[Any, Any] | None:
    """A blocking pop's reply: (list, element), or None when it timed out."""
    if not reply:
        return None
    key, value = reply
    return key, value


def any_demand(keys: Sequence[QueueKeys]) -> Call[bool]:
    """Whether any of these queues has demand, in one command (nothing popped): the
    operator's demand poll reads this first and pops only when it is True, so a thousand
    idle queues on one server cost one EXISTS a poll. The keys must share a node and, on
    a Redis Cluster, a slot (EXISTS of several keys refuses others there)."""
    return one(("EXISTS", *(k.demand for k in keys)), bool)


class QueueLists:
    """Pops of one queue's lists (its keys); each method returns a ``Call``."""

    def __init__(self, keys: QueueKeys) -> None:
        self._k = keys

    def pop_demand(self) -> Call[bool]:
        """Whether the queue had demand (the element is popped)."""
        return one(("LPOP", self._k.demand), lambda reply: reply is not None)

    def wait_demand(self, block_s: float) -> Call[bool]:
        """``pop_demand``, blocking up to ``block_s`` for it; False when none came."""
        return one(("BLPOP", self._k.demand, block_s), lambda reply: _pair(reply) is not None)

    def wait_for_work(self, pod: str, block_s: float) -> Call[Wakeup | None]:
        """An idle worker's wait on its ``wake`` list and ``notify``, up to ``block_s``;
        None when nothing came."""
        wake = self._k.wake(pod)

        def decode(reply: Any) -> Wakeup | None:
            popped = _pair(reply)
            if popped is None:
                return None
            key, record = popped
            return Wakeup(record if text(key) == wake else None)

        return one(("BLPOP", wake, self._k.notify, block_s), decode)

    def wait_finished(self, waiter: str, block_s: float, most: int) -> Call[list[str] | None]:
        """Ids of watched tasks that finished, from the waiter's list: the first blocking
        up to ``block_s``, then up to ``most`` more at once. None when none came."""
        key = self._k.waiter(waiter)

        def decode(replies: Sequence[Any]) -> list[str] | None:
            first, rest = replies
            popped = _pair(first)
            if popped is None:
                return None
            return [text(popped[1]), *(text(x) for x in rest or ())]

        return call([("BLPOP", key, block_s), ("LPOP", key, most)], decode)
