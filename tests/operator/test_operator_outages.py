"""A Redis server in trouble, as the operator sees it: every error reply classified, the
server parked for all of its queues, one probe with backoff, and every queue resumed
together when it answers again or the Secret changes. Real faults on real redis-servers:
a changed password, a real long script (BUSY), real maxmemory (OOM), a real replica
(READONLY), a stopped server."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis
from taskfleet_operator import builders, status, sweeper, wakeups
from taskfleet_operator.connections import Connections
from taskfleet_operator.models import TaskQueueSpec
from taskfleet_operator.outages import classify
from taskfleet_operator.status import Outage

from tests.fixtures_redis import RedisServer, RedisServerFactory
from tests.polling import wait_for

LOG = logging.getLogger(__name__)
FIELDS: dict[str, Any] = {
    "image": "w:1",
    "handler": "app:run",
    "redis": {"url": "redis://r:6379/0"},
    "replicas": 0,
}


def spec_for(url: str) -> TaskQueueSpec:
    return TaskQueueSpec.model_validate({**FIELDS, "redis": {"url": url}})


def body(namespace: str, name: str) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name}, "spec": {}}


def sweep(connections: Connections, key: tuple[str, str], url: str) -> Any:
    return sweeper.sweep_taskqueue(
        connections,
        body(*key),
        spec_for(url),
        live_pods=[],
        suspects=set(),
        sync=True,
        logger=LOG,
    )


def connections_received(server: RedisServer) -> int:
    admin = server.admin()
    try:
        return int(admin.info("stats")["total_connections_received"])
    finally:
        admin.close()


def probe_when_due(connections: Connections) -> set[tuple[str, str]]:
    """Wait for the parked servers' next probe, run it, and return the queues resumed."""
    targets: list[str] = []
    wait_for(lambda: targets.extend(connections.probe_due()) or targets, timeout=5, interval=0.02)
    resumed: set[tuple[str, str]] = set()
    for target in targets:
        resumed |= connections.probe(target)
    return resumed


@pytest.fixture
def connections() -> Iterator[Connections]:
    made = Connections(0.5, probe_first_s=0.2, probe_max_s=0.8)
    yield made
    made.close()


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (redis.AuthenticationError("invalid username-password pair"), "RedisAuthRefused"),
        (redis.ResponseError("NOAUTH Authentication required."), "RedisAuthRefused"),
        (redis.ResponseError("NOPERM this user has no permissions"), "RedisAuthRefused"),
        (redis.ResponseError("BUSY Redis is busy running a script."), "RedisBusy"),
        (
            redis.ResponseError("Command # 1 (DEL k) of pipeline caused error: BUSY Redis is busy"),
            "RedisBusy",
        ),
        (redis.BusyLoadingError("Redis is loading the dataset in memory"), "RedisLoading"),
        (redis.ResponseError("MASTERDOWN Link with MASTER is down"), "RedisMasterDown"),
        (redis.exceptions.TryAgainError("Multiple keys request during rehashing"), "RedisTryAgain"),
        (redis.exceptions.ClusterDownError("The cluster is down"), "RedisClusterDown"),
        (
            redis.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."),
            "RedisOutOfMemory",
        ),
        (redis.ReadOnlyError("You can't write against a read only replica."), "RedisReadOnly"),
        (redis.ConnectionError("Connection refused"), "RedisUnreachable"),
        (redis.TimeoutError("Timeout reading from socket"), "RedisUnreachable"),
    ],
)
def test_every_server_error_reply_is_classified_with_a_reason(
    error: redis.RedisError, reason: str
) -> None:
    fault = classify(error, str(error))
    assert fault is not None
    assert fault.reason == reason
    assert str(error) in fault.message


@pytest.mark.parametrize(
    "error",
    [
        redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"),
        redis.exceptions.NoScriptError("No matching script."),
        redis.ResponseError("ERR Error running script: user_script:1: bad"),
    ],
)
def test_an_error_of_the_call_itself_is_not_a_server_fault(error: redis.RedisError) -> None:
    assert classify(error, str(error)) is None


