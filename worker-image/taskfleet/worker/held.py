"""Held slots: what a worker does about calls it gave up on that never return.

A run whose task ended (timed out) or whose lease was lost while its call runs on keeps
its slot until the call returns (``Execution.held_slots``): a thread can't be killed, nor
a coroutine that ignores its cancellation. Such a slot is logged when it becomes held
(``slot_held``), reported in the heartbeat's record (``held``) and the metrics. Held
longer than ``--held-grace`` it is stuck (``slot_stuck``, once per slot). A worker whose
every slot is stuck can take no work: it says so (``worker_stuck``) and drains, then
exits with ``EXIT_SLOTS_STUCK`` so its supervisor (Kubernetes, the process supervisor)
starts a fresh one. Nothing is lost by that exit: a held slot's task has ended already
(its failure written and retried) or is another worker's (lease lost).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from taskfleet.worker.events import log_event
from taskfleet.worker.execution import Execution
from taskfleet.worker.gate import wait_any
from taskfleet.worker.lifecycle import Lifecycle

__all__ = ["EXIT_SLOTS_STUCK", "all_stuck", "held_loop"]

#: The exit code of a worker that stopped because every slot was stuck.
EXIT_SLOTS_STUCK = 3


def all_stuck(stuck: int, concurrency: int) -> bool:
    """Whether a worker with ``stuck`` slots stuck can take no more work."""
    return stuck >= concurrency


async def held_loop(
    execution: Execution,
    lifecycle: Lifecycle,
    *,
    concurrency: int,
    grace: float,
    interval: float,
    stuck: Callable[[int], None],
) -> None:
    """Every ``interval``, look at the held slots; call ``stuck`` once every slot is stuck.

    Off the claim path: a worker without held slots only wakes, finds none, and waits."""
    closing, draining = lifecycle.closing, lifecycle.drain_requested
    while not draining.is_set():
        await wait_any(draining, closing, limit=interval)
        if draining.is_set() or not execution.held_slots:
            continue
        n = execution.held_slots.stuck(grace)
        if all_stuck(n, concurrency):
            log_event(
                logging.ERROR,
                "worker_stuck",
                held=len(execution.held_slots),
                stuck=n,
                concurrency=concurrency,
                held_grace_s=grace,
                note="every slot is held by a call that does not return: the worker drains "
                f"and exits {EXIT_SLOTS_STUCK} to be restarted",
            )
            stuck(n)
            return
