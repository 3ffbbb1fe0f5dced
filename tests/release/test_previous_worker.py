"""A real level-1 worker (release/previous.env's LEVEL1_COMMIT, taskfleet 0.1.0) serving a
queue beside this tree's producers, CLI and operator: what it cannot serve (groups, flows,
claim pauses, spend budgets) is refused with ``OlderWorker`` naming it, nothing stored; a
plain task runs to done on it; ``taskfleet workers`` and the operator's sweep show it at
level 1; once it has drained on SIGTERM (and deregistered) the same grouped enqueue goes in.

The worker is that release's own ``taskfleet worker``, from its wheel in a venv of its own
(release/previous-library.sh: built once per commit, cached), so the record it writes is the
one 0.1.x writes, not one written by hand as tests/release/test_older_worker.py does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from taskfleet.producer.flows import chain
from taskfleet.producer.queue import Queue
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.errors import OlderWorker
from taskfleet.protocol.records import CURRENT_LEVEL
from taskfleet_operator.models import TaskQueueSpec
from taskfleet_operator.status import Event, workers_condition
from taskfleet_operator.sweeper import SweepReport, requeue_orphans

from tests.fixtures_operator import base_spec
from tests.fixtures_previous import PREVIOUS, handler_path
from tests.polling import wait_for
from tests.workers.harness import (
    FAST,
    REPO,
    WORKER_INTERVAL_S,
    WORKER_TIMEOUT_S,
    Fleet,
    WorkerProcess,
    env_for,
    taskfleet,
)

POD = "old-0"


@pytest.fixture
def older(fleet: Fleet, previous_taskfleet: Path, queue: Queue, tmp_path: Path) -> WorkerProcess:
    """A 0.1.0 worker on "jobs", registered: its handler module on its path, not this tree.
    The queue's lease TTL is 1 s, so its record is silent a second after it stops."""
    queue.configure(QueueConfig(lease_ttl_s=1))
    worker = fleet.add(
        "oldtasks:double",
        pod=POD,
        program=[str(previous_taskfleet)],
        args=["--concurrency", "2", *FAST],
        env=handler_path(tmp_path / "handlers"),
    )
    worker.start()

    def registered() -> bool:
        return any(w.pod == POD and w.alive for w in queue.workers())

    wait_for(
        registered,
        timeout=WORKER_TIMEOUT_S,
        interval=WORKER_INTERVAL_S,
        what=lambda: f"{POD}'s record in the queue's workers:\n{worker.log_text()}",
    )
    return worker


def _stored(queue: Queue, client: redis.Redis) -> list[str]:
    """Every key but the wake-up lists, which the live worker pops and registers on as it
    idles (``notify``, ``idle``, ``demand``, its ``wake:`` list) whatever a producer does."""
    churn = {queue.keys.notify, queue.keys.idle, queue.keys.demand, queue.keys.wake(POD)}
    keys = (k.decode() if isinstance(k, bytes) else k for k in client.keys("*"))
    return sorted(k for k in keys if k not in churn)


def _refused(feature: str, call: Callable[[], object]) -> None:
    with pytest.raises(OlderWorker) as caught:
        call()
    assert (caught.value.pod, caught.value.feature) == (POD, feature)
    assert str(caught.value).startswith(f"worker {POD!r} serves queue 'jobs' at level 1 ")


def test_its_features_are_refused_and_plain_tasks_run_on_it(
    older: WorkerProcess, queue: Queue, redis_client: redis.Redis
) -> None:
    [record] = queue.workers()
    assert (record.pod, record.level, record.alive) == (POD, 1, True)
    assert "level" not in json.loads(redis_client.hget(queue.keys.workers, POD) or "")

    task_id = queue.enqueue({"n": 21})
    done = queue.wait([task_id], timeout=WORKER_TIMEOUT_S)[task_id]
    assert (done.state, done.result, done.pod) == ("done", {"doubled": 42}, POD)

    before = _stored(queue, redis_client)
    _refused("groups", lambda: queue.enqueue({"n": 1}, group="tenant-1"))
    _refused("flows", lambda: queue.enqueue({"n": 1}, after=[task_id]))
    _refused("flows", lambda: queue.enqueue_flow(chain({"payload": {}}, {"payload": {}})))
    _refused("groups", lambda: queue.enqueue_many([{"payload": {}}, {"payload": {}, "group": "g"}]))
    _refused("groups", lambda: queue.schedule("nightly", "0 3 * * *", {"n": 1}, group="g"))
    _refused("claim pauses", lambda: queue.pause_claims(60))
    _refused("claim pauses", lambda: queue.pause_claims(60, group="tenant-1"))
    _refused("spend budgets", lambda: queue.set_budget(day=100))
    assert _stored(queue, redis_client) == before
    assert queue.stats()["pending"] == 0
    assert not queue.quota().paused
    assert older.alive()