def test_a_rotated_password_parks_the_server_for_every_queue_probed_with_backoff_until_the_secret_changes(  # noqa: E501
    redis_server_factory: RedisServerFactory,
) -> None:
    server = redis_server_factory(persistent=False, password="old-pw")
    admin = server.admin()
    secret = {"url": server.url_as(password="old-pw")}
    connections = Connections(
        0.5,
        resolve_url=lambda _ns, _spec: secret["url"],
        url_ttl_s=600,
        probe_first_s=0.2,
        probe_max_s=0.8,
    )
    keys = [("ns", f"q{i}") for i in range(20)]
    spec = TaskQueueSpec.model_validate(
        {**FIELDS, "redis": {"secretRef": {"name": "redis", "key": "url"}}}
    )

    def sweep_all() -> list[Any]:
        return [
            sweeper.sweep_taskqueue(
                connections, body(*key), spec, live_pods=[], suspects=set(), sync=True, logger=LOG
            )
            for key in keys
        ]

    try:
        assert all(isinstance(o, sweeper.SweepReport) for o in sweep_all())
        # The password is rotated on the server; the Secret still holds the old one.
        admin.config_set("requirepass", "new-pw")
        admin.client_kill_filter(_type="normal", skipme=True)
        server.password = "new-pw"
        outcomes = sweep_all()
        assert all(isinstance(o, Outage) for o in outcomes)
        assert {o.reason for o in outcomes} == {"RedisAuthRefused"}
        assert all(o.parked for o in outcomes)

        # Every queue swept every 50 ms for 3 s, the probe run when due: the server sees
        # the probe's connections only, spaced by a doubling backoff (0.2 s up to 0.8 s).
        before = connections_received(server) + 1  # our own INFO's connection
        start, probes = time.monotonic(), 0
        while time.monotonic() - start < 3.0:
            assert all(isinstance(o, Outage) and o.parked for o in sweep_all())
            for target in connections.probe_due():
                assert connections.probe(target) == set()
                probes += 1
            time.sleep(0.05)
        attempts = connections_received(server) - before
        assert 3 <= probes <= 6  # 0.2, 0.6, 1.4, 2.2, 3.0
        assert attempts == probes

        # The Secret gets the new password: the next probe reads it once and resumes all.
        secret["url"] = server.url_as(password="new-pw")
        resumed: set[tuple[str, str]] = set()
        wait_for(
            lambda: (
                [resumed.update(connections.probe(t)) for t in connections.probe_due()]
                and resumed == set(keys)
            ),
            timeout=5,
            interval=0.05,
            what="every queue resumed by the probe",
        )
        assert all(isinstance(o, sweeper.SweepReport) for o in sweep_all())
    finally:
        admin.close()
        connections.close()


def test_a_stopped_server_is_probed_and_its_queues_resume_together_when_it_is_back(
    redis_server_factory: RedisServerFactory, connections: Connections
) -> None:
    server = redis_server_factory(persistent=False)
    keys = [("ns", "a"), ("ns", "b")]
    assert all(isinstance(sweep(connections, k, server.url), sweeper.SweepReport) for k in keys)
    server.stop()
    first = sweep(connections, keys[0], server.url)
    assert isinstance(first, Outage)
    assert (first.reason, first.parked) == ("RedisUnreachable", True)
    # The other queue is parked with it, without a call of its own.
    second = sweep(connections, keys[1], server.url)
    assert isinstance(second, Outage)
    assert second.parked
    server.start()
    resumed: set[tuple[str, str]] = set()
    wait_for(
        lambda: (
            [resumed.update(connections.probe(t)) for t in connections.probe_due()]
            and resumed == set(keys)
        ),
        timeout=5,
        interval=0.05,
        what="both queues resumed",
    )
    assert all(isinstance(sweep(connections, k, server.url), sweeper.SweepReport) for k in keys)


