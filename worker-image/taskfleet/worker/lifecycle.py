"""The worker's lifecycle: one object with named phases, and what its loops wait on.

A worker goes through its phases in one order (``Phase``; the moves in ``PHASES``)::

    STARTING -> RUNNING -> DRAINING -> CLOSING -> DRAINED -> STOPPED

- ``STARTING``: checking the server, registering, reading the lease TTL;
- ``RUNNING``: claiming and running tasks;
- ``DRAINING`` (``request_drain``: the first SIGTERM/SIGINT, ``taskfleet drain``): no
  claim any more; the tasks held finish, up to ``--drain-timeout``;
- ``CLOSING`` (``close``): what is held is finished or given up on; the background
  loops end, outcomes are flushed, the rest released, the worker deregisters;
- ``DRAINED``: deregistered; the worker outlives ``taskfleet drain`` processes;
- ``STOPPED``: the process exits (from any phase: a stop at once, a failure).

A drain requested while starting skips ``RUNNING``. Across the phases, one more
condition: a stop (``request_stop``: a second signal, a failure, Redis refusing us)
gives up every wait, for running tasks and for Redis; it drains too if no drain began.

Loops test and wait for the phases through ``Flag`` s (``drain_requested``, ``closing``,
``stop_requested``: events whose own ``set`` refuses), set here and only here, in the
order of the phases:
``closing`` is never set before ``drain_requested``. Two notifications wake a loop
and are cleared by it: ``slot_freed`` (the claim loop looks for room) and ``beat_now``
(the heartbeat beats at once).
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable

from taskfleet.worker.machine import Transitions

__all__ = ["PHASES", "Flag", "Lifecycle", "Phase"]


class Phase(enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    DRAINING = "draining"
    CLOSING = "closing"
    DRAINED = "drained"
    STOPPED = "stopped"

    @property
    def reported(self) -> str:
        """The phase as ``worker.json`` says it (``taskfleet drain`` reads it): closing is
        still draining to its reader."""
        return "draining" if self is Phase.CLOSING else self.value


PHASES: Transitions[Phase] = Transitions(
    "worker phase",
    {
        Phase.STARTING: {Phase.RUNNING, Phase.DRAINING, Phase.STOPPED},
        Phase.RUNNING: {Phase.DRAINING, Phase.STOPPED},
        Phase.DRAINING: {Phase.CLOSING, Phase.STOPPED},
        Phase.CLOSING: {Phase.DRAINED, Phase.STOPPED},
        Phase.DRAINED: {Phase.STOPPED},
        Phase.STOPPED: set(),
    },
)


class Flag(asyncio.Event):
    """A one-way condition of a ``Lifecycle``: tested and awaited by the loops like any
    ``asyncio.Event`` (at its cost: loops test these on every turn), set by its lifecycle
    alone. ``set`` and ``clear`` refuse."""

    def set(self) -> None:
        raise TypeError("a lifecycle's flag is set by its Lifecycle alone")

    def clear(self) -> None:
        raise TypeError("a lifecycle's flag is never cleared")

    def _set_by_lifecycle(self) -> None:
        asyncio.Event.set(self)


def _unobserved() -> None:
    """A lifecycle's change seen by no one (built without ``changed``)."""


class Lifecycle:
    """The phase of one worker. ``changed`` is called after each move (the runtime file
    follows it)."""

    def __init__(self, changed: Callable[[], None] = _unobserved) -> None:
        self._phase = Phase.STARTING
        #: The phase as ``worker.json`` says it, read on every change of the tasks held.
        self.reported = Phase.STARTING.reported
        self._changed = changed
        #: From ``DRAINING`` on: claim nothing more.
        self.drain_requested = self._drain = Flag()
        #: Give up waiting, for running tasks and for Redis.
        self.stop_requested = self._stop = Flag()
        #: From ``CLOSING`` on: the background loops end.
        self.closing = self._close = Flag()
        #: A slot may be free: the claim loop looks (it clears this before it waits).
        self.slot_freed = asyncio.Event()
        #: Heartbeat now: a drain began, Redis answers again (the heartbeat clears it).
        self.beat_now = asyncio.Event()

    @property
    def phase(self) -> Phase:
        return self._phase

    @property
    def draining(self) -> bool:
        """A drain was requested (or a stop): from ``DRAINING`` on."""
        return self._drain.is_set()

    @property
    def forced(self) -> bool:
        return self._stop.is_set()

    def started(self) -> None:
        """Registered and ready: claiming begins."""
        self._enter(Phase.RUNNING)

    def request_drain(self) -> bool:
        """Stop claiming and let what is held finish; False if a drain began already (or
        the worker has stopped: a signal may land after that)."""
        if self._drain.is_set() or self._phase is Phase.STOPPED:
            return False
        self._enter(Phase.DRAINING)
        self.beat_now.set()  # the heartbeat says so now
        self.slot_freed.set()  # the claim loop notices
        return True

    def request_stop(self) -> None:
        """Give up waiting, for running tasks and for Redis; drains first if need be."""
        if not self._drain.is_set() and self._phase is not Phase.STOPPED:
            self._enter(Phase.DRAINING)
        self._stop._set_by_lifecycle()
        self.slot_freed.set()  # the claim loop may be waiting for a slot

    def close(self) -> None:
        """What is held is finished or given up on: the background loops end."""
        self._enter(Phase.CLOSING)

    def drained(self) -> None:
        """Deregistered after a drain: ``taskfleet drain`` sees it and returns."""
        self._enter(Phase.DRAINED)

    def stopped(self) -> None:
        """The worker's last move, whatever came before."""
        self._enter(Phase.STOPPED)

    def _enter(self, phase: Phase) -> None:
        PHASES.check(self._phase, phase)
        self._phase = phase
        self.reported = phase.reported
        if phase is Phase.DRAINING:
            self._drain._set_by_lifecycle()
        elif phase is Phase.CLOSING:
            self._close._set_by_lifecycle()
        self._changed()
