"""Handlers for worker tests: each records what it did in Redis so tests can check it.

Records go to the list ``test:events`` as ``<what>:<task id>:<pod>`` strings.
"""

from __future__ import annotations

import asyncio
import contextvars
import subprocess
import threading
import time
from typing import Any

import redis
from taskfleet import PermanentFailure, RateLimited, add_children
from taskfleet.worker.handlers import current_task

EVENTS = "test:events"
#: The longest a gated handler waits for the test to open its gate; the clients'
#: socket timeout is above it (redis-py's default would end the wait first).
GATE_WAIT_S = 30
_clients: dict[str, redis.Redis] = {}


def _record(what: str) -> None:
    task = current_task()
    client = _clients.get(task.redis_url)
    if client is None:
        client = redis.Redis.from_url(task.redis_url, socket_timeout=GATE_WAIT_S + 10)
        _clients[task.redis_url] = client
    client.rpush(EVENTS, f"{what}:{task.task_id}:{task.pod}")


def sleep(payload: dict[str, Any]) -> dict[str, Any]:
    """Record the start, sleep ``seconds``, record the end."""
    _record("start")
    time.sleep(float(payload.get("seconds", 0)))
    _record("end")
    return {"slept": payload.get("seconds", 0)}


async def async_sleep(payload: dict[str, Any]) -> dict[str, Any]:
    await asyncio.to_thread(_record, "start")
    await asyncio.sleep(float(payload.get("seconds", 0)))
    await asyncio.to_thread(_record, "end")
    return {"slept": payload.get("seconds", 0)}


def gate(payload: dict[str, Any]) -> str:
    """Record the start, wait until the test pushes to ``test:gate`` (at most 30 s), record
    the end: holds a handler thread for exactly as long as the test wants."""
    _record("start")
    task = current_task()
    popped = _clients[task.redis_url].blpop(["test:gate"], timeout=GATE_WAIT_S)
    _record("end" if popped else "gate-timeout")
    return "opened" if popped else "timed out"


def split_once(payload: dict[str, Any]) -> Any:
    """A page (``"page"``) is ``gate``; a split adds its ``pages`` as children (ids
    ``p<i>``) and fails its first run for good, returning ``{"pages", "run"}`` on the next."""
    if "page" in payload:
        return gate(payload)
    task = current_task()
    _record("split")
    pages = int(payload["pages"])
    add_children({"payload": {"page": i}, "task_id": f"p{i}"} for i in range(pages))
    runs = _clients[task.redis_url].incr(f"test:runs:{task.task_id}")
    if runs == 1:
        raise PermanentFailure("the first run fails after adding its pages")
    return {"pages": pages, "run": runs}


def split_cancelled(payload: dict[str, Any]) -> Any:
    """Adds a child (``<id>-kid``, delayed an hour) and cancels it before returning: the
    parent's complete finds its child failed, so it ends dead, not done."""
    from taskfleet import Queue

    task = current_task()
    [kid] = add_children([{"payload": {}, "task_id": f"{task.task_id}-kid", "delay": 3600}])
    with Queue(task.queue, task.redis_url) as queue:
        queue.cancel(kid)
    return "split"


def route(payload: dict[str, Any]) -> Any:
    """``gate`` for a payload with ``"gate": true``, else ``sleep``."""
    return gate(payload) if payload.get("gate") else sleep(payload)


def spin(payload: dict[str, Any]) -> int:
    """Burn CPU in pure Python (holding the GIL between switches) for ``seconds``."""
    _record("start")
    deadline = time.monotonic() + float(payload["seconds"])
    count = 0
    while time.monotonic() < deadline:
        count += 1
    _record("end")
    return count


def fail_first(payload: dict[str, Any]) -> str:
    """Raise on the first attempt, succeed on the next ones."""
    _record("start")
    if current_task().attempt <= 1:
        raise ValueError("first attempt fails on purpose")
    _record("end")
    return "ok"


def unserialisable(payload: dict[str, Any]) -> object:
    return object()


def orphan(payload: dict[str, Any]) -> int:
    """Start a shell that backgrounds a grandchild and exits: the grandchild is orphaned,
    reparented to PID 1, and becomes a zombie there when it ends unless PID 1 reaps it.
    The shell itself is our child and ``subprocess`` must still see its real exit status."""
    seconds = float(payload.get("seconds", 0.2))
    code = subprocess.run(["sh", "-c", f"sleep {seconds} & exit 3"], check=False).returncode
    _record(f"end-{code}")
    return code


NOT_CALLABLE = 42


def slow_first(payload: dict[str, Any]) -> str:
    """Hang for ``seconds`` on the first attempt only (a stuck call that a timeout must end)."""
    _record(f"start{current_task().attempt}")
    if current_task().attempt <= 1:
        time.sleep(float(payload.get("seconds", 30)))
    _record(f"end{current_task().attempt}")
    return "ok"


