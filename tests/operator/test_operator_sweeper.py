"""The sweeper against a real redis-server: orphans, cron slots, settings, outages."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from taskfleet.producer.queue import Queue
from taskfleet.protocol.errors import ScheduleOwned
from taskfleet_operator import builders, sweeper
from taskfleet_operator.connections import Connections
from taskfleet_operator.models import TaskQueueSpec
from taskfleet_operator.status import Outage

from tests.fixtures_redis import RedisServerFactory
from tests.polling import wait_for


def make_spec(**overrides: Any) -> TaskQueueSpec:
    raw: dict[str, Any] = {
        "image": "localhost/worker:dev",
        "handler": "app.tasks:handle",
        "redis": {"url": "redis://127.0.0.1:1/0"},
    }
    raw.update(overrides)
    return TaskQueueSpec.model_validate(raw)


@pytest.fixture
def queue(redis_url: str) -> Iterator[Queue]:
    with Queue(builders.queue_name("ns", "emails"), redis_url) as q:
        yield q


def sweep(queue: Queue, spec: TaskQueueSpec, **kwargs: Any) -> sweeper.SweepReport:
    options: dict[str, Any] = {
        "live_pods": [],
        "suspects": set(),
        "pod_gone": lambda _pod: True,
    }
    options.update(kwargs)
    return sweeper.sweep_queue(queue, spec, **options)


def hold_tasks(make_broker: Callable[..., Any], queue: Queue, pod: str, n: int) -> list[str]:
    ids = [queue.enqueue({"n": i}) for i in range(n)]
    broker = make_broker(queue.name, pod=pod)
    broker.register(4)
    claimed = broker.claim(n)
    assert sorted(task.id for task in claimed.tasks) == sorted(ids)
    return ids


def test_a_worker_whose_pod_is_gone_gets_its_tasks_back_on_the_second_sweep(
    queue: Queue, make_broker: Callable[..., Any]
) -> None:
    hold_tasks(make_broker, queue, "emails-abc", 3)
    spec = make_spec()

    first = sweep(queue, spec, live_pods=["emails-other"])
    assert first.requeued == {}
    assert first.suspects == {"emails-abc"}
    assert first.stats["running"] == 3

    second = sweep(queue, spec, live_pods=["emails-other"], suspects=first.suspects)
    assert second.requeued == {"emails-abc": 3}
    assert second.stats["pending"] == 3
    assert second.stats["running"] == 0
    assert second.stats["requeued"] == 3


def test_a_live_pod_keeps_its_tasks_however_often_the_sweep_runs(
    queue: Queue, make_broker: Callable[..., Any]
) -> None:
    hold_tasks(make_broker, queue, "emails-abc", 2)
    spec = make_spec()
    suspects: set[str] = set()

    for _ in range(3):
        report = sweep(queue, spec, live_pods=["emails-abc"], suspects=suspects)
        suspects = report.suspects
        assert report.requeued == {}
        assert report.stats["running"] == 2


def test_a_pod_that_reappears_in_the_api_is_no_longer_suspect(
    queue: Queue, make_broker: Callable[..., Any]
) -> None:
    hold_tasks(make_broker, queue, "emails-abc", 1)
    spec = make_spec()

    first = sweep(queue, spec, live_pods=[])
    second = sweep(queue, spec, live_pods=["emails-abc"], suspects=first.suspects)
    third = sweep(queue, spec, live_pods=[], suspects=second.suspects)

    assert first.suspects == {"emails-abc"}
    assert second.suspects == set()
    assert third.requeued == {}
    assert third.stats["running"] == 1


def test_a_pod_the_index_has_not_seen_but_the_api_has_keeps_its_tasks(
    queue: Queue, make_broker: Callable[..., Any]
) -> None:
    hold_tasks(make_broker, queue, "emails-new", 2)
    spec = make_spec()
    asked: list[str] = []

    def api_has_it(pod: str) -> bool:
        asked.append(pod)
        return False

    suspects: set[str] = set()
    for _ in range(3):
        report = sweep(queue, spec, live_pods=[], suspects=suspects, pod_gone=api_has_it)
        suspects = report.suspects
        assert report.requeued == {}
        assert report.stats["running"] == 2
    assert suspects == {"emails-new"}
    assert asked == ["emails-new", "emails-new"]


@pytest.mark.parametrize(
    ("live", "suspects", "gone", "requeue", "suspect"),
    [
        ({"a"}, set(), set(), [], set()),
        (set(), set(), {"a"}, [], {"a"}),
        (set(), {"a"}, {"a"}, ["a"], set()),
        (set(), {"a"}, set(), [], {"a"}),
        ({"a"}, {"a"}, {"a"}, [], set()),
    ],
    ids=[
        "live in the index",
        "first miss only suspected",
        "second miss and 404 requeued",
        "second miss but in the API kept",
        "back in the index cleared",
    ],
)
def test_a_pod_is_requeued_only_when_missing_twice_from_the_index_and_gone_from_the_api(
    live: set[str], suspects: set[str], gone: set[str], requeue: list[str], suspect: set[str]
) -> None:
    assert sweeper.orphaned_pods(["a"], live, suspects, gone.__contains__) == (requeue, suspect)


def test_the_worker_processes_of_a_pod_are_judged_by_their_pod_asking_the_api_once() -> None:
    asked: list[str] = []

    def gone(pod: str) -> bool:
        asked.append(pod)
        return pod == "dead"

    registered = ["live#1", "live#2", "dead#1", "dead#2", "new#1"]
    suspects = {"dead#1", "dead#2", "live#1"}
    requeue, suspect = sweeper.orphaned_pods(registered, ["live"], suspects, gone)
    assert requeue == ["dead#1", "dead#2"]
    assert suspect == {"new#1"}
    assert asked == ["dead"]


def test_a_pod_gone_gives_back_what_each_of_its_worker_processes_held_and_nothing_else(
    make_broker: Callable[..., Any], queue: Queue
) -> None:
    hold_tasks(make_broker, queue, "emails-abc#1", 2)
    hold_tasks(make_broker, queue, "emails-abc#2", 1)
    kept = hold_tasks(make_broker, queue, "emails-abcd#1", 1)
    assert sweeper.requeue_pod_workers(queue, "emails-abc") == 3
    assert queue.held_by(["emails-abc#1", "emails-abc#2", "emails-abcd#1"]) == {
        "emails-abc#1": 0,
        "emails-abc#2": 0,
        "emails-abcd#1": 1,
    }
    assert [t.state for t in map(queue.get, kept) if t] == ["running"]


def make_due(queue: Queue, name: str, slot: int) -> None:
    """Move a schedule's next slot to ``slot`` and make it due now (the store runs on the
    server's clock, which a test does not set)."""
    queue.client.hset(queue.keys.schedule(name), "next_slot", slot)
    queue.client.zadd(queue.keys.schedule_due, {name: 0})


