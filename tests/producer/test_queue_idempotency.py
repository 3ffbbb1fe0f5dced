"""An id names one task: the same task again is a no-op, another one under its id a conflict.

The comparison is made inside the enqueue script (atomically, against the stored hash),
never by reading from Python first.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis
from taskfleet import EnqueueResult, InvalidArgument, Queue, TaskExists, TaskfleetError
from taskfleet.producer import encoding
from taskfleet.producer.encoding import enqueue_args
from taskfleet.protocol.scripts import SyncScripts

from tests.workers.harness import env_for, taskfleet


def test_enqueueing_the_same_task_again_returns_its_id_and_changes_nothing(
    queue: Queue, redis_client: redis.Redis
) -> None:
    first = queue.enqueue_result({"a": 1, "b": [1, 2]}, task_id="order-42", priority=5, cost=3)
    before = redis_client.hgetall(queue.keys.task("order-42"))
    # the same object built in another key order is the same payload
    again = queue.enqueue_result({"b": [1, 2], "a": 1}, task_id="order-42", priority=5, cost=3)
    assert first == EnqueueResult("order-42", created=True)
    assert again == EnqueueResult("order-42", created=False)
    assert queue.enqueue({"a": 1, "b": [1, 2]}, task_id="order-42", priority=5, cost=3) == (
        "order-42"
    )
    assert redis_client.hgetall(queue.keys.task("order-42")) == before
    stats = queue.stats()
    assert (stats["pending"], stats["enqueued"]) == (1, 1)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"payload": {"v": 2}}, "payload"),
        ({"priority": 1}, "priority"),
        ({"cost": 2}, "cost"),
        ({"timeout": 5}, "timeout"),
        ({"max_attempts": 9}, "max_attempts"),
    ],
)
def test_another_payload_or_option_under_an_existing_id_raises_task_exists_and_keeps_the_task(
    queue: Queue, redis_client: redis.Redis, changes: dict[str, object], field: str
) -> None:
    original: dict[str, object] = {"payload": {"v": 1}, "max_attempts": 4, "timeout": 10}
    queue.enqueue(task_id="t", **original)  # type: ignore[arg-type]
    before = redis_client.hgetall(queue.keys.task("t"))
    with pytest.raises(TaskExists, match=f"task 't' exists with a different {field}") as info:
        queue.enqueue(task_id="t", **{**original, **changes})  # type: ignore[arg-type]
    assert isinstance(info.value, TaskfleetError)
    assert (info.value.task_id, info.value.field) == ("t", field)
    assert redis_client.hgetall(queue.keys.task("t")) == before
    assert queue.stats()["enqueued"] == 1


def test_an_enqueue_without_max_attempts_or_with_another_delay_is_the_same_task(
    queue: Queue,
) -> None:
    """Delay and deadline are relative to each call; an omitted max_attempts is the
    queue's default, whatever the first enqueue stored."""
    queue.enqueue({"v": 1}, task_id="t", max_attempts=7, delay=5, deadline=60)
    again = queue.enqueue_result({"v": 1}, task_id="t", delay=9)
    assert again.created is False


def test_enqueue_many_refuses_an_id_given_twice_before_storing_anything(
    queue: Queue, redis_client: redis.Redis
) -> None:
    with pytest.raises(InvalidArgument, match="task id 'a' appears twice in one enqueue"):
        queue.enqueue_many(
            [{"payload": {}, "task_id": "a"}, {"payload": {}}, {"payload": {}, "task_id": "a"}]
        )
    assert redis_client.dbsize() == 0


def test_the_enqueue_script_itself_refuses_an_id_twice_in_one_call(
    queue: Queue, redis_client: redis.Redis
) -> None:
    """The script's own check, for callers that bypass enqueue_many's."""
    args = enqueue_args({"payload": {}, "task_id": "a"})
    with pytest.raises(InvalidArgument, match="appears twice"):
        SyncScripts.for_client(queue.client).run(queue.ops.enqueue([args, args]))
    assert redis_client.dbsize() == 0


def test_enqueue_many_with_one_conflicting_id_stores_none_of_the_batch(queue: Queue) -> None:
    queue.enqueue({"v": 1}, task_id="taken")
    with pytest.raises(TaskExists, match="'taken'"):
        queue.enqueue_many(
            [{"payload": {"new": 1}}, {"payload": {"v": 2}, "task_id": "taken"}],
        )
    assert queue.stats()["enqueued"] == 1


def test_enqueue_many_with_the_same_task_again_returns_its_id_and_adds_the_others(
    queue: Queue,
) -> None:
    queue.enqueue({"v": 1}, task_id="known")
    ids = queue.enqueue_many([{"payload": {"v": 1}, "task_id": "known"}, {"payload": {}}])
    assert ids[0] == "known"
    assert queue.stats()["enqueued"] == 2


def test_cli_enqueue_with_an_existing_id_says_so_and_a_conflict_exits_1(
    redis_url: str, tmp_path: Path
) -> None:
    env = env_for(redis_url, tmp_path)
    first = taskfleet("enqueue", "q", "--id", "x", "--payload", '{"a": 1}', env=env)
    assert (first.returncode, first.stdout, first.stderr) == (0, "x\n", "")
    again = taskfleet("enqueue", "q", "--id", "x", "--payload", '{"a": 1}', env=env)
    assert (again.returncode, again.stdout) == (0, "x\n")
    assert again.stderr == "taskfleet: task 'x' exists (unchanged)\n"
    other = taskfleet("enqueue", "q", "--id", "x", "--payload", '{"a": 2}', env=env)
    assert (other.returncode, other.stdout) == (1, "")
    assert other.stderr.startswith("taskfleet: error: task 'x' exists with a different payload")
    assert other.stderr.count("\n") == 1
    with Queue("q", redis_url=redis_url) as queue:
        task = queue.get("x")
        assert task is not None and task.payload == {"a": 1}
        assert queue.stats()["enqueued"] == 1


def test_generated_ids_and_token_bases_are_drawn_once_each_by_threads_and_forked_children() -> None:
    """Ids come from a pool of the OS's randomness (one system call per batch): no item is
    handed out twice, to threads at once or to a forked child (which draws its own)."""
    encoding.random_hex()  # the pool holds the rest of a batch now
    with ThreadPoolExecutor(4) as pool:
        drawn = list(pool.map(lambda _: encoding.random_hex(), range(4 * encoding.RANDOM_BATCH)))
    assert len(set(drawn)) == len(drawn)
    assert all(len(x) == 32 and int(x, 16) >= 0 for x in drawn)
    assert len(encoding.token_base()) == 16
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        os.write(write, "".join(encoding.random_hex() for _ in range(3)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as child_out:
        child = child_out.read()
    os.waitpid(pid, 0)
    mine = "".join(encoding.random_hex() for _ in range(3))
    assert len(child) == 96 and child != mine, "the child drew its own, not the parent's next"
