"""Handlers that use the handler API (progress, report_cost, cancelled) and the verdict
exceptions, for the worker tests of task control. Records go to ``test:events`` as
``<what>:<task id>`` strings."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis
from taskfleet import PermanentFailure, RetryAfter, current_task

EVENTS = "test:events"
#: The longest a gated handler waits for the test to open its gate; the clients'
#: socket timeout is above it (redis-py's default would end the wait first).
GATE_WAIT_S = 30
_clients: dict[str, redis.Redis] = {}


def _client() -> redis.Redis:
    url = current_task().redis_url
    client = _clients.get(url)
    if client is None:
        client = _clients[url] = redis.Redis.from_url(url, socket_timeout=GATE_WAIT_S + 10)
    return client


def _record(what: str) -> None:
    _client().rpush(EVENTS, f"{what}:{current_task().task_id}")


def progressing(payload: dict[str, Any]) -> str:
    """Report progress ``steps`` times as fast as it can (a chatty handler), the real cost,
    then wait until the test pushes to ``test:gate`` (at most 30 s)."""
    task = current_task()
    steps = int(payload.get("steps", 1000))
    for i in range(1, steps + 1):
        task.progress(done=i, total=steps, message=f"step {i}")
    task.report_cost(int(payload.get("cost", 1)))
    _record("reported")
    popped = _client().blpop(["test:gate"], timeout=GATE_WAIT_S)
    return "opened" if popped else "timed out"


def stepping(payload: dict[str, Any]) -> str:
    """Report step i of ``steps``, then wait for the test to push to ``test:gate`` (it
    does once it has seen that step), ``steps`` times."""
    task = current_task()
    steps = int(payload.get("steps", 3))
    for i in range(1, steps + 1):
        task.progress(done=i, total=steps, message=f"step {i}")
        if not _client().blpop(["test:gate"], timeout=GATE_WAIT_S):
            return f"never saw step {i} followed"
    return "stepped"


def until_cancelled(payload: dict[str, Any]) -> str:
    """A sync handler that works until its task is cancelled (at most 30 s)."""
    _record("start")
    deadline = time.monotonic() + 30
    while not current_task().cancelled and time.monotonic() < deadline:
        time.sleep(0.01)
    _record("saw-cancel" if current_task().cancelled else "never-cancelled")
    return "stopped"


async def async_until_cancelled(payload: dict[str, Any]) -> str:
    """An async handler that sleeps until its coroutine is cancelled (at most 30 s)."""
    await asyncio.to_thread(_record, "start")
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        await asyncio.to_thread(_record, "coroutine-cancelled")
        raise
    return "slept"


def permanent(payload: dict[str, Any]) -> None:
    _record("start")
    raise PermanentFailure("no such user")


def rate_limited(payload: dict[str, Any]) -> str:
    """Asks for a retry after ``delay`` s on its first ``times`` runs, then succeeds."""
    runs = _client().incr(f"test:runs:{current_task().task_id}")
    if runs <= int(payload.get("times", 1)):
        raise RetryAfter(float(payload.get("delay", 0.05)), "429 Too Many Requests")
    return f"ok after {runs} runs"
