"""Named tasks: a producer names the handler (``task="resize"``), a worker serves several
names, an unknown name goes dead saying so, and a task without a name stays as it was."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from taskfleet import InvalidArgument, Queue, TaskExists, TaskState
from taskfleet.producer.encoding import encode_task
from taskfleet.protocol.keys import QueueKeys
from taskfleet.protocol.tasks import Task
from taskfleet.worker.claimed import ClaimedTask, Served, parse_claim_records
from taskfleet.worker.handlers import HandlerLoadError
from taskfleet.worker.named import load_handlers

from tests.polling import wait_for
from tests.workers.harness import FAST, WORKER_INTERVAL_S, Fleet, env_for, taskfleet

H = "tests.workers.handlers"
KEYS = QueueKeys("jobs")


@pytest.fixture
def queue(redis_url: str) -> Iterator[Queue]:
    with Queue("jobs", redis_url=redis_url) as queue:
        yield queue


def finished(queue: Queue, task_id: str) -> Task:
    def check() -> Task | None:
        task = queue.get(task_id)
        return task if task is not None and task.finished else None

    return wait_for(check, timeout=15, interval=WORKER_INTERVAL_S, what=f"{task_id} to finish")


# -- producing ---------------------------------------------------------------------------


def test_a_name_is_stored_on_the_task_and_a_task_without_one_stores_no_name_field(
    queue: Queue, redis_client: redis.Redis
) -> None:
    named = queue.enqueue({"w": 1}, task="resize")
    plain = queue.enqueue({"w": 1})
    [many] = queue.enqueue_many([{"payload": {}, "task": "media/crop.v2"}])
    assert queue.get(named).name == "resize"  # type: ignore[union-attr]
    assert queue.get(many).name == "media/crop.v2"  # type: ignore[union-attr]
    assert queue.get(plain).name is None  # type: ignore[union-attr]
    assert queue.get(named).payload == {"w": 1}  # type: ignore[union-attr]
    # stored ahead of the payload; a task without a name is stored as it always was
    assert redis_client.hget(KEYS.task(named), "payload") == b'\x01resize\x01{"w":1}'
    assert redis_client.hget(KEYS.task(plain), "payload") == b'{"w":1}'


@pytest.mark.parametrize("bad", ["", "-x", "a b", "a=b", "x" * 101, "\x01", 5])
def test_a_name_that_is_no_task_name_is_refused_before_anything_is_sent(bad: object) -> None:
    with pytest.raises(InvalidArgument, match=r"task name .* must be 1-100 letters"):
        encode_task({}, task=bad)  # type: ignore[arg-type]


def test_the_same_id_under_another_name_is_a_conflict_and_the_same_name_is_idempotent(
    queue: Queue,
) -> None:
    queue.enqueue({}, task_id="t", task="resize")
    assert queue.enqueue_result({}, task_id="t", task="resize").created is False
    with pytest.raises(TaskExists, match="name"):
        queue.enqueue({}, task_id="t", task="crop")
    with pytest.raises(TaskExists, match="name"):
        queue.enqueue({}, task_id="t")


def test_the_cli_enqueues_a_named_task(redis_url: str, queue: Queue, tmp_path: Path) -> None:
    env = env_for(redis_url, tmp_path)
    done = taskfleet("enqueue", "jobs", "--task", "resize", "--redis-url", redis_url, env=env)
    assert done.returncode == 0, done.stderr
    assert queue.get(done.stdout.strip()).name == "resize"  # type: ignore[union-attr]
    bad = taskfleet("enqueue", "jobs", "--task", "no good", "--redis-url", redis_url, env=env)
    assert bad.returncode == 2
    assert "task name 'no good' must be" in bad.stderr


# -- the claim record ----------------------------------------------------------------------


def test_a_task_without_a_name_makes_a_claim_record_with_no_name_in_it(queue: Queue) -> None:
    queue.enqueue({"n": 1}, task_id="plain")
    [record] = _claim_records(queue)
    head, _, payload = record.partition(b"\0\0")  # the tagged fields, then the payload
    assert b"\x01" not in head[2:] and payload == b'{"n":1}'


def _claim_records(queue: Queue) -> list[bytes]:
    """What a claim hands a worker, as the claim script makes it."""
    raw = queue._scripts.run(queue.ops.claim("pod-x", "1", 10, "tok", 100))
    return [r if isinstance(r, bytes) else r.encode() for r in raw.records]


def test_a_named_record_carries_its_name_where_no_older_worker_can_mistake_it(
    queue: Queue,
) -> None:
    queue.enqueue({"n": 1}, task_id="named", task="resize")
    [record] = _claim_records(queue)
    payload_field = record.partition(b"\0\0")[2]  # the tagged fields end at an empty name
    assert payload_field == b'\x01resize\x01{"n":1}'
    # what a worker that knows no names does with it: not JSON, so a bad payload (dead),
    # never a run with its one handler
    with pytest.raises(ValueError):
        json.loads(payload_field)
    tasks, bad = parse_claim_records([record])
    assert [(t.id, t.name, t.payload) for t in tasks] == [("named", "resize", {"n": 1})]
    assert bad == []


def test_a_worker_refuses_the_names_it_does_not_serve_and_says_what_it_serves() -> None:
    def rec(task_id: bytes, name: bytes | None) -> bytes:
        payload = b"{}" if name is None else b"\x01" + name + b"\x01{}"
        return b"\0".join([task_id, b"tok", b"1", b"3", b"", b"0", b"0", b"1", b"", payload])

    records = [rec(b"a", b"resize"), rec(b"b", b"crop"), rec(b"c", None)]
    tasks, bad = parse_claim_records(records, Served(frozenset({"resize"}), unnamed=False))
    assert [t.id for t in tasks] == ["a"]
    assert bad == [
        (
            "b",
            "tok",
            "no handler for task name 'crop'; this worker serves 'resize'",
            "unknown task",
        ),
        ("c", "tok", "the task has no name and this worker serves only 'resize'", "unknown task"),
    ]
    tasks, bad = parse_claim_records(records, Served(frozenset(), unnamed=True))
    assert [t.id for t in tasks] == ["c"]
    assert bad[0][2] == (
        "no handler for task name 'resize'; this worker serves no named tasks and tasks "
        "without a name"
    )
    assert isinstance(tasks[0], ClaimedTask)


# -- loading handlers ------------------------------------------------------------------------


def test_handlers_load_as_a_default_named_ones_and_a_registry() -> None:
    handlers = load_handlers([f"{H}:sleep", f"resize={H}:resize", f"c={H}:crop"])
    assert handlers.default is not None and handlers.default.ref == f"{H}:sleep"
    assert sorted(handlers.named) == ["c", "resize"]
    assert handlers.any_async  # crop is async: no prefetch for this worker
    registry = load_handlers([f"{H}:MEDIA"])
    assert registry.default is None
    assert {n: h.is_async for n, h in registry.named.items()} == {"resize": False, "crop": True}
    assert registry.served == Served(frozenset({"resize", "crop"}), unnamed=False)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([f"{H}:sleep", f"{H}:gate"], "two handlers for tasks without a name"),
        ([f"a={H}:sleep", f"a={H}:gate"], "task name 'a' has two handlers"),
        ([f"a={H}:sleep", f"{H}:MEDIA", f"crop={H}:crop"], "task name 'crop' has two handlers"),
        ([f"no good={H}:sleep"], "task name 'no good' must be"),
        ([f"a={H}:MEDIA"], "is a dict, not callable"),
        ([f"a={H}:nothing_here"], "has no attribute 'nothing_here'"),
        ([f"{H}:EVENTS"], "is a str, not callable"),
        ([], "no handler given"),
    ],
)
def test_handlers_that_cannot_serve_fail_the_start_with_one_line(
    values: list[str], message: str
) -> None:
    with pytest.raises(HandlerLoadError, match=message):
        load_handlers(values)


# -- real workers ----------------------------------------------------------------------------


def test_one_worker_serves_several_names_and_an_unknown_one_goes_dead_naming_it(
    fleet: Fleet, queue: Queue
) -> None:
    worker = fleet.add(f"resize={H}:resize", args=[*FAST, "--handler", f"crop={H}:crop"])
    worker.start()
    resize = queue.enqueue({"w": 640}, task="resize")
    crop = queue.enqueue({"h": 480}, task="crop")
    unknown = queue.enqueue({}, task="rotate")
    unnamed = queue.enqueue({})
    assert finished(queue, resize).result == {
        "ran": "resize",
        "name": "resize",
        "payload": {"w": 640},
    }
    assert finished(queue, crop).result == {"ran": "crop", "name": "crop", "payload": {"h": 480}}
    for task_id, error in [
        (unknown, "no handler for task name 'rotate'; this worker serves 'crop', 'resize'"),
        (unnamed, "the task has no name and this worker serves only 'crop', 'resize'"),
    ]:
        dead = finished(queue, task_id)
        assert (dead.state, dead.reason, dead.error) == (TaskState.DEAD, "unknown task", error)
        assert dead.attempts == 1  # claimed once, never retried: no worker version differs
    # it served on: a task after the unknown ones runs
    assert finished(queue, queue.enqueue({}, task="resize")).state is TaskState.DONE
    assert worker.alive()


def test_a_registry_module_serves_its_names_and_a_default_handler_serves_the_rest(
    fleet: Fleet, queue: Queue
) -> None:
    fleet.add(f"{H}:MEDIA", args=[*FAST, "--handler", f"{H}:sleep"]).start()
    crop = queue.enqueue({}, task="crop")
    plain = queue.enqueue({"seconds": 0})
    assert finished(queue, crop).result["ran"] == "crop"
    assert finished(queue, plain).result == {"slept": 0}


def test_a_named_task_on_a_worker_with_one_default_handler_goes_dead_and_the_rest_runs(
    fleet: Fleet, queue: Queue
) -> None:
    fleet.add(f"{H}:sleep").start()
    named = queue.enqueue({}, task="resize")
    plain = queue.enqueue({"seconds": 0})
    assert finished(queue, plain).state is TaskState.DONE
    dead = finished(queue, named)
    assert (dead.state, dead.reason) == (TaskState.DEAD, "unknown task")
    assert "'resize'" in (dead.error or "")


def test_a_worker_refuses_to_start_with_handlers_it_cannot_serve(
    fleet: Fleet, queue: Queue
) -> None:
    worker = fleet.add(f"{H}:sleep", args=[*FAST, "--handler", f"{H}:gate"]).start()
    assert worker.wait() == 2
    assert "two handlers for tasks without a name" in worker.log_text()
