"""Bounds at the door: every time and number a producer stores is one every reader can use.

The enqueue API, the ``taskfleet enqueue`` flags and ``QueueConfig`` refuse what Lua
(``%.14g`` numbers), the worker (``int()`` of a claim record) or ``datetime`` could not
represent, with one clear error naming the bound; and the readers (``Queue.get``,
``wait``, ``taskfleet task``) never fail on what a foreign writer put in a task's hash.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from pydantic import ValidationError
from taskfleet import InvalidArgument, InvalidPayload, ProtocolError, Queue, QueueConfig
from taskfleet.protocol import bounds
from taskfleet.protocol.tasks import Task, TaskState

from tests.fixtures_redis import MakeBroker
from tests.workers.harness import env_for, taskfleet


def _nested(depth: int) -> dict[str, Any]:
    payload: dict[str, Any] = {}
    inner = payload
    for _ in range(depth):
        inner["x"] = {}
        inner = inner["x"]
    return payload


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"delay": 3e11}, "delay must be at most 3153600000 s (100 years)"),
        ({"delay": 10**400}, "delay must be at most 3153600000 s"),
        ({"delay": timedelta.max}, "delay must be at most"),
        ({"deadline": 3e11}, "deadline must be at most 3153600000 s"),
        ({"deadline": datetime(9999, 12, 31, tzinfo=UTC)}, "deadline must be at most"),
        ({"deadline": datetime(1960, 1, 1, tzinfo=UTC)}, "deadline must be after 1970"),
        ({"timeout": 1e300}, "timeout must be at most 31536000 s (1 years)"),
        ({"timeout": -(10**400)}, "timeout must be seconds"),
        ({"cost": 10**14}, "cost must be between 0 and 1000000000, not 100000000000000"),
        ({"cost": 10**5000}, "cost must be between 0 and 1000000000, not an integer of"),
        ({"max_attempts": 10**30}, "max_attempts must be between 1 and 10000"),
        ({"priority": 2**63}, "priority must be between -1000 and 1000"),
        ({"task_id": "x" * 201}, "task_id must be a non-empty printable string of <= 200"),
        ({"task_id": "\u200fabc"}, "task_id must be a non-empty printable string"),
    ],
)
def test_an_out_of_range_time_or_number_is_refused_naming_its_bound_and_nothing_stored(
    queue: Queue, redis_client: redis.Redis, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message.replace("(", r"\(").replace(")", r"\)")):
        queue.enqueue({"x": 1}, **kwargs)
    assert redis_client.dbsize() == 0


def test_a_payload_nested_too_deeply_for_json_is_an_invalid_payload(queue: Queue) -> None:
    with pytest.raises(InvalidPayload, match="nested more than"):
        queue.enqueue(_nested(100_000))


def test_a_task_at_every_bound_is_stored_and_read_back_exactly_by_a_worker_claim(
    queue: Queue, make_broker: MakeBroker
) -> None:
    task_id = queue.enqueue(
        {"n": 1},
        priority=bounds.PRIORITY_MAX,
        cost=bounds.MAX_COST,
        max_attempts=bounds.MAX_ATTEMPTS,
        timeout=bounds.MAX_TIMEOUT_S,
        deadline=bounds.MAX_DEADLINE_S,
    )
    [claimed] = make_broker("jobs").claim(1).tasks
    assert claimed.id == task_id
    assert (claimed.priority, claimed.cost, claimed.max_attempts, claimed.timeout) == (
        bounds.PRIORITY_MAX,
        bounds.MAX_COST,
        bounds.MAX_ATTEMPTS,
        bounds.MAX_TIMEOUT_S,
    )
    later = queue.enqueue({"n": 2}, delay=bounds.MAX_DELAY_S, cost=bounds.MIN_COST)
    task = queue.get(later)
    assert task is not None and task.run_at is not None and task.created_at is not None
    assert task.run_at - task.created_at >= timedelta(seconds=bounds.MAX_DELAY_S)


@pytest.mark.parametrize(
    "field",
    [
        "rate_limit_period_s",
        "backoff_base_s",
        "backoff_max_s",
        "lease_ttl_s",
        "done_retention_s",
        "dead_retention_s",
    ],
)
def test_a_queue_duration_beyond_100_years_is_refused_by_the_config_model(field: str) -> None:
    values: dict[str, Any] = {field: bounds.MAX_DURATION_S * 10}
    if field == "backoff_base_s":
        values["backoff_max_s"] = bounds.MAX_DURATION_S * 10
    with pytest.raises(ValidationError, match="less than or equal to 3153600000"):
        QueueConfig(**values)
    QueueConfig(**{k: bounds.MAX_DURATION_S for k in values})  # the bound itself is fine


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_attempts", 10_001),
        ("max_lost", 10_001),
        ("max_concurrency", 10**14),
        ("rate_limit_tasks", 10**14),
        ("rate_limit_cost", 10**14),
        ("default_timeout_s", 1e300),
        ("max_payload_bytes", 2**40),
    ],
)
def test_a_queue_count_or_limit_beyond_its_bound_is_refused_by_the_config_model(
    field: str, value: float
) -> None:
    with pytest.raises(ValidationError, match="less than or equal to"):
        QueueConfig(**{field: value})


#: A task hash as a foreign writer (or a hand edit) might leave it: unreadable everywhere.
FOREIGN = {
    "state": "done",
    "payload": '{"a": "\\ud800"}',
    "result": "not json",
    "priority": "1e+300",
    "attempts": "many",
    "max_attempts": "inf",
    "cost": "1e+14",
    "lost": "nan",
    "timeout": "-5",
    "created_at": "1e300",
    "run_at": "-1e20",
    "deadline": "soon",
    "started_at": "inf",
    "finished_at": "3e11",  # 1979: representable, kept
    "lease_until": "nan",
    "error": b"\xff\xfe broken",
}


def _store_foreign(queue: Queue, task_id: str, **changes: Any) -> None:
    mapping = {**FOREIGN, **changes}
    queue.client.hset(queue.keys.task(task_id), mapping=mapping)  # type: ignore[arg-type]
    queue.client.zadd(queue.keys.done, {task_id: 1})


def test_a_hand_edited_hash_reads_as_a_task_with_none_for_unusable_times_and_defaults(
    queue: Queue,
) -> None:
    _store_foreign(queue, "foreign")
    task = queue.get("foreign")
    assert task is not None
    assert (task.id, task.state) == ("foreign", TaskState.DONE)
    assert task.created_at is task.run_at is task.deadline is task.started_at is None
    assert task.lease_until is None
    assert task.finished_at == datetime(1979, 7, 5, 5, 20, tzinfo=UTC)
    assert (task.attempts, task.max_attempts, task.lost, task.timeout) == (0, None, 0, None)
    assert task.cost == 10**14 and task.priority > 10**299
    assert task.error is not None and task.error.endswith(" broken")
    assert task.result == "not json"
    assert queue.wait(["foreign"], timeout=1)["foreign"] == task
    assert queue.stats()["done"] == 1


def test_a_hash_without_a_state_this_version_knows_is_a_protocol_error_not_a_crash(
    queue: Queue,
) -> None:
    _store_foreign(queue, "odd", state="paused")
    with pytest.raises(ProtocolError, match="'odd' has no state this version knows: 'paused'"):
        queue.get("odd")


def test_task_from_hash_never_raises_on_out_of_range_times(queue: Queue) -> None:
    for value in ("1e300", "-1e300", "253402300800000", "-62135596800001", "1e999", "0x10"):
        task = Task.from_hash({"state": "pending", "created_at": value, "cost": value}, "t")
        assert task.created_at is None


def test_taskfleet_task_shows_a_hand_edited_task_without_a_traceback(
    queue: Queue, redis_url: str, tmp_path: Path
) -> None:
    _store_foreign(queue, "foreign")
    _store_foreign(queue, "odd", state="paused")
    env = env_for(redis_url, tmp_path)
    text = taskfleet("task", "jobs", "foreign", env=env)
    assert text.returncode == 0, text.stderr
    assert "Traceback" not in text.stderr and "100000000000000" in text.stdout
    as_json = taskfleet("task", "jobs", "foreign", "--json", env=env)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["created_at"] is None
    odd = taskfleet("task", "jobs", "odd", env=env)
    assert odd.returncode == 1
    assert odd.stderr.startswith("taskfleet: error: task 'odd' has no state")
    assert odd.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["enqueue", "q", "--delay", "3e11"], "'--delay': 300000000000.0 is not in the range"),
        (["enqueue", "q", "--deadline", "3e11"], "'--deadline'"),
        (["enqueue", "q", "--deadline", "0"], "'--deadline'"),
        (["enqueue", "q", "--deadline", "nan"], "not a finite number"),
        (["enqueue", "q", "--timeout", "1e300"], "0<x<=31536000"),
        (["enqueue", "q", "--cost", "100000000000000"], "0<=x<=1000000000"),
        (["enqueue", "q", "--cost", "-1"], "0<=x<=1000000000"),
        (["enqueue", "q", "--max-attempts", "10001"], "1<=x<=10000"),
        (["enqueue", "q", "--priority", "1001"], "-1000<=x<=1000"),
        (["enqueue", "q", "--priority", str(2**63)], "-1000<=x<=1000"),
        (["enqueue", "q", "--id", b"bad\xff"], "task_id must be a non-empty printable string"),
        (["task", "q", b"bad\xff"], "task_id must be a string UTF-8 can encode"),
    ],
)
def test_a_cli_time_or_number_out_of_range_exits_2_with_one_line_naming_the_bound(
    args: list[Any], expected: str, redis_url: str, tmp_path: Path
) -> None:
    result = taskfleet(*args, env=env_for(redis_url, tmp_path))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("taskfleet: error: "), result.stderr
    assert expected in lines[0]
    with Queue("q", redis_url=redis_url) as queue:
        assert queue.stats()["enqueued"] == 0


def test_cli_enqueue_stores_deadline_and_cost(redis_url: str, tmp_path: Path) -> None:
    env = env_for(redis_url, tmp_path)
    result = taskfleet("enqueue", "q", "--deadline", "60", "--cost", "7", "--id", "t", env=env)
    assert result.returncode == 0, result.stderr
    with Queue("q", redis_url=redis_url) as queue:
        task = queue.get("t")
    assert task is not None and task.deadline is not None and task.created_at is not None
    assert task.cost == 7
    assert math.isclose((task.deadline - task.created_at).total_seconds(), 60)


def test_the_config_models_defaults_are_the_plain_defaults_the_scripts_and_worker_use() -> None:
    from taskfleet.protocol.config import QueueConfig
    from taskfleet.protocol.defaults import CONFIG_DEFAULTS, lua_defaults

    assert QueueConfig().model_dump() == CONFIG_DEFAULTS
    assert QueueConfig().to_redis() == lua_defaults()


def test_the_worker_starts_without_loading_pydantic_or_the_producer_api() -> None:
    import subprocess
    import sys

    code = (
        "import sys, taskfleet.cli, taskfleet.worker.core, taskfleet.worker.supervisor;"
        "print(sorted(m for m in sys.modules if m.startswith(('pydantic', 'taskfleet.producer'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
