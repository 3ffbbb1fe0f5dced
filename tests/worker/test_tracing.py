"""Traces: the enqueue's context travels with the task, and the handler's span is its child.

Both sides run as real processes with OpenTelemetry's SDK and its in-memory exporter: a
producer process (it opens a request span and enqueues inside it) and a worker process
whose handler module configures the provider. Neither sets a provider in the test process
itself (a global provider would turn tracing on for every later test).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from taskfleet.producer.queue import Queue
from taskfleet.protocol.keys import QueueKeys

from tests.needs import need_module
from tests.workers.harness import FAST, REPO, WORKER_TIMEOUT_S, Fleet

need_module("opentelemetry.sdk")

H = "tests.workers.traced"

#: The producer's side, in its own process: a request span, enqueues inside it, and the
#: spans the in-memory exporter holds afterwards.
PRODUCER = """
import asyncio, json, sys
from opentelemetry import trace
from taskfleet import AsyncQueue, Queue
from tests.workers.traced import EXPORTER as exporter, described  # sets the provider

queue = Queue(sys.argv[2], redis_url=sys.argv[1])
with trace.get_tracer("app").start_as_current_span("request"):
    one = queue.enqueue({"n": 1})
    many = queue.enqueue_many([{"payload": {"n": 2}}, {"payload": {"n": 3}}])
    failing = queue.enqueue({"fail": True}, max_attempts=2)

async def from_asyncio():
    async with AsyncQueue(sys.argv[2], redis_url=sys.argv[1]) as aq:
        return await aq.enqueue({"n": 4})

with trace.get_tracer("app").start_as_current_span("async request"):
    from_async = asyncio.run(from_asyncio())
print(json.dumps({
    "one": one, "many": many, "failing": failing, "async": from_async,
    "spans": [described(span) for span in exporter.get_finished_spans()],
}))
"""


#: A provider configured late: after the Queue was created and had enqueued untraced. The
#: producer keeps "no provider" for up to RECHECK_S (protocol/tracing.py), so the script
#: enqueues until the check says traced (a deadline, never a sleep of the window's length).
LATE_PRODUCER = """
import json, sys, time
from taskfleet import Queue
from taskfleet.protocol import tracing

queue = Queue(sys.argv[2], redis_url=sys.argv[1])
before = queue.enqueue({"n": 0})
from tests.workers.traced import EXPORTER as exporter  # sets the provider now
deadline = time.monotonic() + 60
while not tracing.configured() and time.monotonic() < deadline:
    queue.enqueue({"n": 1})
    time.sleep(0.05)
