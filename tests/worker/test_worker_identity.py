"""A worker's name: unique by default, a live worker's name refused, a takeover noticed.

Real worker processes on one host (and, where root can make them, in PID namespaces of
their own, as containers have) against the test's redis-server.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket

import pytest
import redis
from taskfleet.producer.queue import Queue
from taskfleet.protocol.errors import IdentityTaken
from taskfleet.protocol.tasks import TaskState

from tests.fixtures_redis import MakeBroker
from tests.needs import unless
from tests.polling import wait_for
from tests.workers.harness import WORKER_INTERVAL_S, WORKER_TIMEOUT_S, Fleet, WorkerProcess

SLEEP = "tests.workers.handlers:sleep"
GATE = "tests.workers.handlers:gate"
#: Heartbeats slow enough that a lease (30 s) can't expire within a test: whatever is
#: taken back is taken back by a registration, not by lease expiry.
SLOW_BEATS = ["--heartbeat-interval", "5", "--lease-ttl", "30"]
FAST_BEATS = ["--heartbeat-interval", "0.2", "--lease-ttl", "30"]
UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]


def events(client: redis.Redis, what: str) -> list[str]:
    return [e.decode() for e in client.lrange("test:events", 0, -1) if e.startswith(what.encode())]


def another(fleet: Fleet, handler: str, *, pod: str, label: str, **kwargs: object) -> WorkerProcess:
    """A worker under ``pod`` with its own log file and runtime directory (``label``)."""
    worker = fleet.add(handler, pod=pod, **kwargs)  # type: ignore[arg-type]
    worker.log_path = fleet.workdir / f"worker-{label}.log"
    worker.runtime_dir = fleet.workdir / f"runtime-{label}"
    worker.env["TASKFLEET_RUNTIME_DIR"] = str(worker.runtime_dir)
    return worker


def record(client: redis.Redis, pod: str) -> dict[str, object]:
    raw = client.hget("tf:{jobs}:workers", pod)
    assert raw is not None, f"no worker record for {pod}"
    data: dict[str, object] = json.loads(raw)
    return data


def test_workers_started_without_a_name_on_one_host_get_their_own_and_take_no_task_from_each_other(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    held = queue.enqueue({"seconds": 1.5})
    first = fleet.add(SLEEP, pod="unnamed-1", args=SLOW_BEATS)
    del first.env["TASKFLEET_POD_NAME"]
    first.start()
    wait_for(
        lambda: events(redis_client, "start"),
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what=fleet.logs,
    )
    second = fleet.add(SLEEP, pod="unnamed-2", args=SLOW_BEATS)
    del second.env["TASKFLEET_POD_NAME"]
    second.start()
    second.wait_event("worker_started")

    names = {w.pod: w.incarnation for w in queue.workers()}
    assert len(names) == 2, names
    host = re.sub(r"[^a-z0-9.-]+", "-", socket.gethostname().lower()).strip(".-")[:40]
    for worker in (first, second):
        pattern = rf"{re.escape(host)}-{worker.pid}-[0-9a-f]{{6}}"
        [name] = [n for n in names if re.fullmatch(pattern, n)]
        worker.wait_event("worker_started", pod=name)
    assert not second.has_event("earlier_incarnation_requeued")
    wait_for(
        lambda: queue.get(held).state is TaskState.DONE,  # type: ignore[union-attr]
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
    )
    task = queue.get(held)
    assert task is not None and (task.attempts, task.lost) == (1, 0)
    assert queue.stats()["lost"] == 0


def test_a_worker_started_under_a_live_workers_name_is_refused_and_changes_nothing(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    held = queue.enqueue({})
    first = another(fleet, GATE, pod="pod-a", label="first", args=SLOW_BEATS).start()
    wait_for(
        lambda: events(redis_client, "start"),
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what=fleet.logs,
    )
    before = record(redis_client, "pod-a")

    second = another(fleet, GATE, pod="pod-a", label="second", args=SLOW_BEATS).start()
    assert second.wait() == 2
    lines = second.log_text().strip().splitlines()
    assert len(lines) == 1, lines
    assert re.fullmatch(
        rf'taskfleet: error: worker name "pod-a" is in use by a live worker \(pid {first.pid} '
        rf"on host {re.escape(socket.gethostname())}, heartbeat \d+\.\d s ago\); give each "
        r"worker its own --pod",
        lines[0],
    ), lines[0]

    assert first.alive()
    assert record(redis_client, "pod-a")["incarnation"] == before["incarnation"]
    task = queue.get(held)
    assert task is not None and task.state is TaskState.RUNNING and task.lost == 0
    redis_client.rpush("test:gate", "open")
    wait_for(
        lambda: queue.get(held).state is TaskState.DONE,  # type: ignore[union-attr]
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
    )
    assert queue.stats()["lost"] == 0


def test_a_worker_restarted_after_a_crash_takes_over_its_name_and_tasks_at_once(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    held = queue.enqueue({})
    first = another(fleet, GATE, pod="pod-a", label="first", args=SLOW_BEATS).start()
    wait_for(
        lambda: events(redis_client, "start"),
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what=fleet.logs,
    )
    first.kill()  # SIGKILL: its record's heartbeat is fresh, its lease has 30 s to go

    second = another(fleet, GATE, pod="pod-a", label="second", args=SLOW_BEATS).start()
    second.wait_event("earlier_incarnation_requeued", tasks=1)
    wait_for(
        lambda: len(events(redis_client, "start")) == 2,
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what=fleet.logs,
    )
    redis_client.rpush("test:gate", "open")
    wait_for(
        lambda: queue.get(held).state is TaskState.DONE,  # type: ignore[union-attr]
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
    )
    task = queue.get(held)
    assert task is not None and task.lost == 1 and task.pod == "pod-a"


@unless(
    os.geteuid() == 0 and shutil.which("unshare"),
    reason="needs root and unshare(1) for a PID namespace",
)
def test_a_container_restarted_in_a_new_pid_namespace_takes_over_its_name_at_once(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis
) -> None:
    """Like a Kubernetes container restart: new PID namespace, same network namespace,
    the crashed incarnation's heartbeat still fresh."""
    held = queue.enqueue({})
    first = another(fleet, GATE, pod="pod-a", label="first", args=SLOW_BEATS, prefix=UNSHARE)
    first.start()
    wait_for(
        lambda: events(redis_client, "start"),
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what=fleet.logs,
    )
    first.kill()  # unshare --kill-child: the namespace dies with it

    second = another(fleet, GATE, pod="pod-a", label="second", args=SLOW_BEATS, prefix=UNSHARE)
    second.start()
    second.wait_event("earlier_incarnation_requeued", tasks=1)
    redis_client.rpush("test:gate", "open")
    wait_for(
        lambda: queue.get(held).state is TaskState.DONE,  # type: ignore[union-attr]
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
    )


