"""Waiting on a condition with a deadline: the one way tests/ and e2e/ wait.

Whatever has to happen in real time (a lease to run out, a worker to start, a pod to be
ready) is polled for, not slept for: a test waits exactly as long as needed and, when the
deadline passes, fails saying what it waited for. e2e/ imports this module too, so the
fast tests and the cluster tests wait and fail the same way.

The defaults suit a local redis-server; each area states its own pace next to its fixtures
(worker processes in tests/workers/harness.py, the apiserver in tests/fixtures_operator.py,
kubectl in e2e/lib/kube.py).
"""

from __future__ import annotations

import time
import urllib.error
from collections.abc import Callable
from typing import TypeVar

import pytest

__all__ = ["INTERVAL_S", "TIMEOUT_S", "close_error", "wait_for"]

T = TypeVar("T")

#: A round trip to a local redis-server is cheap: poll often, give up soon.
TIMEOUT_S = 5.0
INTERVAL_S = 0.01


def wait_for(
    condition: Callable[[], T | None],
    *,
    timeout: float = TIMEOUT_S,
    interval: float = INTERVAL_S,
    what: str | Callable[[], str] = "",
    ignoring: tuple[type[Exception], ...] = (),
) -> T:
    """Call ``condition`` every ``interval`` seconds until it returns something truthy, and
    return that; fail the test once ``timeout`` seconds have passed.

    ``what`` names the condition in the failure; a callable is called at the deadline, to
    show the state then. ``ignoring``: exceptions the condition may raise while what it
    reads is not there yet (an object not created, a tunnel being restarted); they count as
    "not yet", and the last one is quoted in the failure, so a probe broken for good says so
    instead of passing for a condition that never came true.
    """
    deadline = time.monotonic() + timeout
    last_error = ""
    while True:
        try:
            value = condition()
        except ignoring as exc:
            last_error = f"{type(exc).__name__}: {exc}"
            close_error(exc)
        else:
            if value:
                return value
        if time.monotonic() > deadline:
            text = what() if callable(what) else what
            detail = f" (last error: {last_error})" if last_error else ""
            pytest.fail(
                f"timed out after {timeout:g} s waiting for "
                f"{text or condition.__doc__ or condition}{detail}"
            )
        time.sleep(interval)


def close_error(exc: BaseException) -> None:
    """Close what an ignored exception holds open.

    An HTTP error answer (a server still starting says 500 or 503) carries the response and
    its socket: left to the garbage collector, the socket is reported unclosed in whichever
    later test the collection happens to run, not in this one.
    """
    if isinstance(exc, urllib.error.HTTPError):
        exc.close()