def test_the_probe_loop_sleeps_until_a_server_is_parked_then_probes_it_when_due(
    redis_server_factory: RedisServerFactory,
    connections: Connections,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The operator's probe loop wakes for a parked server, not on a timer: at rest it
    reads the due probes once (it polled five times a second, on every replica); a server
    parked from a sweep's thread wakes it, and its queues are resumed by the probe when
    the server is back."""
    server = redis_server_factory(persistent=False)
    keys = [("ns", "a"), ("ns", "b")]
    assert all(isinstance(sweep(connections, k, server.url), sweeper.SweepReport) for k in keys)
    passes: list[float] = []
    due = connections.probe_due

    def counted() -> list[str]:
        passes.append(time.monotonic())
        return due()

    monkeypatch.setattr(connections, "probe_due", counted)

    async def scenario() -> tuple[int, set[tuple[str, str]]]:
        wakers, woken, every = wakeups.Wakers(), set[tuple[str, str]](), asyncio.Event()

        def wake(key: tuple[str, str]) -> None:
            woken.add(key)
            if woken == set(keys):
                every.set()

        wakers.attach(wake)
        for key in keys:
            wakers.register(key)
        executor, closing = ThreadPoolExecutor(2), threading.Event()
        run = wakeups.in_threads(executor, closing)
        loop = asyncio.create_task(
            wakeups.probe_servers(wakers, connections, run, policy_every_s=3600)
        )
        try:
            # A second with nothing parked: the old loop passed five times in it.
            await asyncio.sleep(1.0)
            at_rest = len(passes)
            await asyncio.to_thread(server.stop)
            parked = await asyncio.to_thread(sweep, connections, keys[0], server.url)
            assert isinstance(parked, Outage) and parked.parked
            await asyncio.to_thread(server.start)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(every.wait(), 10)
            return at_rest, woken
        finally:
            loop.cancel()
            closing.set()
            executor.shutdown(wait=True)

    at_rest, woken = asyncio.run(scenario())
    assert at_rest == 1
    assert woken == set(keys), "the probe resumed both queues once the server was back"
    assert connections.fault(*keys[1]) is None
    assert all(isinstance(sweep(connections, k, server.url), sweeper.SweepReport) for k in keys)


def test_a_full_redis_parks_its_queues_until_there_is_room(
    redis_server_factory: RedisServerFactory, connections: Connections
) -> None:
    server = redis_server_factory(
        persistent=False, extra_args=["--maxmemory", "4mb", "--maxmemory-policy", "noeviction"]
    )
    key = ("ns", "full")
    assert isinstance(sweep(connections, key, server.url), sweeper.SweepReport)
    admin = server.admin()
    try:
        # Settings lost (a restart without data): the sweep must write them again.
        admin.delete(connections.get(*key, spec_for(server.url)).keys.config)
        filled = 0
        with pytest.raises(redis.OutOfMemoryError):
            while True:
                admin.set(f"filler:{filled}", "x" * 1024)
                filled += 1
        # Full by a margin: the first refusal comes at the limit's edge, and the buffers
        # freed after it could leave room for a few bytes, which the probe rightly counts.
        used = int(admin.info("memory")["used_memory"])
        admin.config_set("maxmemory", used - 512 * 1024)
        outcome = sweep(connections, key, server.url)
        assert isinstance(outcome, Outage)
        assert (outcome.reason, outcome.parked) == ("RedisOutOfMemory", True)
        # PING still answers, yet there is no room: the probe keeps the server parked.
        assert probe_when_due(connections) == set()
        assert connections.fault(*key) is not None
        admin.flushall()
        resumed: set[tuple[str, str]] = set()
        wait_for(
            lambda: (
                [resumed.update(connections.probe(t)) for t in connections.probe_due()]
                and resumed == {key}
            ),
            timeout=5,
            interval=0.05,
            what="the queue resumed once there is room",
        )
        assert isinstance(sweep(connections, key, server.url), sweeper.SweepReport)
    finally:
        admin.close()


def test_a_replica_parks_its_queues_as_read_only_until_it_is_a_master_again(
    redis_server_factory: RedisServerFactory, connections: Connections
) -> None:
    master = redis_server_factory(persistent=False)
    replica = redis_server_factory(persistent=False)
    key = ("ns", "failover")
    admin = replica.admin()
    try:
        admin.replicaof("127.0.0.1", master.port)
        outcome = sweep(connections, key, replica.url)
        assert isinstance(outcome, Outage)
        assert (outcome.reason, outcome.parked) == ("RedisReadOnly", True)
        assert probe_when_due(connections) == set()
        assert connections.fault(*key) is not None  # still a replica
        admin.replicaof("NO", "ONE")
        resumed: set[tuple[str, str]] = set()
        wait_for(
            lambda: (
                [resumed.update(connections.probe(t)) for t in connections.probe_due()]
                and resumed == {key}
            ),
            timeout=5,
            interval=0.05,
            what="the queue resumed once the server is a master",
        )
    finally:
        admin.close()


def test_a_busy_redis_parks_its_queues_until_the_script_ends(
    redis_server_factory: RedisServerFactory, connections: Connections
) -> None:
    server = redis_server_factory(persistent=False, extra_args=["--busy-reply-threshold", "50"])
    key = ("ns", "busy")
    assert isinstance(sweep(connections, key, server.url), sweeper.SweepReport)
    connections.check_policy(*key)
    looping = server.admin()

    def run_forever() -> None:
        with pytest.raises(redis.ResponseError):  # killed by SCRIPT KILL below
            looping.eval("while true do end", 0)

    runner = threading.Thread(target=run_forever, daemon=True)
    runner.start()
    killer = server.admin()
    try:

        def busy() -> bool:
            try:
                killer.ping()
            except redis.ResponseError as error:
                return str(error).startswith("BUSY")
            return False

        wait_for(busy, timeout=5, interval=0.05, what="the script past the busy threshold")
        outcome = sweep(connections, key, server.url)
        assert isinstance(outcome, Outage)
        assert (outcome.reason, outcome.parked) == ("RedisBusy", True)
        killer.script_kill()
        runner.join(5)
        resumed: set[tuple[str, str]] = set()
        wait_for(
            lambda: (
                [resumed.update(connections.probe(t)) for t in connections.probe_due()]
                and resumed == {key}
            ),
            timeout=5,
            interval=0.05,
            what="the queue resumed once the script was killed",
        )
    finally:
        killer.close()
        looping.close()


def test_an_error_of_one_call_fails_the_sweep_without_parking_the_server(
    redis_server_factory: RedisServerFactory, connections: Connections
) -> None:
    server = redis_server_factory(persistent=False)
    key = ("ns", "odd")
    assert isinstance(sweep(connections, key, server.url), sweeper.SweepReport)
    admin = server.admin()
    try:
        queue = connections.get(*key, spec_for(server.url))
        admin.set(queue.keys.pending, "not a sorted set")
        outcome = sweep(connections, key, server.url)
        assert isinstance(outcome, Outage)
        assert (outcome.reason, outcome.parked) == ("RedisError", False)
        assert connections.fault(*key) is None
    finally:
        admin.close()


def test_an_evicting_policy_is_flagged_on_status_with_one_event_until_it_is_noeviction(
    redis_server_factory: RedisServerFactory, connections: Connections
) -> None:
    server = redis_server_factory(
        persistent=False, extra_args=["--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"]
    )
    key = ("ns", "evicting")
    outcome = sweep(connections, key, server.url)
    assert isinstance(outcome, sweeper.SweepReport)
    assert connections.policy(*key) is None  # not checked yet
    assert connections.check_policy(*key) == "allkeys-lru"

    spec = spec_for(server.url)

    def after(previous: dict[str, Any]) -> status.StatusUpdate:
        swept = status.Swept(
            "evicting", spec, previous, None, 0, outcome, eviction_policy=connections.policy(*key)
        )
        return status.after_sweep(swept, now="2026-01-01T00:00:00Z")

    first = after({})
    flagged = status.find(first.patch["conditions"], status.REDIS_NO_EVICTION)
    assert flagged is not None
    assert (flagged["status"], flagged["reason"]) == ("False", "EvictionPolicy")
    assert "allkeys-lru" in flagged["message"]
    assert [e.reason for e in first.events] == ["EvictionPolicy"]
    again = after({"conditions": first.patch["conditions"]})
    assert again.events == []  # once per change, not per sweep

    admin = server.admin()
    try:
        admin.config_set("maxmemory-policy", "noeviction")
    finally:
        admin.close()
    connections.check_policies()
    assert connections.policy(*key) == "noeviction"
    cleared = after({"conditions": first.patch["conditions"]})
    safe = status.find(cleared.patch["conditions"], status.REDIS_NO_EVICTION)
    assert safe is not None
    assert safe["status"] == "True"
    assert [e.reason for e in cleared.events] == ["NoEviction"]


def test_a_user_refused_both_config_and_info_has_its_refusal_reported_not_a_silent_none(
    redis_server_factory: RedisServerFactory, connections: Connections
) -> None:
    server = redis_server_factory(persistent=False)
    admin = server.admin()
    try:
        admin.execute_command("ACL", "SETUSER", "default", "-config", "-info")
    finally:
        admin.close()
    key = ("ns", "noperm")
    assert isinstance(sweep(connections, key, server.url), sweeper.SweepReport)

    assert connections.check_policy(*key) is None
    fault = connections.fault(*key)
    assert fault is not None and fault.reason == "RedisAuthRefused", fault
    assert "'info' command" in fault.message


def test_the_queue_metrics_show_a_parked_servers_queues_down_without_calling_it(
    redis_server_factory: RedisServerFactory, connections: Connections
) -> None:
    from taskfleet_operator.queuemetrics import read_queues

    server = redis_server_factory(persistent=False)
    key = ("ns", "gone")
    assert isinstance(sweep(connections, key, server.url), sweeper.SweepReport)
    server.stop()
    assert isinstance(sweep(connections, key, server.url), Outage)
    readings = read_queues(connections)
    assert [(r.queue, r.up) for r in readings] == [(builders.queue_name(*key), False)]


def test_an_outage_is_announced_once_though_the_status_read_is_stale() -> None:
    """The sweep's body may not show its own last patch yet: the event is still posted
    once per outage, not once per sweep."""
    outage = Outage("RedisAuthRefused", "Redis refuses the credentials", parked=True)
    spec = spec_for("redis://r:6379/0")
    first = status.Swept("q", spec, {}, None, 0, outage)
    assert [e.reason for e in status.after_sweep(first, now="t").events] == ["RedisAuthRefused"]
    stale = status.Swept("q", spec, {}, None, 0, outage, announced=status.announced_after(first))
    assert status.after_sweep(stale, now="t").events == []
