"""The operator's metrics: every queue read from a real Redis at scrape time, in one
scrape, and the operator's own counters on its real HTTP endpoint."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
import taskfleet
from taskfleet.producer.queue import Queue
from taskfleet.protocol.calls import run
from taskfleet.worker.broker import Broker
from taskfleet_operator.connections import Connections
from taskfleet_operator.metrics import OperatorMetrics
from taskfleet_operator.models import TaskQueueSpec
from taskfleet_operator.queuemetrics import read_queues

from tests.fixtures_redis import free_port
from tests.polling import wait_for
from tests.scrape import scrape, value


def make_spec() -> TaskQueueSpec:
    return TaskQueueSpec.model_validate(
        {"image": "w:dev", "handler": "app:handle", "redis": {"url": "redis://127.0.0.1:1/0"}}
    )


@pytest.fixture
def connections(redis_url: str) -> Iterator[Connections]:
    dead_url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    urls = {"apps": redis_url, "gone": dead_url}
    made = Connections(0.5, resolve_url=lambda namespace, _spec: urls[namespace])
    try:
        yield made
    finally:
        made.close()


def register_worker(redis_url: str, queue: str, pod: str, concurrency: int) -> None:
    async def go() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            await Broker(queue, client, pod, "inc-1").register(concurrency)
        finally:
            await client.aclose()

    asyncio.run(go())


def test_one_scrape_reads_every_queue_its_counts_workers_and_oldest_pending_age(
    connections: Connections, redis_url: str
) -> None:
    spec = make_spec()
    emails = connections.get("apps", "emails", spec)
    reports = connections.get("apps", "reports", spec)
    connections.get("gone", "lost", spec)
    first = emails.enqueue({"n": 1})
    emails.enqueue({"n": 2})
    emails.enqueue({"n": 3}, delay=600)
    register_worker(redis_url, "apps.emails", "pod-a", 4)
    register_worker(redis_url, "apps.emails", "pod-b", 2)
    # a 0.1.x worker's record, as it writes it: no "level"
    beat = {"incarnation": "i", "heartbeat_ms": run(emails.client, emails.reads.clock()),
            "inflight": 0, "concurrency": 1, "draining": False}  # fmt: skip
    emails.client.hset(emails.keys.workers, "pod-c", json.dumps(beat))
    # the head of pending became ready two minutes ago
    now_ms = int(time.time() * 1000)
    emails.client.hset(emails.keys.task(first), "run_at", now_ms - 120_000)

    readings = {r.queue: r for r in read_queues(connections)}

    assert sorted(readings) == ["apps.emails", "apps.reports", "gone.lost"]
    mails = readings["apps.emails"]
    assert mails.up
    assert mails.tasks == {
        "pending": 2,
        "delayed": 1,
        "running": 0,
        "done": 0,
        "dead": 0,
        "cancelled": 0,
        "waiting": 0,
    }
    assert mails.counters["enqueued"] == 3
    assert (mails.workers, mails.workers_alive, mails.slots_alive) == (3, 3, 7)
    assert mails.workers_older == 1  # pod-c
    assert 119 <= mails.oldest_pending_s < 180
    idle = readings["apps.reports"]
    assert idle.up and idle.oldest_pending_s == 0 and sum(idle.tasks.values()) == 0
    assert not readings["gone.lost"].up
    assert reports.stats()["pending"] == 0


def test_the_operator_endpoint_serves_the_queues_and_its_own_work(
    connections: Connections,
) -> None:
    from taskfleet_operator import queuesweep, sweeper

    spec = make_spec()
    queue: Queue = connections.get("apps", "emails", spec)
    for n in range(4):
        queue.enqueue({"n": n})
    metrics = OperatorMetrics()
    metrics.watch(connections)
    report = sweeper.SweepReport(requeued={"pod-a": 2, "pod-b": 1}, lease_expired=5, fired=1)
    queuesweep.count_sweep(metrics, "apps.emails", report)
    with metrics.sweep_seconds.time():
        pass
    port = free_port()
    metrics.serve(port, addr="127.0.0.1")
    samples = wait_for(
        lambda: scrape(f"http://127.0.0.1:{port}/metrics"),
        timeout=5,
        interval=0.02,
        what="the operator's metrics endpoint",
        ignoring=(OSError,),
    )

    def get(name: str, **labels: str) -> Any:
        return value(samples, name, **labels)

    assert get("taskfleet_queue_tasks", queue="apps.emails", state="pending") == 4
    assert get("taskfleet_queue_enqueued_total", queue="apps.emails", taskqueue="emails") == 4
    assert get("taskfleet_queue_redis_up", queue="apps.emails") == 1
    assert get("taskfleet_queue_redis_up", queue="gone.lost") is None  # never connected
    requeued = "taskfleet_operator_requeued_tasks_total"
    assert get(requeued, queue="apps.emails", reason="pod_gone") == 3
    assert get(requeued, queue="apps.emails", reason="lease_expired") == 5
    assert get("taskfleet_operator_schedules_fired_total", queue="apps.emails") == 1
    assert get("taskfleet_operator_sweep_seconds_count") == 1
    assert get("taskfleet_operator_info", version=taskfleet.__version__) == 1


def test_a_deleted_queues_own_series_go_and_other_queues_keep_theirs() -> None:
    from taskfleet_operator import queuesweep, sweeper

    metrics = OperatorMetrics()
    report = sweeper.SweepReport(requeued={"pod-a": 2}, lease_expired=1, fired=1)
    for queue in ("apps.emails", "apps.reports"):
        queuesweep.count_sweep(metrics, queue, report)
        metrics.count(metrics.sweep_errors, queue, "RedisUnreachable")

    metrics.forget("apps.emails")

    def get(name: str, queue: str, **labels: str) -> float | None:
        return metrics.registry.get_sample_value(name, {"queue": queue, **labels})

    requeued = "taskfleet_operator_requeued_tasks_total"
    for queue, kept in (("apps.emails", None), ("apps.reports", 1.0)):
        assert get(requeued, queue, reason="lease_expired") == kept
        assert get("taskfleet_operator_schedules_fired_total", queue) == kept
        errors = get("taskfleet_operator_sweep_errors_total", queue, reason="RedisUnreachable")
        assert errors == kept
    assert get(requeued, "apps.reports", reason="pod_gone") == 2


def test_a_queue_whose_redis_stops_answering_reads_as_down_not_as_empty(
    connections: Connections,
) -> None:
    spec = make_spec()
    connections.get("gone", "lost", spec)
    [reading] = read_queues(connections)
    assert reading.queue == "gone.lost" and not reading.up
    with pytest.raises(redis.RedisError):
        connections.get("gone", "lost", spec).stats()


def test_the_leader_gauge_follows_kopfs_events_and_pauses() -> None:
    from taskfleet_operator.leadership import Leadership

    def leader(leadership: Leadership) -> float | None:
        metrics = OperatorMetrics()
        metrics.lead(leadership)
        return metrics.registry.get_sample_value("taskfleet_operator_leader")

    assert leader(Leadership(standalone=True, lifetime_s=15)) == 1.0
    peered = Leadership(standalone=False, lifetime_s=0.05)
    assert leader(peered) == 0.0  # no event of its peering object yet: paused
    peered.seen()
    assert leader(peered) == 1.0
    peered.paused()
    assert leader(peered) == 0.0
    peered.seen()
    # No event for two lifetimes: kopf has paused this replica's watches.
    wait_for(lambda: leader(peered) == 0.0, timeout=5, interval=0.02, what="the lead to lapse")


def test_a_scrape_exports_the_most_pending_groups_and_sums_the_rest_as_other(
    connections: Connections, monkeypatch: pytest.MonkeyPatch
) -> None:
    from taskfleet_operator import queuemetrics

    monkeypatch.setattr(queuemetrics, "GROUPS_SHOWN", 2)
    queue = connections.get("apps", "tenants", make_spec())
    for group, n in (("big", 5), ("mid", 3), ("small", 1), ("tiny", 1)):
        queue.enqueue_many([{"payload": {"i": i}, "group": group} for i in range(n)])
    [reading] = [r for r in read_queues(connections) if r.queue == "apps.tenants"]
    shown = {(c.group, c.pending, c.running) for c in reading.groups}
    assert shown == {("big", 5, 0), ("mid", 3, 0), ("other", 2, 0)}
    assert reading.tasks["pending"] == 10


def test_the_oldest_pending_age_counts_the_tasks_waiting_in_groups(
    connections: Connections, redis_url: str
) -> None:
    jobs = connections.get("apps", "tenants", make_spec())
    jobs.enqueue({"n": 0})  # ungrouped, ready now
    waiting = jobs.enqueue({"n": 1}, group="tenant-a")
    jobs.enqueue({"n": 2}, group="tenant-b")
    now_ms = int(time.time() * 1000)
    jobs.client.hset(jobs.keys.task(waiting), "run_at", now_ms - 300_000)
    (reading,) = [r for r in read_queues(connections) if r.queue == "apps.tenants"]
    assert 299 <= reading.oldest_pending_s < 360


def test_forgetting_a_queue_reads_only_its_own_series_not_every_queues() -> None:
    """With 1,000 queues' series, a deleted queue's go without a listing of them all
    (prometheus-client's collect(), 67 ms a queue): collect is never called."""
    metrics = OperatorMetrics()
    for i in range(1000):
        metrics.count(metrics.requeued, f"apps.q{i}", "pod_gone", amount=2)
        metrics.count(metrics.schedules_fired, f"apps.q{i}")
    listed: list[str] = []
    for counter in (metrics.requeued, metrics.schedules_fired, metrics.sweep_errors):
        collect = counter.collect

        def counting(collect: Any = collect) -> Any:
            listed.append("collect")
            return collect()

        counter.collect = counting  # type: ignore[method-assign]
    metrics.forget("apps.q7")
    assert listed == []
    sample = metrics.registry.get_sample_value
    requeued = "taskfleet_operator_requeued_tasks_total"
    assert sample(requeued, {"queue": "apps.q7", "reason": "pod_gone"}) is None
    assert sample("taskfleet_operator_schedules_fired_total", {"queue": "apps.q7"}) is None
    assert sample(requeued, {"queue": "apps.q8", "reason": "pod_gone"}) == 2
    metrics.forget("apps.q7")  # again, or a queue never counted: nothing to do
    metrics.forget("apps.never")