def test_a_taskqueue_schedule_is_synced_into_the_store_and_its_slot_fires_exactly_once(
    queue: Queue,
) -> None:
    spec = make_spec(
        schedules=[
            {
                "name": "nightly",
                "cron": "0 3 * * *",
                "timeZone": "Europe/Paris",
                "payload": {"job": "report"},
            }
        ]
    )
    sweep(queue, spec)
    [stored] = queue.schedules()
    assert (stored.name, stored.tz, stored.owner, stored.payload) == (
        "nightly",
        "Europe/Paris",
        "taskqueue",
        {"job": "report"},
    )
    assert stored.next_slot is not None
    slot = stored.next_slot - 86_400  # the 03:00 before (no DST change in between)
    make_due(queue, "nightly", slot)

    first = sweep(queue, spec)
    again = sweep(queue, spec)

    assert (first.fired, again.fired) == (1, 0)
    task = queue.get(f"sched:nightly:{slot}")
    assert task is not None and task.payload == {"job": "report"}
    after = queue.get_schedule("nightly")
    assert after is not None and after.last_slot == slot and after.next_slot == stored.next_slot


def test_the_sync_leaves_api_schedules_alone_and_deletes_what_the_spec_dropped(
    queue: Queue,
) -> None:
    queue.schedule("tenant-7", "0 * * * *", {"tenant": 7})
    two = make_spec(schedules=[{"name": "a", "cron": "@hourly"}, {"name": "b", "cron": "@daily"}])
    sweep(queue, two)
    one = make_spec(schedules=[{"name": "b", "cron": "@daily", "suspend": True}])

    sweep(queue, one)

    stored = {s.name: s for s in queue.schedules()}
    assert sorted(stored) == ["b", "tenant-7"]
    assert stored["b"].paused and stored["b"].owner == "taskqueue"
    assert stored["tenant-7"].owner == ""
    with pytest.raises(ScheduleOwned, match=r"spec\.schedules"):
        queue.unschedule("b")
    with pytest.raises(ScheduleOwned):
        queue.schedule("b", "@hourly", {})


