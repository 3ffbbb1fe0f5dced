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

``Waiting`` holds a wait's state and decides; ``wait`` and ``wait_async`` only run its
round trips on a sync or an asyncio client.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import redis
import redis.asyncio

from taskfleet.producer.reading import encodable, task_of
from taskfleet.protocol.connect import SyncClient
from taskfleet.protocol.errors import InvalidArgument, WaitTimeout
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.scripts import AsyncScripts, Op, Ops, SyncScripts, text
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
        self.list_key = keys.waiter(self.waiter)
        self.ops = Ops(keys)
        self.keys = keys
        self.watching = False  # every remaining task is registered (or absent)

    def watch(self) -> Op[str]:
        return self.ops.watch(self.waiter, self.remaining)

    def watched(self, flags: str) -> list[str]:
        """The ids to read after a watch: those finished already."""
        self.watching = True
        return [i for i, flag in zip(self.remaining, flags, strict=True) if flag == "F"]

    def popped(self, replies: Sequence[Any]) -> list[str] | None:
        """The ids a blocking pop brought (None: none before it timed out)."""
        first, rest = replies
        if first is None:
            return None
        ids = {text(first[1]), *(text(x) for x in rest or ())}
        return [i for i in self.remaining if i in ids]

    def read(self, pipe: Any, ids: Sequence[str]) -> None:
        for task_id in ids:
            pipe.hgetall(self.keys.task(task_id))

    def take(self, ids: Sequence[str], raws: Sequence[Mapping[Any, Any]]) -> None:
        """Keep the finished ones; one that is not (pruned, or run again since) is watched
        again at the next look."""
        for task_id, raw in zip(ids, raws, strict=True):
            task = task_of(raw, task_id)
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

    def pop(self, pipe: Any, block: float) -> None:
        pipe.blpop([self.list_key], timeout=block)
        pipe.lpop(self.list_key, POP_MAX)


def _socket_timeout(client: SyncClient | redis.asyncio.Redis) -> float | None:
    pool = getattr(client, "connection_pool", None)  # a cluster client has one per node
    value = pool.connection_kwargs.get("socket_timeout") if pool is not None else None
    return float(value) if value else None


def wait(
    client: SyncClient, keys: QueueKeys, task_ids: Iterable[str], timeout: float
) -> dict[str, Task]:
    waiting = Waiting(keys, task_ids, timeout)
    scripts = SyncScripts.for_client(client)
    socket_timeout = _socket_timeout(client)

    def read(ids: list[str]) -> None:
        if ids:
            pipe = client.pipeline(transaction=False)
            waiting.read(pipe, ids)
            waiting.take(ids, pipe.execute())

    while waiting.remaining:
        if not waiting.watching:
            read(waiting.watched(scripts.run(waiting.watch())))
            continue
        pipe = client.pipeline(transaction=False)
        waiting.pop(pipe, waiting.block_s(socket_timeout))
        ids = waiting.popped(pipe.execute())
        if ids is None:
            waiting.watching = False  # a look now and then (see RECHECK_S)
        else:
            read(ids)
    return waiting.finished


async def wait_async(
    # a timeout argument as Queue.wait has: the same call in both APIs, and the timeout
    # bounds the server-side blocking too, which asyncio.timeout alone could not
    client: redis.asyncio.Redis,
    keys: QueueKeys,
    task_ids: Iterable[str],
    timeout: float,  # noqa: ASYNC109
) -> dict[str, Task]:
    waiting = Waiting(keys, task_ids, timeout)
    scripts = AsyncScripts.for_client(client)
    socket_timeout = _socket_timeout(client)

    async def read(ids: list[str]) -> None:
        if ids:
            pipe = client.pipeline(transaction=False)
            waiting.read(pipe, ids)
            waiting.take(ids, await pipe.execute())

    while waiting.remaining:
        if not waiting.watching:
            await read(waiting.watched(await scripts.run(waiting.watch())))
            continue
        pipe = client.pipeline(transaction=False)
        waiting.pop(pipe, waiting.block_s(socket_timeout))
        ids = waiting.popped(await pipe.execute())
        if ids is None:
            waiting.watching = False
        else:
            await read(ids)
    return waiting.finished
