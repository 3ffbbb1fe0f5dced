"""``current_task().report_quota``: a handler that learns from its provider's reply that
the quota is spent pauses the queue (or its task's group) until the reset, and its task
still succeeds; sync and async handlers, on real worker processes and a real Redis."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from taskfleet import Queue, TaskState
from taskfleet.worker.context import QUOTA_LOW, TaskControl, quota_pause_ms, task_context

from tests.polling import wait_for
from tests.workers.harness import FAST, WORKER_INTERVAL_S, Fleet

H = "tests.workers.handlers"


def _context(sink: list[tuple[object, ...]]) -> object:
    control = TaskControl(
        "tok",
        lambda *a: None,
        lambda *a: sink.append(a),  # type: ignore[arg-type]
    )
    return task_context(
        queue="q",
        task_id="t1",
        attempt=1,
        pod="p",
        incarnation="i",
        redis_url="redis://127.0.0.1:1/0",
        control=control,
        trace=None,
        name=None,
    )


def test_report_quota_pauses_only_at_the_threshold_and_checks_its_input() -> None:
    sink: list[tuple[object, ...]] = []
    task = _context(sink)
    task.report_quota(remaining=QUOTA_LOW + 5, reset_after=30)  # type: ignore[attr-defined]
    assert sink == []
    task.report_quota(remaining=0, reset_after=30, scope="group")  # type: ignore[attr-defined]
    assert sink[0][:4] == ("t1", "tok", 30_000, True)
    for bad in (
        {"remaining": "0"},
        {"remaining": 0, "reset_after": -1},
        {"remaining": 0, "reset_after": 1, "reset_at": 2},
        {"remaining": 0, "reset_at": datetime(2030, 1, 1)},  # naive
        {"remaining": 0, "scope": "tenant"},
    ):
        with pytest.raises((TypeError, ValueError)):
            task.report_quota(**bad)  # type: ignore[attr-defined]
    at = datetime(2030, 1, 1, tzinfo=UTC)
    assert quota_pause_ms(None, at, at.timestamp() - 90) == 90_000
    assert quota_pause_ms(timedelta(seconds=2), None, 0) == 2000
    assert quota_pause_ms(None, None, 0) is None


@pytest.mark.parametrize("handler", ["quota_spent", "async_quota_spent"])
def test_a_reported_spent_quota_pauses_the_queue_and_the_task_succeeds(
    fleet: Fleet, queue: Queue, handler: str
) -> None:
    fleet.add(f"{H}:{handler}", args=FAST).start()
    task_id = queue.enqueue({})
    wait_for(
        lambda: (t := queue.get(task_id)) is not None and t.state == TaskState.DONE,
        timeout=15,
        interval=WORKER_INTERVAL_S,
        what=fleet.logs,
    )
    wait_for(lambda: queue.quota().paused, timeout=10, interval=WORKER_INTERVAL_S)
    state = queue.quota()
    assert state.pause_left_ms > 30_000 and state.reason.startswith("provider quota spent")


def test_a_group_scoped_report_pauses_only_that_group(fleet: Fleet, queue: Queue) -> None:
    fleet.add(f"{H}:async_quota_spent", args=FAST).start()
    task_id = queue.enqueue({"scope": "group"}, group="t1")
    wait_for(
        lambda: (t := queue.get(task_id)) is not None and t.state == TaskState.DONE,
        timeout=15,
        interval=WORKER_INTERVAL_S,
        what=fleet.logs,
    )
    wait_for(lambda: queue.quota(group="t1").paused, timeout=10, interval=WORKER_INTERVAL_S)
    assert not queue.quota().paused


@pytest.mark.parametrize("scope", ["queue", "group"])
def test_report_quota_works_in_a_child_process_as_in_a_thread(
    fleet: Fleet, queue: Queue, scope: str
) -> None:
    """``--isolation process``: the child sends the report over its pipe, the worker
    writes the pause; the task succeeds."""
    fleet.add(f"{H}:quota_spent", args=[*FAST, "--isolation", "process"]).start()
    task_id = queue.enqueue({"scope": scope}, group="t1")
    wait_for(
        lambda: (t := queue.get(task_id)) is not None and t.state == TaskState.DONE,
        timeout=15,
        interval=WORKER_INTERVAL_S,
        what=fleet.logs,
    )
    group = "t1" if scope == "group" else None
    wait_for(lambda: queue.quota(group=group).paused, timeout=10, interval=WORKER_INTERVAL_S)
    state = queue.quota(group=group)
    assert state.pause_left_ms > 30_000 and state.reason.startswith("provider quota spent")
    assert scope == "queue" or not queue.quota().paused