def test_a_schedule_the_queue_refuses_is_reported_and_the_others_are_synced(
    queue: Queue,
) -> None:
    huge = {"blob": "x" * (1024 * 1024 + 1)}  # over the queue's default payload bound
    spec = make_spec(
        schedules=[
            {"name": "huge", "cron": "0 3 * * *", "payload": huge},
            {"name": "nightly", "cron": "0 3 * * *", "payload": {"job": "report"}},
        ]
    )

    report = sweep(queue, spec)

    assert list(report.schedule_errors) == ["huge"]
    assert "payload" in report.schedule_errors["huge"]
    assert [s.name for s in queue.schedules()] == ["nightly"]
    assert report.active_schedules == 1


def test_a_schedule_made_through_the_api_fires_in_the_operators_sweep(queue: Queue) -> None:
    stored = queue.schedule("tenant-7", "*/5 * * * *", {"tenant": 7})
    assert stored.next_slot is not None
    make_due(queue, "tenant-7", stored.next_slot - 300)

    report = sweep(queue, make_spec())

    assert report.fired == 1
    assert queue.get(f"sched:tenant-7:{stored.next_slot - 300}") is not None


def test_sweep_writes_the_spec_settings_into_the_queue_config(queue: Queue) -> None:
    spec = make_spec(maxConcurrency=7, maxLost=2, heartbeat={"intervalSeconds": 2, "ttlSeconds": 8})

    sweep(queue, spec)

    config = queue.config()
    assert config == builders.queue_config(spec)
    assert config.max_concurrency == 7
    assert config.max_lost == 2
    assert config.lease_ttl_s == 8
    assert config.default_timeout_s == 300


def test_sweep_writes_what_the_groups_are_fair_by_and_claims_when_the_spec_drops_it(
    queue: Queue,
) -> None:
    sweep(queue, make_spec(groups={"fairBy": "output_tokens"}))
    assert queue.fair_by() == "output_tokens"
    sweep(queue, make_spec())
    assert queue.fair_by() is None


