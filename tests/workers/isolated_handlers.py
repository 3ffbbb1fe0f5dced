"""Handlers for ``--isolation process`` tests: each says which process ran it (its progress
message or its result), so a test can find the child and watch it go."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

from taskfleet import cancelled, current_task

#: What a leaking handler keeps for ever (in its process): a child's memory grows per task.
_LEAKED: list[bytes] = []


def _say_pid() -> None:
    current_task().progress(message=f"pid {os.getpid()}")


def runaway(payload: dict[str, Any]) -> str:
    """Reports its pid, then spins for ever without looking at cancelled(): only a signal
    ends it."""
    _say_pid()
    n = 0
    while True:
        n += 1


def stubborn(payload: dict[str, Any]) -> str:
    """Reports its pid, then swallows the worker's polite stop: only SIGKILL ends it."""
    _say_pid()
    while True:
        with contextlib.suppress(BaseException):  # the point: it swallows TaskStopped
            time.sleep(0.05)


def pid(payload: dict[str, Any]) -> int:
    return os.getpid()


def leak(payload: dict[str, Any]) -> dict[str, int]:
    """Keeps 5 MB per task in its process; says which process and how much it holds."""
    _LEAKED.append(b"x" * (5 * 1024 * 1024))
    return {"pid": os.getpid(), "leaked_mb": 5 * len(_LEAKED)}


def dies_on_first_attempt(payload: dict[str, Any]) -> int:
    """First attempt: reports its pid and waits to be killed; later ones return their pid."""
    if current_task().attempt == 1:
        _say_pid()
        time.sleep(60)
    return os.getpid()


def polite(payload: dict[str, Any]) -> dict[str, Any]:
    """A sync handler that polls ``cancelled()`` in its loop, as the docs show."""
    _say_pid()
    steps = 0
    deadline = time.monotonic() + 30
    while not cancelled() and time.monotonic() < deadline:
        steps += 1
        time.sleep(0.01)
    return {"stopped": cancelled(), "steps": steps}


async def async_pid(payload: dict[str, Any]) -> dict[str, Any]:
    """An async handler: in process isolation it runs on its child's own loop."""
    return {"pid": os.getpid(), "task": current_task().task_id}


def _make_closure() -> Any:
    def inner(payload: dict[str, Any]) -> int:
        return 1

    return inner


#: A handler pickle can't name (a function defined inside another): refused at start.
closure = _make_closure()
