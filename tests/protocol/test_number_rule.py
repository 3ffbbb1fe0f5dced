"""The protocol's number rule (docs/protocol.md, section 1): a client refuses to store an
integer outside ±(2^53-1) or a non-finite number, in a payload, a result or a progress,
with one line naming where it is; and the CLI refuses a JSON object naming a key twice."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from taskfleet.producer.flows import chain
from taskfleet.producer.queue import Queue
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.errors import InvalidPayload
from taskfleet.protocol.numbers import number_problem, stored_number_problem
from taskfleet.protocol.tasks import Task

from tests.cli_output import assert_one_line_error
from tests.polling import wait_for
from tests.workers.harness import Fleet, env_for, taskfleet

H = "tests.workers.handlers"
SAFE = 2**53 - 1


@pytest.fixture
def queue(redis_url: str) -> Iterator[Queue]:
    with Queue("jobs", redis_url=redis_url) as queue:
        queue.configure(QueueConfig(backoff_base_s=0, backoff_max_s=0))
        yield queue


REFUSED = {
    "2^53": ({"n": 2**53}, "payload.n: integer 9007199254740992 is outside ±(2^53-1)"),
    "-2^53": ({"n": -(2**53)}, "payload.n: integer -9007199254740992 is outside"),
    "2^63+1 deep": (
        {"items": [{}, {}, {}, {"id": 2**63 + 1}]},
        "payload.items[3].id: integer 9223372036854775809 is outside ±(2^53-1); "
        "send it as a string",
    ),
    "10^400": ({"n": 10**400}, "payload.n: integer of 1329 bits is outside"),
    "1e400": ({"n": float("1e400")}, "payload.n: Infinity is not a finite number"),
    "nan": ({"a b": [float("nan")]}, 'payload["a b"][0]: NaN is not a finite number'),
}


@pytest.mark.parametrize(("payload", "message"), REFUSED.values(), ids=REFUSED.keys())
def test_a_number_no_reader_holds_exactly_is_refused_with_its_path_and_nothing_stored(
    queue: Queue, redis_client: redis.Redis, payload: dict[str, Any], message: str
) -> None:
    queue.client.flushdb()
    for enqueue in (
        lambda: queue.enqueue(payload),
        lambda: queue.enqueue_many([{"payload": {}}, {"payload": payload}]),
        lambda: queue.enqueue_flow(chain({"payload": {}}, {"payload": payload})),
        lambda: queue.schedule("nightly", "0 3 * * *", payload),
    ):
        with pytest.raises(InvalidPayload) as caught:
            enqueue()
        assert str(caught.value).startswith(message)
    assert redis_client.dbsize() == 0


def test_the_largest_safe_integers_and_long_digits_in_strings_are_stored_as_given(
    queue: Queue,
) -> None:
    payload = {"max": SAFE, "min": -SAFE, "id": "9223372036854775809", "f": 1.2345678901234567e300}
    task = queue.get(queue.enqueue(payload))
    assert task is not None and task.payload == payload


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ([0.30000000000000004, 1.2345678901234567e25, -0.1234567890123456], None),
        ({"big float": 123456789012345678.0, "safe": -(2**53 - 1)}, None),
        ({"text": "id 123456789012345678901", "n": 1}, None),
        ([0.30000000000000004, 2**53], "r[1]: integer 9007199254740992"),
        ({"f": 0.1234567890123456789, "i": -(2**63)}, "r.i: integer -9223372036854775808"),
        (10**20, "r: integer 100000000000000000000"),
    ],
)
def test_floats_long_digits_and_strings_pass_the_number_check_and_only_integers_fail(
    value: Any, problem: str | None
) -> None:
    found = number_problem(value, json.dumps(value).encode(), "r")
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem)


def test_a_stored_integer_past_the_rule_is_found_in_the_text_not_in_strings() -> None:
    fine = '{"a":"12345678901234567890","b":9007199254740991,"f":1.2345678901234567e300}'
    assert stored_number_problem(fine, "p") is None
    assert stored_number_problem('{"g":12345678901234567.5}', "p") is None
    problem = stored_number_problem('{"a":"x","b":[-9223372036854775809]}', "payload")
    assert problem == (
        "payload: integer -9223372036854775809 is outside ±(2^53-1); send it as a string"
    )


def finished(queue: Queue, task_id: str) -> Task:
    def check() -> Task | None:
        task = queue.get(task_id)
        return task if task is not None and task.state in ("done", "dead") else None

    return wait_for(check, timeout=15, what=f"task {task_id} finished")


@pytest.mark.parametrize(
    ("ask", "error"),
    [
        ("big result", "TypeError: result.id: integer 9223372036854775809 is outside ±(2^53-1)"),
        ("nan result", "TypeError: result[1]: NaN is not a finite number"),
        ("big progress", "ValueError: progress.total: integer 1152921504606846976 is outside"),
        ("empty error", "ValueError"),
    ],
)
def test_a_handler_breaking_the_rule_fails_its_task_with_a_clear_error_and_the_worker_runs_on(
    fleet: Fleet, queue: Queue, ask: str, error: str
) -> None:
    bad = queue.enqueue({"ask": ask}, max_attempts=1)
    fleet.add(f"{H}:numbers").start()
    task = finished(queue, bad)
    assert task.state == "dead" and task.result is None
    assert task.error is not None and task.error.startswith(error), task.error
    assert finished(queue, queue.enqueue({})).state == "done"  # the worker runs on


CLI_DUPLICATES = {
    "enqueue": ("enqueue", "jobs", "--payload", '{"a":1,"a":2}'),
    "nested": ("enqueue", "jobs", "--payload", '{"a":{"b":1,"b":1}}'),
    "schedule": ("schedule", "add", "jobs", "n", "0 3 * * *", "--payload", '{"a":1,"a":2}'),
}


@pytest.mark.parametrize("args", CLI_DUPLICATES.values(), ids=CLI_DUPLICATES.keys())
def test_the_cli_refuses_json_naming_a_key_twice_with_one_line_and_stores_nothing(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path, args: tuple[str, ...]
) -> None:
    result = taskfleet(*args, "--redis-url", redis_url, env=env_for(redis_url, tmp_path))
    assert result.returncode == 2, result.stderr
    line = assert_one_line_error(result.stderr)
    assert "twice in one object; each key may appear once" in line, line
    assert redis_client.dbsize() == 0


def test_the_cli_refuses_a_flow_file_naming_a_key_twice(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    source = tmp_path / "flow.json"
    source.write_text('{"chain": [{"payload": {}, "payload": {"x": 1}}]}')
    result = taskfleet(
        "flow", "jobs", str(source), "--redis-url", redis_url, env=env_for(redis_url, tmp_path)
    )
    assert result.returncode == 2, result.stderr
    assert 'the flow has the key "payload" twice' in assert_one_line_error(result.stderr)
    assert redis_client.dbsize() == 0


def test_the_cli_refuses_an_integer_past_the_rule_naming_its_path(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    text = json.dumps({"items": [1, {"id": 2**63 + 1}]})
    result = taskfleet(
        "enqueue", "jobs", "--payload", text, "--redis-url", redis_url,
        env=env_for(redis_url, tmp_path),
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "payload.items[1].id: integer 9223372036854775809" in assert_one_line_error(
        result.stderr
    )
    assert redis_client.dbsize() == 0
