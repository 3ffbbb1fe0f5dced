"""The slots calls the worker gave up on still hold, and since when.

A run whose task ended (timed out) or whose lease was lost while its call runs on keeps
its slot until the call returns (``Execution`` moves it here and back). Kept apart from
the runs themselves, so nothing is added to a task's own path; ``held.py`` watches them
against ``--held-grace``.
"""

from __future__ import annotations

import logging
import time

from taskfleet.worker.events import log_event
from taskfleet.worker.runs import Run

__all__ = ["HeldSlots"]


class HeldSlots:
    """Held slots by run, each with the monotonic time it became held; ``len()`` is how
    many there are. Each becoming held, stuck and released is logged once."""

    def __init__(self) -> None:
        self._since: dict[Run, float] = {}
        self._stuck: set[Run] = set()  # held past the grace, and logged so (slot_stuck)

    def __len__(self) -> int:
        return len(self._since)

    def hold(self, run: Run, reason: str, ran_s: float) -> None:
        """``run``'s call runs on after the worker gave it up (``reason``)."""
        self._since[run] = time.monotonic()
        log_event(
            logging.WARNING,
            "slot_held",
            task=run.task.id,
            reason=reason,
            ran_s=round(ran_s, 1),
            held=len(self._since),
            note="the call runs on and keeps its slot until it returns",
        )

    def release(self, run: Run) -> None:
        """``run``'s call returned at last: its slot is free again."""
        held_at = self._since.pop(run)
        self._stuck.discard(run)
        log_event(
            logging.INFO,
            "slot_released",
            task=run.task.id,
            held_s=round(time.monotonic() - held_at, 1),
        )

    def stuck(self, grace: float) -> int:
        """How many slots have been held longer than ``grace`` (each logged once, as
        ``slot_stuck``, when it passes it)."""
        now = time.monotonic()
        stuck = 0
        for run, held_at in self._since.items():
            if now - held_at < grace:
                continue
            stuck += 1
            if run not in self._stuck:
                self._stuck.add(run)
                log_event(
                    logging.ERROR,
                    "slot_stuck",
                    task=run.task.id,
                    held_s=round(now - held_at, 1),
                    held_grace_s=grace,
                )
        return stuck