def test_it_shows_at_level_1_until_it_drains_then_groups_go_in(
    older: WorkerProcess, queue: Queue, redis_url: str, tmp_path: Path
) -> None:
    env = env_for(redis_url, tmp_path / "cli")
    shown = taskfleet("workers", "jobs", env=env, check=True).stdout
    assert f"{POD}  alive" in shown and "level 1 (0.1.x)" in shown, shown
    assert f"worker {POD} runs taskfleet 0.1.x (level 1): flows, groups" in shown, shown
    refused = taskfleet("enqueue", "jobs", "--group", "tenant-1", env=env)
    assert refused.returncode == 2, refused.stderr
    assert refused.stderr.startswith(f"taskfleet: error: worker {POD!r} serves queue 'jobs'")
    assert len(refused.stderr.splitlines()) == 1, refused.stderr

    spec = TaskQueueSpec.model_validate(base_spec(redis_url, budget={"day": 50}))
    report = _swept(queue)
    assert (report.older_workers, report.older_level, report.requeued) == ([POD], 1, {})
    [condition], events = workers_condition([], spec, report, now="2026-01-01T00:00:00Z")
    assert (condition["status"], condition["reason"]) == ("False", "OlderWorkers")
    assert condition["message"].startswith(f"worker {POD} runs taskfleet 0.1.x (level 1): ")
    assert condition["message"].endswith("this TaskQueue's spec.budget is not kept by it")
    assert events == [Event("Warning", "OlderWorkers", condition["message"])]

    older.signal(signal.SIGTERM)
    assert older.wait() == 0, older.log_text()
    assert queue.workers() == []  # it deregistered on its way out

    queue.enqueue({"n": 1}, group="tenant-1")
    assert queue.stats()["pending"] == 1
    after = _swept(queue)
    assert (after.older_workers, after.older_level) == ([], CURRENT_LEVEL)
    [current], _ = workers_condition([condition], spec, after, now="2026-01-01T00:00:01Z")
    assert (current["status"], current["reason"]) == ("True", "Current")


def _swept(queue: Queue) -> SweepReport:
    """The operator's read of the worker records in one sweep, its pod live."""
    report = SweepReport()
    requeue_orphans(queue, [POD], set(), report, lambda pod: False)
    return report


def test_a_killed_one_refuses_nothing_once_its_record_is_a_lease_old(
    older: WorkerProcess, queue: Queue, redis_url: str, tmp_path: Path
) -> None:
    """SIGKILL: no drain, no deregistration; its record stays, silent after one lease TTL
    (1 s here), and refuses nothing from then on."""
    older.kill()

    def grouped() -> str | None:
        try:
            return queue.enqueue({"n": 1}, group="tenant-1")
        except OlderWorker:
            return None

    task_id = wait_for(grouped, timeout=WORKER_TIMEOUT_S, interval=WORKER_INTERVAL_S)
    [record] = queue.workers()
    assert (record.pod, record.level, record.alive) == (POD, 1, False)
    # stored (pending, or handed to the dead worker's idle registration: its lease ends that)
    stored = queue.get(task_id)
    assert stored is not None and stored.group == "tenant-1"
    shown = taskfleet("workers", "jobs", env=env_for(redis_url, tmp_path / "cli")).stdout
    assert f"{POD}  silent" in shown and "runs taskfleet 0.1.x" not in shown, shown
    assert _swept(queue).older_workers == []


