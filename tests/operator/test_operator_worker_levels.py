"""The operator shows a queue's live workers of an older level, against a real
kube-apiserver and a real redis-server: WorkersCurrent False (reason OlderWorkers) naming
the worker, one Warning event, and True again with a note once the worker is current.

No kubelet runs in this tier: the worker pod is created by hand (it stays Pending) and
its record is written into the queue's ``workers`` hash as each release's worker writes it,
or, in the last test, by the previous release's own worker process running under the pod's
name (tests/fixtures_previous.py).
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from taskfleet.producer.queue import Queue
from taskfleet.protocol.calls import run
from taskfleet.protocol.records import WORKER_LEVEL

from tests.fixtures_cluster import Cluster
from tests.fixtures_operator import APISERVER_INTERVAL_S, APISERVER_TIMEOUT_S, base_spec
from tests.fixtures_previous import handler_path
from tests.polling import wait_for
from tests.workers.harness import WorkerProcess

pytestmark = pytest.mark.apiserver
#: A lease TTL no test outlives: the hand-written record stays live throughout.
LONG_LEASE = {"intervalSeconds": 1, "ttlSeconds": 60}


def write_record(queue: Queue, pod: str, level: int | None) -> None:
    """``pod``'s worker record, beating now; ``level`` None: as a 0.1.x worker writes it."""
    now_ms = run(queue.client, queue.reads.clock())
    record: dict[str, Any] = {
        "incarnation": f"{pod}-inc",
        "heartbeat_ms": now_ms,
        "inflight": 0,
        "concurrency": 1,
        "draining": False,
    }
    if level is not None:
        record["level"] = level
    queue.client.hset(queue.keys.workers, pod, json.dumps(record))


def test_a_live_0_1_worker_turns_workers_current_false_with_one_warning_until_upgraded(
    cluster: Cluster, redis_url: str, queue_of: Callable[[str, str], Queue]
) -> None:
    name, pod = "levels", "levels-old-0"
    # A Deployment with no pods (no kubelet): the fleet never settles, it is swept often.
    cluster.create_tq(name, base_spec(redis_url, heartbeat=LONG_LEASE, budget={"day": 50}))
    queue = queue_of(cluster.namespace, name)

    def shown(status: str, reason: str) -> Callable[[], dict[str, Any] | None]:
        def check() -> dict[str, Any] | None:
            found = cluster.condition(name, "WorkersCurrent")
            return (
                found if found and (found["status"], found["reason"]) == (status, reason) else None
            )

        check.__doc__ = f"WorkersCurrent={status} ({reason})"
        return check

    wait_for(shown("True", "Current"), timeout=APISERVER_TIMEOUT_S, interval=APISERVER_INTERVAL_S)

    cluster.create_pod(pod, name)  # a worker pod the operator knows: not an orphan
    write_record(queue, pod, level=None)  # a 0.1.x worker's record: no "level"

    older = wait_for(
        shown("False", "OlderWorkers"), timeout=APISERVER_TIMEOUT_S, interval=APISERVER_INTERVAL_S
    )
    assert older["message"].startswith(f"worker {pod} runs taskfleet 0.1.x (level 1): ")
    assert "flows, groups, claim pauses and spend budgets" in older["message"]
    assert older["message"].endswith("; this TaskQueue's spec.budget is not kept by it")
    # the event is posted after the condition's patch: wait for it too
    wait_for(
        lambda: cluster.event_messages("OlderWorkers"),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="the OlderWorkers event",
    )

    write_record(queue, pod, level=WORKER_LEVEL)  # the pod's worker, upgraded

    wait_for(shown("True", "Current"), timeout=APISERVER_TIMEOUT_S, interval=APISERVER_INTERVAL_S)
    wait_for(
        lambda: cluster.event_messages("WorkersCurrent"),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what="the WorkersCurrent event",
    )
    # One warning for the whole spell, however many sweeps saw the older worker.
    assert cluster.event_messages("OlderWorkers") == [older["message"]]


def test_a_real_0_1_0_worker_turns_workers_current_false_until_it_drains(
    cluster: Cluster,
    redis_url: str,
    queue_of: Callable[[str, str], Queue],
    previous_taskfleet: Path,
    tmp_path: Path,
) -> None:
    name, pod = "levels-real", "levels-real-0"
    cluster.create_tq(name, base_spec(redis_url, heartbeat=LONG_LEASE))
    queue = queue_of(cluster.namespace, name)

    def shown(status: str, reason: str) -> dict[str, Any] | None:
        found = cluster.condition(name, "WorkersCurrent")
        return found if found and (found["status"], found["reason"]) == (status, reason) else None

    def wait(status: str, reason: str) -> dict[str, Any]:
        return wait_for(
            lambda: shown(status, reason),
            timeout=APISERVER_TIMEOUT_S,
            interval=APISERVER_INTERVAL_S,
            what=f"WorkersCurrent={status} ({reason})",
        )

    wait("True", "Current")
    cluster.create_pod(pod, name)
    # the pod's worker, as its container would run it (no kubelet: a process here)
    worker = WorkerProcess(
        redis_url=redis_url,
        queue=queue.name,
        handler="oldtasks:double",
        workdir=tmp_path,
        pod=pod,
        program=[str(previous_taskfleet)],
        args=["--heartbeat-interval", "1"],  # the queue's lease TTL: the operator's config
        env=handler_path(tmp_path / "handlers"),
    ).start()
    try:
        older = wait("False", "OlderWorkers")
        assert older["message"].startswith(f"worker {pod} runs taskfleet 0.1.x (level 1): ")
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0, worker.log_text()
        wait("True", "Current")
    finally:
        worker.kill()
