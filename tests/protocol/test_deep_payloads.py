"""A payload nested deeper than every reader can handle is refused at the door (one line,
nothing stored); one written past the door (a foreign producer, a hand edit) is shown by
every reader without a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from taskfleet.producer.queue import Queue
from taskfleet.protocol import bounds
from taskfleet.protocol.errors import InvalidPayload

from tests.cli_output import assert_one_line_error
from tests.workers.harness import env_for, taskfleet


def nested(depth: int) -> dict[str, object]:
    value: object = []
    for _ in range(depth - 2):
        value = [value]
    return {"a": value}


def test_a_payload_nested_past_the_bound_is_refused_and_nothing_is_stored(
    queue: Queue, redis_client: redis.Redis
) -> None:
    with pytest.raises(InvalidPayload, match="nested more than 200"):
        queue.enqueue(nested(990))
    with pytest.raises(InvalidPayload, match="nested more than 200"):
        queue.enqueue(nested(bounds.MAX_PAYLOAD_DEPTH + 1))
    assert redis_client.dbsize() == 0
    # at the bound, and brackets inside strings, are fine
    queue.enqueue(nested(bounds.MAX_PAYLOAD_DEPTH))
    queue.enqueue({"text": "[" * 1000 + '"\\' + "{" * 1000})


def test_the_cli_refuses_a_payload_nested_past_the_bound_with_one_line(
    redis_url: str, redis_client: redis.Redis, tmp_path: Path
) -> None:
    text = '{"a":' + "[" * 988 + "]" * 988 + "}"
    result = taskfleet(
        "enqueue", "jobs", "--payload", text, "--redis-url", redis_url,
        env=env_for(redis_url, tmp_path),
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "nested" in assert_one_line_error(result.stderr)
    assert redis_client.dbsize() == 0


DEEP = {
    f"{shape}-{depth}": text
    for depth in (400, 700, 990, 5000, 200_000)
    for shape, text in (
        ("list", "[" * depth + "]" * depth),
        ("object", '{"a":' * depth + "1" + "}" * depth),
    )
}


@pytest.mark.parametrize("deep", DEEP.values(), ids=DEEP.keys())
def test_readers_show_a_stored_payload_nested_too_deep_without_a_traceback(
    queue: Queue, redis_client: redis.Redis, redis_url: str, tmp_path: Path, deep: str
) -> None:
    task_id = queue.enqueue({"x": 1})
    redis_client.hset(queue.keys.task(task_id), mapping={"payload": deep, "result": deep})
    env = env_for(redis_url, tmp_path)
    for args in (
        ["task", "jobs", task_id],
        ["task", "jobs", task_id, "--json"],
        ["ls", "jobs", "pending"],
        ["ls", "jobs", "pending", "--json"],
    ):
        result = taskfleet(*args, "--redis-url", redis_url, env=env)
        assert result.returncode == 0, (args, result.stderr[-2000:])
        assert "Traceback" not in result.stderr, args
        assert task_id in result.stdout, args