after = queue.enqueue({"n": 2})
queue.close()
sends = [s.attributes.get("messaging.message.id") for s in exporter.get_finished_spans()]
print(json.dumps({"before": before, "after": after, "sends": sends}))
"""


@pytest.fixture
def queue(redis_url: str) -> Iterator[Queue]:
    with Queue("jobs", redis_url=redis_url) as q:
        yield q


def _produce(redis_url: str, script: str = PRODUCER) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", script, redis_url, "jobs"],
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    produced: dict[str, Any] = json.loads(done.stdout)
    return produced


def _by_name(spans: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [s for s in spans if s["name"] == name]


@pytest.mark.parametrize("handler", ["handle", "handle_async"])
def test_a_handler_span_is_the_child_of_the_enqueue_span_in_the_callers_trace(
    fleet: Fleet, queue: Queue, redis_url: str, handler: str
) -> None:
    produced = _produce(redis_url)
    [request] = _by_name(produced["spans"], "request")
    sends = _by_name(produced["spans"], "send jobs")
    assert len(sends) == 4  # one per enqueue call: single, batch, single, AsyncQueue's
    [async_request] = _by_name(produced["spans"], "async request")
    async_send = sends.pop()
    assert async_send["parent_span_id"] == async_request["span_id"]
    assert async_send["attributes"]["messaging.message.id"] == produced["async"]
    for send in sends:  # the three of Queue
        assert send["kind"] == "PRODUCER"
        assert send["trace_id"] == request["trace_id"]
        assert send["parent_span_id"] == request["span_id"]
        assert send["attributes"]["messaging.destination.name"] == "jobs"
    single, batch, failing_send = sends
    assert single["attributes"]["messaging.message.id"] == produced["one"]
    assert batch["attributes"]["messaging.batch.message_count"] == 2

    worker = fleet.add(f"{H}:{handler}", args=FAST).start()
    ids = [produced["one"], *produced["many"], produced["failing"], produced["async"]]
    tasks = queue.wait(ids, timeout=WORKER_TIMEOUT_S)

    expected_parent = {
        produced["one"]: single["span_id"],
        produced["many"][0]: batch["span_id"],
        produced["many"][1]: batch["span_id"],
        produced["async"]: async_send["span_id"],
    }
    for task_id, parent in expected_parent.items():
        span = tasks[task_id].result
        assert span["name"] == "process jobs" and span["kind"] == "CONSUMER"
        trace_of = async_request if task_id == produced["async"] else request
        assert span["trace_id"] == trace_of["trace_id"]
        assert span["parent_span_id"] == parent
        assert span["attributes"]["messaging.message.id"] == task_id
        assert span["attributes"]["taskfleet.task.attempt"] == 1

    # Each failed attempt is a span of its own, an error with the exception recorded.
    assert tasks[produced["failing"]].state == "dead"
    report = queue.enqueue({"report": True})
    finished = queue.wait([report], timeout=WORKER_TIMEOUT_S)[report].result
    failed = [
        s for s in finished if s["attributes"].get("messaging.message.id") == produced["failing"]
    ]
    assert sorted(s["attributes"]["taskfleet.task.attempt"] for s in failed) == [1, 2]
    for span in failed:
        assert span["status"] == "ERROR"
        assert span["exception_types"] == ["ValueError"]
        assert span["trace_id"] == request["trace_id"]
        assert span["parent_span_id"] == failing_send["span_id"]
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_an_untraced_producer_stores_no_trace_and_its_task_runs_in_a_root_span(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    task_id = queue.enqueue({"n": 1})  # no provider in this process: tracing is off
    assert redis_client.hget(QueueKeys("jobs").task(task_id), "trace") is None
    worker = fleet.add(f"{H}:handle", args=FAST).start()
    span = queue.wait([task_id], timeout=WORKER_TIMEOUT_S)[task_id].result
    assert span["parent_span_id"] is None
    assert span["attributes"]["messaging.message.id"] == task_id
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


@pytest.mark.parametrize(
    "stored",
    [b"not json", b'{"traceparent": 5}', b"[1, 2]", b'{"traceparent": "00-zz-zz-01"}', b"x" * 5000],
)
def test_an_unreadable_trace_never_stops_the_task(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis, stored: bytes
) -> None:
    """A foreign writer's trace field: the task runs, in a span of a trace of its own."""
    task_id = queue.enqueue({"n": 1})
    redis_client.hset(QueueKeys("jobs").task(task_id), "trace", stored)
    worker = fleet.add(f"{H}:handle", args=FAST).start()
    task = queue.wait([task_id], timeout=WORKER_TIMEOUT_S)[task_id]
    assert task.state == "done", task
    assert task.result["parent_span_id"] is None
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_a_worker_without_a_provider_runs_traced_tasks_as_before(
    fleet: Fleet, queue: Queue, redis_url: str
) -> None:
    produced = _produce(redis_url)
    worker = fleet.add("tests.workers.handlers:by_payload", args=FAST).start()
    ids = [produced["one"], *produced["many"]]
    tasks = queue.wait(ids, timeout=WORKER_TIMEOUT_S)
    assert {t.state for t in tasks.values()} == {"done"}
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0


def test_a_provider_configured_after_the_queue_enqueued_is_seen_by_its_later_enqueues(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """The producer's check is cached (protocol/tracing.py): a provider set once a Queue
    exists and has enqueued untraced is still seen, and every enqueue after is traced."""
    produced = _produce(redis_url, LATE_PRODUCER)
    keys = QueueKeys("jobs")
    assert redis_client.hget(keys.task(produced["before"]), "trace") is None
    assert json.loads(redis_client.hget(keys.task(produced["after"]), "trace"))["traceparent"]
    assert produced["sends"][-1] == produced["after"]
