"""Waiting for tasks to finish without polling: ``Queue.wait`` and ``AsyncQueue.wait``.

A wait picks a waiter id and runs the watch script on its tasks: each is finished
already, or now lists the waiter in its hash, or does not exist (yet). The scripts that
finish a task (complete, fail, and every way to dead) push its id onto the waiter's list
(``wake_waiters`` in lua/includes/), and the wait blocks on that list (BLPOP) until the
timeout. Registering and looking at the state are one atomic step, so no finish is missed
between them. A task nobody waits on costs its completion nothing.

Blocking is bounded by ``RECHECK_S``: then the wait looks again (the watch script once
more). That picks up a task enqueued after the wait began, a task whose retention pruned it,
a waiter evicted by newer ones (a task keeps 32), and a notification lost in a failover.

``Waiting`` holds a wait's state and decides; ``wait`` is its plan, which ``Queue`` and
``AsyncQueue`` run (``runner``).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Sequence

from taskfleet.producer.reading import encodable
from taskfleet.producer.runner import Plan, QueueBase
from taskfleet.protocol.calls import Call
from taskfleet.protocol.errors import InvalidArgument, WaitTimeout
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.lists import QueueLists
from taskfleet.protocol.queue_ops import Ops
from taskfleet.protocol.reads import QueueReads
from taskfleet.protocol.scripts import Op
from taskfleet.protocol.tasks import Task

#: The longest a wait blocks before it looks at its tasks again.
RECHECK_S = 1.0
#: How late a server may answer a blocking pop that timed out (its default hz 10).
SERVER_TICK_S = 0.15
#: Ids taken off the waiter's list per round trip after the blocking pop.
POP_MAX = 1000


def _limit(timeout: object) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise InvalidArgument(f"wait timeout must be a number of seconds, not {timeout!r}")
    try:
        limit = float(timeout)
    except OverflowError:  # an int too large for a float: as good as forever
        limit = math.inf if timeout > 0 else -math.inf
    if math.isnan(limit):
        raise InvalidArgument("wait timeout must be a number of seconds, not nan")
    return limit


def _ids(task_ids: Iterable[str]) -> list[str]:
    wrong = InvalidArgument("wait needs a list of task ids (strings), not one string")
    if isinstance(task_ids, str):
        raise wrong
    try:
        ids = list(task_ids)
    except TypeError:
        raise wrong from None
    if not all(isinstance(i, str) and encodable(i) for i in ids):
        raise wrong
    return list(dict.fromkeys(ids))


class Waiting:
    """One wait: which tasks are still out, what has finished, and how long to block."""

    def __init__(self, keys: QueueKeys, task_ids: Iterable[str], timeout: float) -> None:
        self.remaining = _ids(task_ids)
        self.limit = _limit(timeout)
        self.deadline = time.monotonic() + self.limit
        self.finished: dict[str, Task] = {}
        self.waiter = os.urandom(8).hex()
        self.ops = Ops(keys)
        self.reads = QueueReads(keys)
        self.lists = QueueLists(keys)
        self.watching = False  # every remaining task is registered (or absent)

    def watch(self) -> Op[str]:
        return self.ops.watch(self.waiter, self.remaining)

    def watched(self, flags: str) -> list[str]:
        """The ids to read after a watch: those finished already."""
        self.watching = True
        return [i for i, flag in zip(self.remaining, flags, strict=True) if flag == "F"]

    def popped(self, found: list[str] | None) -> list[str] | None:
        """The ids a blocking pop brought (None: none before it timed out)."""
        if found is None:
            return None
        ids = set(found)
        return [i for i in self.remaining if i in ids]

    def read(self, ids: Sequence[str]) -> Call[list[Task | None]]:
        return self.reads.tasks(ids)

    def take(self, ids: Sequence[str], tasks: Sequence[Task | None]) -> None:
        """Keep the finished ones; one that is not (pruned, or run again since) is watched
        again at the next look."""
        for task_id, task in zip(ids, tasks, strict=True):
            if task is not None and task.finished:
                self.finished[task_id] = task
            else:
                self.watching = False
        self.remaining = [i for i in self.remaining if i not in self.finished]

    def block_s(self, socket_timeout: float | None) -> float:
        """How long the next blocking pop may wait; raises ``WaitTimeout`` when time is up."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeout(list(self.remaining), self.limit)
        block = min(left, RECHECK_S)
        if socket_timeout:  # the pop must answer before the client gives up on the socket,
            # and the server may answer a timed-out pop up to a tick (100 ms) late
            block = min(block, max(socket_timeout - SERVER_TICK_S, socket_timeout / 4))
        return max(block, 0.001)  # 0 would block forever

    def pop(self, block: float) -> Call[list[str] | None]:
        return self.lists.wait_finished(self.waiter, block, POP_MAX)


def wait(q: QueueBase, task_ids: Iterable[str], timeout: float) -> Plan[dict[str, Task]]:
    """Block until every task is done or dead; returns them by id.

    Woken by the script that finishes each task, not by polling (see ``waiting``).
    Raises ``WaitTimeout`` (a ``TimeoutError``) listing the unfinished ids. A task id
    that does not exist counts as unfinished (it may not be enqueued yet: it is
    looked for again every second).
    """
    waiting = Waiting(q.keys, task_ids, timeout)
    while waiting.remaining:
        if not waiting.watching:
            ids = waiting.watched((yield waiting.watch()))
        else:
            found = yield waiting.pop(waiting.block_s(q.socket_timeout))
            popped = waiting.popped(found)
            if popped is None:
                waiting.watching = False  # a look now and then (see RECHECK_S)
                continue
            ids = popped
        if ids:
            waiting.take(ids, (yield waiting.read(ids)))
    return waiting.finished