def test_each_process_of_a_multi_process_one_is_an_older_worker_of_its_pod(
    fleet: Fleet, previous_taskfleet: Path, queue: Queue, redis_url: str, tmp_path: Path
) -> None:
    """``--processes 2``: two records, ``<pod>#1`` and ``<pod>#2``, both level 1; the
    refusal names one of them, the operator names their pod once."""
    older = fleet.add(
        "oldtasks:double",
        pod=POD,
        program=[str(previous_taskfleet)],
        args=["--processes", "2", *FAST],
        env=handler_path(tmp_path / "handlers"),
    ).start()
    names = [f"{POD}#1", f"{POD}#2"]

    def both() -> bool:
        return sorted(w.pod for w in queue.workers() if w.alive and w.level == 1) == names

    wait_for(both, timeout=WORKER_TIMEOUT_S, interval=WORKER_INTERVAL_S, what=older.log_text)
    with pytest.raises(OlderWorker) as caught:
        queue.enqueue({"n": 1}, group="tenant-1")
    assert caught.value.pod in names and repr(caught.value.pod) in str(caught.value)
    shown = taskfleet("workers", "jobs", env=env_for(redis_url, tmp_path / "cli")).stdout
    assert f"workers {', '.join(names)} run taskfleet 0.1.x (level 1)" in shown, shown
    assert _swept(queue).older_workers == [POD]
    older.signal(signal.SIGTERM)
    assert older.wait() == 0, older.log_text()
    assert queue.workers() == []
    queue.enqueue({"n": 1}, group="tenant-1")


def test_the_library_script_says_in_one_line_that_a_shallow_clone_lacks_the_commit(
    tmp_path: Path,
) -> None:
    clone = tmp_path / "shallow"
    subprocess.run(
        ["git", "clone", "-q", "--depth", "1", f"file://{REPO}", str(clone)],
        check=True,
        timeout=120,
        capture_output=True,
    )
    script = clone / "release/previous-library.sh"
    script.write_bytes((REPO / "release/previous-library.sh").read_bytes())  # this tree's
    env = {**os.environ, "TASKFLEET_CACHE": str(tmp_path / "cache")}
    ran = subprocess.run(
        [str(script)], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert ran.returncode == 2, ran.stderr
    assert ran.stderr == (
        f"previous-library: error: commit {PREVIOUS['LEVEL1_COMMIT']} (release/previous.env) "
        "is not in this clone: fetch the history (git fetch --unshallow)\n"
    )
    assert ran.stdout == ""


def test_chains_it_joins_late_never_stay_waiting_once_their_dependencies_ended(
    fleet: Fleet, previous_taskfleet: Path, queue: Queue, tmp_path: Path
) -> None:
    """Chains in flight when a 0.1.0 worker joins: it completes their heads without
    resolving the next steps (it knows nothing of dependants). A worker of this tree beside
    it repairs them in its housekeeping: every chain ends done, nothing left waiting."""
    chains = 6
    for i in range(chains):
        queue.enqueue_flow(chain(*({"payload": {"n": i}} for _ in range(3))))
    heads = queue.stats()["pending"]
    assert (heads, queue.stats()["waiting"]) == (chains, 2 * chains)
    handlers = handler_path(tmp_path / "handlers")
    older = fleet.add(
        "oldtasks:double",
        pod=POD,
        program=[str(previous_taskfleet)],
        args=["--concurrency", "2", *FAST],
        env=handlers,
    )
    older.start()
    wait_for(
        lambda: queue.stats()["done"] == chains,
        timeout=WORKER_TIMEOUT_S * 3,
        interval=WORKER_INTERVAL_S,
        what=lambda: f"the heads done by {POD}: {queue.stats()}\n{older.log_text()}",
    )
    # what 0.1.x leaves: the second steps wait on heads that are done, and nothing wakes them
    assert queue.stats()["waiting"] == 2 * chains
    current = fleet.add("oldtasks:double", pod="new-0", env=handlers)
    current.start()
    wait_for(
        lambda: queue.stats()["done"] == 3 * chains,
        timeout=60,
        interval=0.1,
        what=lambda: f"every chain done: {queue.stats()}\n{fleet.logs()}",
    )
    stats = queue.stats()
    assert (stats["waiting"], stats["pending"], stats["dead"]) == (0, 0, 0)
    assert stats["flow_repairs"] >= chains  # each second step at least; third ones run by it
    assert current.has_event("flow_repaired")
    assert older.alive() and current.alive()
