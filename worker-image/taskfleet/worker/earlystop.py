"""SIGTERM/SIGINT that reach a worker process before its loop handles them.

Remembered, never fatal: a process signalled while it starts (the kubelet stops a pod
that just started, a supervisor forks a process while the pod drains) starts anyway,
sees ``requested`` and drains at once, exit 0. Standard library only: the worker's
command installs it before click, redis or the worker's modules load, which can take a
second on a busy node.
"""

from __future__ import annotations

import signal
from types import FrameType

__all__ = ["STOP_SIGNALS", "EarlyStop", "at_start"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class EarlyStop:
    """Notes a stop signal until the worker's loop takes the signals over."""

    def __init__(self) -> None:
        self.requested = False
        self.installed = False

    def install(self) -> EarlyStop:
        for signum in STOP_SIGNALS:
            signal.signal(signum, self._note)
        self.installed = True
        return self

    def _note(self, _signum: int, _frame: FrameType | None) -> None:
        self.requested = True


_AT_START = EarlyStop()


def at_start() -> EarlyStop:
    """The process's first ``EarlyStop``, installed on the first call: the ``taskfleet``
    command calls it first thing for ``worker``, and the command's body finds the same one
    (so a signal noted during the imports between is not forgotten)."""
    return _AT_START if _AT_START.installed else _AT_START.install()
