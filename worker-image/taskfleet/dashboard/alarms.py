"""A queue's health alarms: the conditions of the alert rules (``manifests/monitoring/``),
read from one ``QueueView`` and the sampler's counters, with the same thresholds (a test
reads them from the rules). The dashboard shows a condition as soon as it holds; an alert
fires once it has held for its rule's ``for``. Pure.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from taskfleet.dashboard.display import duration
from taskfleet.producer.overview import QueueView

__all__ = [
    "DEAD_RISE",
    "DEAD_WINDOW_S",
    "OLDEST_READY_S",
    "Alarm",
    "alarms",
    "dead_rise",
]

#: ``TaskfleetOldestTaskTooOld``: the next task ready for longer than this (s).
OLDEST_READY_S = 600
#: ``TaskfleetDeadTasksGrowing``: more than this many tasks went dead within the window.
DEAD_RISE = 10
DEAD_WINDOW_S = 15 * 60


@dataclass(frozen=True)
class Alarm:
    """One condition that holds: ``level`` critical or warning, the words, and the alert
    rule that says the same."""

    level: str
    text: str
    alert: str


def dead_rise(samples: list[tuple[int, int]], now_ms: int) -> tuple[int, float] | None:
    """Tasks that went dead over the last ``DEAD_WINDOW_S`` (or what the samples cover),
    and the seconds covered, from (at ms, ``dead_total``) samples; None with fewer than
    two. A counter that went down (a purge of the stats) counts from there."""
    kept = [(at, n) for at, n in samples if at >= now_ms - DEAD_WINDOW_S * 1000]
    if len(kept) < 2:
        return None
    rise = 0
    for (_, before), (_, after) in itertools.pairwise(kept):
        rise += max(0, after - before)
    return rise, (kept[-1][0] - kept[0][0]) / 1000


def alarms(view: QueueView, rise: tuple[int, float] | None = None) -> list[Alarm]:
    """The conditions that hold for ``view`` now, the most urgent first."""
    out: list[Alarm] = []
    pending = view.counts.get("pending", 0)
    alive = sum(1 for w in view.workers if w.alive)
    silent = len(view.workers) - alive
    if pending and not alive:
        out.append(
            Alarm(
                "critical",
                f"{pending:,} {'task' if pending == 1 else 'tasks'} pending and no live worker",
                "TaskfleetNoLiveWorkers",
            )
        )
    if silent:
        noun = "worker" if silent == 1 else "workers"
        out.append(
            Alarm(
                "warning",
                f"{silent} {noun} silent: no heartbeat within the lease TTL",
                "TaskfleetWorkersLost",
            )
        )
    oldest = view.oldest_pending_s
    if oldest is not None and oldest > OLDEST_READY_S:
        out.append(
            Alarm(
                "warning",
                f"the next task has waited {duration(oldest)} (over {duration(OLDEST_READY_S)})",
                "TaskfleetOldestTaskTooOld",
            )
        )
    if rise is not None and rise[0] > DEAD_RISE:
        out.append(
            Alarm(
                "warning",
                f"{rise[0]:,} tasks went dead in the last {duration(rise[1])}",
                "TaskfleetDeadTasksGrowing",
            )
        )
    return out
