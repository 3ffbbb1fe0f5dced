"""The handler of ``bench.isolation``, in a module of its own: a child process imports the
handler's module at its first task, and this one imports nothing, so the figures are the
isolation's own cost, not an application's import time."""

from __future__ import annotations

from typing import Any


def noop(payload: dict[str, Any]) -> None:
    """Nothing, so what is measured is the way a task reaches its handler."""