def test_a_worker_whose_name_is_taken_over_while_it_runs_stops_and_gives_back_nothing_taken(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis, make_broker: MakeBroker
) -> None:
    held = queue.enqueue({})
    worker = another(fleet, GATE, pod="pod-a", label="first", args=FAST_BEATS).start()
    wait_for(
        lambda: events(redis_client, "start"),
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what=fleet.logs,
    )

    # Another process registers under the same name (from a host it can't be judged on).
    newcomer = make_broker("jobs", pod="pod-a", incarnation="newcomer")
    assert newcomer.register(1) == 1  # takes back the task the worker held

    assert worker.wait() == 2
    [taken] = [e for e in worker.events() if e["event"] == "identity_taken"]
    assert taken["level"] == "error" and taken["pod"] == "pod-a"
    assert taken["by"] == "incarnation newcomer"
    assert not worker.has_event("worker_failed")
    assert not worker.has_event("task_released")
    # The newcomer's record stands; the task it took back waits for it, released by nobody.
    assert record(redis_client, "pod-a")["incarnation"] == "newcomer"
    task = queue.get(held)
    assert task is not None and task.state is TaskState.PENDING and task.lost == 1
    stats = queue.stats()
    assert (stats["released"], stats["stale"]) == (0, 0)


def test_a_replaced_incarnation_gets_no_task_from_a_claim(
    queue: Queue, make_broker: MakeBroker
) -> None:
    """A process frozen while its name was taken over, then resumed, claims: refused."""
    ghost = make_broker("jobs", pod="pod-a", incarnation="ghost")
    assert ghost.register(1) == 0
    newcomer = make_broker("jobs", pod="pod-a", incarnation="newcomer")
    assert newcomer.register(1) == 0
    held = queue.enqueue({})

    with pytest.raises(IdentityTaken) as raised:
        ghost.claim(1, idle_ms=60_000)
    assert raised.value.holder == "incarnation newcomer"
    with pytest.raises(IdentityTaken):
        ghost.complete_and_claim([], 1)
    task = queue.get(held)
    assert task is not None and task.state is TaskState.PENDING and task.attempts == 0

    [claimed] = newcomer.claim(1).tasks
    assert claimed.id == held


def test_a_worker_replaced_while_idle_stops_at_its_next_claim_and_takes_nothing(
    fleet: Fleet, queue: Queue, redis_client: redis.Redis, make_broker: MakeBroker
) -> None:
    # Beats far apart: the claim that a new task wakes it for meets the newcomer first.
    worker = another(
        fleet,
        SLEEP,
        pod="pod-a",
        label="first",
        args=["--heartbeat-interval", "20", "--lease-ttl", "60"],
    ).start()
    wait_for(
        lambda: worker.has_event("worker_started"),
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what=fleet.logs,
    )
    newcomer = make_broker("jobs", pod="pod-a", incarnation="newcomer")
    assert newcomer.register(1) == 0
    held = queue.enqueue({"seconds": 0})

    assert worker.wait() == 2
    [taken] = [e for e in worker.events() if e["event"] == "identity_taken"]
    assert taken["level"] == "error" and taken["by"] == "incarnation newcomer"
    assert not worker.has_event("worker_failed")
    assert not events(redis_client, "start")
    task = queue.get(held)
    assert task is not None and task.state is TaskState.PENDING and task.attempts == 0
