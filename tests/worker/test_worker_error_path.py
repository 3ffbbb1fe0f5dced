"""The error path itself can't fail: whatever a handler raises or returns, hostile objects
included, its attempt ends with exactly one outcome, logged, and its slot is free again.

Each case runs through a real worker process with one slot and no prefetch, so a run
that kept its slot (or a thread that died) would stall every task behind it.
"""

from __future__ import annotations

import signal
from collections import Counter
from typing import Any

import pytest
from taskfleet.producer.queue import Queue
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.tasks import Task

from tests.polling import wait_for
from tests.workers.harness import FAST, WORKER_INTERVAL_S, Fleet, WorkerProcess

SYNC = "tests.workers.breaking:sync_breaker"
ASYNC = "tests.workers.breaking:async_breaker"
#: debug: each task done is a line of its own (task_done), counted with the failures' lines
ONE_SLOT = [*FAST, "--concurrency", "1", "--prefetch", "0", "--log-level", "debug"]
UNREADABLE = "(the exception's message could not be read)"
NO_DELAY = "RetryAfter without a valid delay"
TERMINAL_EVENTS = ("task_done", "task_failed", "task_cancelled")

#: recipe -> (state, reason, a piece of the stored error)
CASES: dict[str, tuple[dict[str, Any], tuple[str, str | None, str]]] = {
    "str raises SystemExit": (
        {"raise": {"str": "SystemExit"}},
        ("dead", "failed", f"Hostile: {UNREADABLE}"),
    ),
    "str raises KeyboardInterrupt": (
        {"raise": {"str": "KeyboardInterrupt"}},
        ("dead", "failed", UNREADABLE),
    ),
    "str raises RecursionError": (
        {"raise": {"str": "RecursionError", "repr": "SystemExit"}},
        ("dead", "failed", UNREADABLE),
    ),
    "str returns a hostile str": (
        {"raise": {"str_subclass": True}},
        ("dead", "failed", "Hostile: text with hostile methods"),
    ),
    "class raises": (
        {"raise": {"base": "PermanentFailure", "class": "SystemExit", "message": "odd"}},
        ("dead", "permanent", "Hostile: odd"),
    ),
    "args raises": (
        {"raise": {"args": "KeyboardInterrupt", "message": "m"}},
        ("dead", "failed", "Hostile: m"),
    ),
    "traceback raises": (
        {"raise": {"traceback": "SystemExit", "message": "tb"}},
        ("dead", "failed", "Hostile: tb"),
    ),
    "RetryAfter skips init": (
        {"raise": {"base": "RetryAfter", "skip_init": True, "message": "m"}},
        ("dead", "failed", NO_DELAY),
    ),
    "PermanentFailure skips init": (
        {"raise": {"base": "PermanentFailure", "skip_init": True, "message": "no"}},
        ("dead", "permanent", "Hostile: no"),
    ),
    **{
        f"RetryAfter delay {name}": (
            {"raise": {"base": "RetryAfter", "delay": name}},
            ("dead", "failed", NO_DELAY),
        )
        for name in ("nan", "inf", "-inf", "negative", "huge", "text", "bool")
    },
    **{
        f"raises {base}": ({"raise": {"base": base, "message": "bye"}}, ("dead", "failed", "bye"))
        for base in ("SystemExit", "KeyboardInterrupt", "GeneratorExit", "BaseException")
    },
    "message with a lone surrogate": (
        {"raise": {"surrogate": True, "message": "half"}},
        ("dead", "failed", "Hostile: \\ud800 half"),
    ),
    "result dict raises SystemExit": (
        {"return": {"kind": "dict", "raises": "SystemExit"}},
        ("dead", "failed", "SystemExit"),
    ),
    "result dict raises KeyboardInterrupt": (
        {"return": {"kind": "dict", "raises": "KeyboardInterrupt"}},
        ("dead", "failed", "KeyboardInterrupt"),
    ),
    # the encoder reads a float subclass as a float: its hostile repr is never called
    "result float repr raises": ({"return": {"kind": "float"}}, ("done", None, "")),
    "result nested too deep": ({"return": {"kind": "deep"}}, ("dead", "failed", "Recursion")),
    "result circular": ({"return": {"kind": "circular"}}, ("dead", "failed", "Circular")),
    "result not JSON": ({"return": {"kind": "object"}}, ("dead", "failed", "not JSON")),
    "result nan": ({"return": {"kind": "nan"}}, ("dead", "failed", "NaN is not a finite number")),
    "result lone surrogate": ({"return": {"kind": "surrogate"}}, ("done", None, "")),
}


@pytest.fixture
def queue(redis_url: str) -> Queue:
    queue = Queue("jobs", redis_url=redis_url)
    queue.configure(QueueConfig(max_attempts=1, backoff_base_s=0, backoff_max_s=0))
    return queue


def ended(queue: Queue, task_id: str) -> Task:
    def check() -> Task | None:
        task = queue.get(task_id)
        return task if task is not None and task.state in ("done", "dead") else None

    return wait_for(check, timeout=15.0, interval=WORKER_INTERVAL_S, what=f"{task_id} to end")


def terminal_events(worker: WorkerProcess) -> Counter[str]:
    return Counter(e["task"] for e in worker.events() if e.get("event") in TERMINAL_EVENTS)


@pytest.mark.parametrize("handler", [SYNC, ASYNC], ids=["sync", "async"])
def test_every_hostile_exception_or_result_ends_its_attempt_once_and_frees_its_slot(
    fleet: Fleet, queue: Queue, handler: str
) -> None:
    ids = {name: queue.enqueue(payload) for name, (payload, _) in CASES.items()}
    last = queue.enqueue({"return": {"value": "after"}})
    worker = fleet.add(handler, args=ONE_SLOT).start()
    assert ended(queue, last).result == "after"  # one slot: nothing before it kept it
    for name, (_, (state, reason, error)) in CASES.items():
        task = ended(queue, ids[name])
        assert (task.state, task.reason) == (state, reason), (name, task)
        assert error in (task.error or ""), (name, task.error)
    counts = terminal_events(worker)
    assert all(counts[task_id] == 1 for task_id in [*ids.values(), last]), counts
    assert worker.alive(), worker.log_text()
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.log_text()
    assert "Traceback" not in worker.log_text()


def test_an_async_handler_that_cancels_its_own_task_fails_its_attempt_not_the_workers_drain(
    fleet: Fleet, queue: Queue
) -> None:
    """``asyncio.current_task().cancel()`` in the handler: the cancellation is its own, not
    a drain's, so the attempt fails at once (no release that would loop across restarts)
    and the next task gets the slot."""
    own = queue.enqueue({"cancel_self": True, "return": {"value": "never"}})
    after = queue.enqueue({"return": {"value": "after"}})
    worker = fleet.add(ASYNC, args=ONE_SLOT).start()
    task = ended(queue, own)
    assert (task.state, task.reason, task.attempts) == ("dead", "failed", 1), task
    assert "CancelledError" in (task.error or "") and "handler itself" in (task.error or "")
    assert ended(queue, after).result == "after"
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0, worker.log_text()
    assert queue.stats()["released"] == 0
    assert terminal_events(worker)[own] == 1