def test_a_sweep_writes_the_settings_only_where_they_differ_and_puts_back_an_edit(
    queue: Queue, redis_client: redis.Redis
) -> None:
    """Settings already as the spec says are read, not written again (keyspace
    notifications: a write of the config hash or the fair-by key would show); settings
    changed behind the operator's back are put back by the next sweep."""
    spec = make_spec(maxConcurrency=7, groups={"fairBy": "output_tokens"})
    sweep(queue, spec)
    redis_client.config_set("notify-keyspace-events", "KA")
    marker = f"{queue.keys.config}:marker"
    watched = [queue.keys.config, queue.keys.groups_fair, marker]
    with redis_client.pubsub() as pubsub:
        pubsub.psubscribe(*(f"__keyspace@*__:{key}" for key in watched))
        for _ in watched:
            assert pubsub.get_message(timeout=10)["type"] == "psubscribe"

        def written() -> list[str]:
            # A write of the marker after the sweep: every notification before it is the sweep's.
            redis_client.set(marker, 1)
            seen: list[str] = []
            while True:
                message = pubsub.get_message(timeout=10)
                assert message is not None, "no notification of the marker's write"
                channel = message["channel"].decode()
                if channel.endswith(marker):
                    return seen
                seen.append(f"{message['data'].decode()} {channel}")

        sweep(queue, spec)
        assert written() == []

        queue.configure(builders.queue_config(make_spec(maxConcurrency=3)))
        queue.set_fair_by(None)
        assert written() != []  # the edits themselves are seen
        sweep(queue, spec)
        assert len(written()) >= 2  # both put back
    assert queue.config() == builders.queue_config(spec)
    assert queue.fair_by() == "output_tokens"


def test_an_unreachable_redis_fails_the_sweep_quickly_with_a_redis_error(
    redis_server_factory: RedisServerFactory,
) -> None:
    server = redis_server_factory(persistent=False)
    url = server.url
    server.stop()
    connections = Connections(0.5, resolve_url=lambda _ns, _spec: url)
    try:
        with pytest.raises(redis.RedisError):
            sweep(connections.get("ns", "q", make_spec()), make_spec())
    finally:
        connections.close()


BODY = {"metadata": {"namespace": "ns", "name": "q", "creationTimestamp": "2026-01-01T00:00:00Z"}}


def test_a_redis_the_sweep_cannot_reach_is_an_outage_that_parks_it_without_calling_it_again(
    redis_server_factory: RedisServerFactory,
) -> None:
    server = redis_server_factory(persistent=False)
    url = server.url
    server.stop()
    resolved: list[str] = []

    def resolve(_namespace: str, _spec: TaskQueueSpec) -> str:
        resolved.append(url)
        return url

    connections = Connections(0.5, resolve_url=resolve, url_ttl_s=60.0)
    logger = logging.getLogger(__name__)
    try:
        outcomes = [
            sweeper.sweep_taskqueue(
                connections,
                BODY,
                make_spec(),
                live_pods=[],
                suspects=set(),
                sync=True,
                logger=logger,
            )
            for _ in range(2)
        ]
    finally:
        connections.close()

    for outcome in outcomes:
        assert isinstance(outcome, Outage)
        assert outcome.reason == "RedisUnreachable"
        assert outcome.message.startswith("cannot reach Redis: ")
        assert outcome.parked
    # No Secret read per sweep: the probe of the parked server reads it (once per probe).
    assert len(resolved) == 1


def test_a_secret_with_no_usable_url_is_an_outage_naming_the_secret() -> None:
    spec = make_spec(redis={"secretRef": {"name": "redis-auth", "key": "url"}})
    connections = Connections(0.5, resolve_url=lambda _ns, _spec: "http://redis:6379/0")
    try:
        outcome = sweeper.sweep_taskqueue(
            connections,
            BODY,
            spec,
            live_pods=[],
            suspects=set(),
            sync=True,
            logger=logging.getLogger(__name__),
        )
    finally:
        connections.close()

    assert isinstance(outcome, Outage)
    assert outcome.reason == "SecretUnavailable"
    assert outcome.message.startswith("key 'url' of Secret ns/redis-auth is not a usable")


def test_a_sweep_that_reaches_redis_reports_what_it_did(redis_url: str) -> None:
    connections = Connections(1.0, resolve_url=lambda _ns, _spec: redis_url)
    try:
        outcome = sweeper.sweep_taskqueue(
            connections,
            BODY,
            make_spec(),
            live_pods=[],
            suspects=set(),
            sync=True,
            logger=logging.getLogger(__name__),
        )
    finally:
        connections.close()

    assert isinstance(outcome, sweeper.SweepReport)
    assert outcome.stats["pending"] == 0