async def async_slow_first(payload: dict[str, Any]) -> str:
    await asyncio.to_thread(_record, f"start{current_task().attempt}")
    if current_task().attempt <= 1:
        await asyncio.sleep(float(payload.get("seconds", 30)))
    await asyncio.to_thread(_record, f"end{current_task().attempt}")
    return "ok"


def raise_timeout(payload: dict[str, Any]) -> None:
    """A handler whose own upstream call timed out (not the task's timeout)."""
    raise TimeoutError("upstream took too long")


_leak: contextvars.ContextVar[str] = contextvars.ContextVar("test_leak", default="")


def context_leak(payload: dict[str, Any]) -> str:
    """Return what an earlier call left in a context variable (nothing, if calls are isolated)."""
    seen = _leak.get()
    _leak.set(current_task().task_id)
    return seen


def by_payload(payload: dict[str, Any]) -> str:
    """Raise when the payload says ``"raise": true``, else return at once."""
    if payload.get("raise"):
        raise RuntimeError("asked to fail")
    return "ok"


def resize(payload: dict[str, Any]) -> dict[str, Any]:
    """A named task's handler (sync): says which handler ran and the name it was given."""
    return {"ran": "resize", "name": current_task().name, "payload": payload}


async def crop(payload: dict[str, Any]) -> dict[str, Any]:
    """A named task's handler (async), to serve beside ``resize`` in one worker."""
    return {"ran": "crop", "name": current_task().name, "payload": payload}


#: A registry: each entry is a named handler (``--handler tests.workers.handlers:MEDIA``).
MEDIA = {"resize": resize, "crop": crop}


def loaded_modules(payload: dict[str, Any]) -> list[str]:
    """The modules the worker process holds while running a task, under ``prefixes``."""
    import sys

    prefixes = tuple(payload["prefixes"])
    return sorted(name for name in sys.modules if name.startswith(prefixes))


def nap(payload: dict[str, Any]) -> dict[str, Any]:
    """Sleep ``seconds`` and touch nothing else: Redis in trouble is the worker's alone."""
    time.sleep(float(payload.get("seconds", 0)))
    return {"slept": payload.get("seconds", 0)}


def quota_spent(payload: dict[str, Any]) -> str:
    """The provider's reply said its quota is spent: reported, and the task succeeds."""
    current_task().report_quota(remaining=0, reset_after=60, scope=payload.get("scope", "queue"))
    return "ok"


async def async_quota_spent(payload: dict[str, Any]) -> str:
    current_task().report_quota(remaining=0, reset_after=60, scope=payload.get("scope", "queue"))
    return "ok"


def _wait_gate() -> None:
    task = current_task()
    _clients[task.redis_url].blpop(["test:gate"], timeout=GATE_WAIT_S)


def provider(payload: dict[str, Any]) -> str:
    """``sleep``, or for ``{"meets": "quota" | "limit", "scope": ...}``: wait for the
    gate, then report the quota spent and succeed, or raise ``RateLimited`` (the
    provider's 429); tasks prefetched meanwhile wait behind it."""
    meets = payload.get("meets")
    if meets is None:
        sleep(payload)
        return "ok"
    _record("start")
    _wait_gate()
    scope = payload.get("scope", "queue")
    if meets == "limit":
        raise RateLimited(60, "429 from the provider", scope=scope)
    current_task().report_quota(remaining=0, reset_after=60, scope=scope)
    _record("end")
    return "ok"


#: Never set: a call waiting on it never returns, as a hung request without a timeout.
_NEVER = threading.Event()


def hang_first(payload: dict[str, Any]) -> str:
    """With ``hang``, block for ever on the first attempt (a thread no timeout can end);
    any other run returns at once."""
    _record(f"start{current_task().attempt}")
    if payload.get("hang") and current_task().attempt <= 1:
        _NEVER.wait()
    return "ok"


def numbers(payload: dict[str, Any]) -> object:
    """What the payload asks for, to break the number rule: a result ``{"id": 2**63+1}``,
    a progress of ``2**60`` items, an exception without a message; else ``"ok"``."""
    ask = payload.get("ask")
    if ask == "big result":
        return {"id": 2**63 + 1}
    if ask == "nan result":
        return [1, float("nan")]
    if ask == "big progress":
        current_task().progress(done=1, total=2**60)
    if ask == "empty error":
        raise ValueError()
    return "ok"


def fail_twice(payload: dict[str, Any]) -> str:
    """Raise on the first two attempts (a KeyError raised here), succeed on the third."""
    if current_task().attempt <= 2:
        return payload["missing"]  # type: ignore[no-any-return]  # raises KeyError
    return "ok"