def test_a_sweep_repairs_a_waiting_task_whose_dependency_ended_without_waking_it(
    make_broker: Callable[..., Any], queue: Queue, redis_client: redis.Redis
) -> None:
    a = queue.enqueue({}, task_id="a")
    b = queue.enqueue({}, task_id="b", after=[a])
    broker = make_broker(queue.name)
    [run] = broker.claim(1).tasks
    redis_client.hdel(queue.keys.task(a), "dependants")  # as a 0.1.x worker completes it
    broker.complete_many([(a, run.token, None)])
    redis_client.hset(queue.keys.task(a), "finished_at", 1)  # ended long ago
    report = sweep(queue, make_spec())
    assert report.repaired == [(b, "pending")]
    assert report.stats["flow_repairs"] == 1 and report.stats["waiting"] == 0
    assert sweep(queue, make_spec()).repaired == []


def test_a_sweeps_repair_goes_on_from_where_the_last_sweep_stopped(
    make_broker: Callable[..., Any], queue: Queue, redis_client: redis.Redis
) -> None:
    heads = [queue.enqueue({}, task_id=f"a{i}") for i in range(3)]
    for i, head in enumerate(heads):
        queue.enqueue({}, task_id=f"b{i}", after=[head])
    broker = make_broker(queue.name)
    runs = broker.claim(3).tasks
    for run in runs:
        redis_client.hdel(queue.keys.task(run.id), "dependants")
    broker.complete_many([(run.id, run.token, None) for run in runs])
    for head in heads:
        redis_client.hset(queue.keys.task(head), "finished_at", 1)
    last = sweep(queue, make_spec(), repair_cursor=2)  # b2 is third in waiting
    assert (last.repaired, last.repair_cursor) == ([("b2", "pending")], 0)
    assert sorted(sweep(queue, make_spec()).repaired) == [("b0", "pending"), ("b1", "pending")]


def _calls(client: redis.Redis, command: str) -> int:
    return int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def test_an_idle_queues_sweep_sends_each_script_once_and_no_script_exists(
    queue: Queue, redis_client: redis.Redis
) -> None:
    sweep(queue, make_spec())  # the settings written, the schedules synced
    evalsha, exists = _calls(redis_client, "evalsha"), _calls(redis_client, "script|exists")

    report = sweep(queue, make_spec(), sync=False)

    # The sweep, the repair and the claim of due slots, pipelined with the state's reads.
    assert _calls(redis_client, "evalsha") - evalsha == 3
    assert _calls(redis_client, "script|exists") == exists
    assert (report.fired, report.lease_expired, report.repaired) == (0, 0, [])
    assert report.stats["pending"] == 0 and report.active_schedules == 0


def test_a_slot_fired_by_a_sweep_without_sync_is_in_the_state_it_reports(queue: Queue) -> None:
    stored = queue.schedule("tenant-8", "*/5 * * * *", {"tenant": 8})
    assert stored.next_slot is not None
    make_due(queue, "tenant-8", stored.next_slot - 300)

    report = sweep(queue, make_spec(), sync=False)

    assert report.fired == 1
    assert report.stats["pending"] == 1  # read again after the fire
    assert report.active_schedules == 1


def test_a_sweep_catches_up_a_backlog_over_several_script_calls(queue: Queue) -> None:
    # Two and a half times what one sweep call promotes, all due.
    queue.enqueue_many([{"payload": {"n": i}, "delay": 0.001} for i in range(2500)])
    wait_for(
        lambda: (
            queue.client.zcount(queue.keys.delayed, "-inf", queue.client.time()[0] * 1000) == 2500
        ),
        timeout=10,
        what="the delayed tasks to be due",
    )

    report = sweep(queue, make_spec(), sync=False)

    assert report.stats["pending"] == 2500 and report.stats["delayed"] == 0
