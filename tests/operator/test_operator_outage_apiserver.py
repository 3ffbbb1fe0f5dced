"""The real operator against a real apiserver while one Redis refuses it (a rotated
password): the refused queues are parked, their server probed with backoff (counted by
the server itself), their status says why with one event each, and a healthy queue on
another Redis is served at full speed: a deleted pod's tasks come back at once. When the
Secret gets the new password, every queue resumes."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from taskfleet.producer.queue import Queue

from tests.fixtures_cluster import Cluster, hold_tasks
from tests.fixtures_kube import KubeApiserver
from tests.fixtures_operator import (
    APISERVER_INTERVAL_S,
    APISERVER_TIMEOUT_S,
    base_spec,
    running_operator,
)
from tests.fixtures_redis import RedisServer, RedisServerFactory
from tests.polling import wait_for

pytestmark = pytest.mark.apiserver
REFUSED = 30
#: Leases that outlive the test: only the operator's fast path can take tasks back.
LONG_LEASE = {"intervalSeconds": 1, "ttlSeconds": 60}
#: How long the refused server's connections are counted while the operator runs.
WINDOW_S = 6.0


def connections_received(server: RedisServer) -> int:
    admin = server.admin()
    try:
        return int(admin.info("stats")["total_connections_received"])
    finally:
        admin.close()


def test_a_refusing_redis_is_probed_with_backoff_while_a_healthy_queue_is_served(  # noqa: PLR0917
    kube_apiserver: KubeApiserver,
    taskqueue_crd: str,
    operator_kubeconfig: Path,
    kube_namespace: str,
    redis_url: str,
    redis_server_factory: RedisServerFactory,
    queue_of: Callable[[str, str], Queue],
    make_broker: Callable[..., Any],
    tmp_path: Path,
) -> None:
    refusing = redis_server_factory(persistent=False, password="rotated-pw")
    stale_url = refusing.url_as(password="old-pw")  # what the queues still hold
    with (
        running_operator(
            kube_apiserver,
            operator_kubeconfig,
            tmp_path / "operator.log",
            TASKFLEET_WATCH_NAMESPACES=kube_namespace,
        ) as operator,
        kube_apiserver.api_client() as api,
    ):
        cluster = Cluster(api, kube_namespace)
        # The Secret still holds the password the Redis no longer takes (a rotation).
        cluster.core.create_namespaced_secret(
            kube_namespace,
            client.V1Secret(
                metadata=client.V1ObjectMeta(name="redis"), string_data={"url": stale_url}
            ),
        )
        by_secret = {"secretRef": {"name": "redis", "key": "url"}}
        refused = [f"refused-{i}" for i in range(REFUSED)]
        for name in refused:
            cluster.create_tq(name, base_spec(stale_url, replicas=0, redis=by_secret))
        cluster.create_tq("healthy", base_spec(redis_url, replicas=0, heartbeat=LONG_LEASE))

        def all_refused() -> bool:
            for name in refused:
                condition = cluster.condition(name, "RedisReachable")
                if condition is None or condition["reason"] != "RedisAuthRefused":
                    return False
            return True

        wait_for(
            all_refused,
            timeout=3 * APISERVER_TIMEOUT_S,
            interval=0.5,
            what=lambda: f"RedisReachable=False/RedisAuthRefused on all:\n{operator.tail(3000)}",
        )

        # The session's operator, when an earlier test started it, watches every namespace
        # too: it parks the same server and probes it as well. Count once both have parked
        # it (a second with at most one connection in it, each INFO's own counted).
        def quiet_second() -> bool:
            start = connections_received(refusing)
            time.sleep(1.0)
            return connections_received(refusing) - start - 1 <= 1

        wait_for(
            quiet_second,
            timeout=3 * APISERVER_TIMEOUT_S,
            interval=0.1,
            what="a second with at most one connection to the refusing Redis",
        )
        before = connections_received(refusing) + 1  # our own INFO's connection

        # The healthy queue meanwhile: a worker pod holding tasks is deleted.
        cluster.create_pod("healthy-a", "healthy")
        queue = queue_of(kube_namespace, "healthy")
        hold_tasks(make_broker, queue, "healthy-a", 3)
        cluster.core.delete_namespaced_pod("healthy-a", kube_namespace, grace_period_seconds=0)
        wait_for(
            lambda: queue.stats()["pending"] == 3,
            timeout=APISERVER_TIMEOUT_S,
            interval=APISERVER_INTERVAL_S,
            what=lambda: f"the healthy queue's tasks requeued:\n{operator.tail(3000)}",
        )
        # A window in which the old operator made REFUSED connections per sweep interval
        # (0.5 s here: 360); the parked server sees its probes' only (1, 2, 4 s apart, from
        # at most two operators: 1 to 3 counted alone, 14 once in a whole run beside the
        # session's operator). The bound is what tells the two designs apart: fewer
        # connections in the window than one per refused queue.
        time.sleep(WINDOW_S)
        attempts = connections_received(refusing) - before
        assert attempts < REFUSED, f"{attempts} connections to the refusing Redis in {WINDOW_S} s"
        # One warning per queue for the outage, not one per try (the old operator: one per
        # sweep); the session's operator, when running, warns once per queue too.
        messages = cluster.event_messages("RedisAuthRefused")
        assert REFUSED <= len(messages) <= 2 * REFUSED, len(messages)
        assert all("old-pw" not in message for message in messages)

        # The Secret gets the new password: the next probe reads it once for all the
        # queues, and they resume together (the probe is at most 30 s apart).
        cluster.core.patch_namespaced_secret(
            "redis", kube_namespace, {"stringData": {"url": refusing.url_as(password="rotated-pw")}}
        )

        def all_reachable() -> bool:
            for name in refused:
                condition = cluster.condition(name, "RedisReachable")
                if condition is None or condition["status"] != "True":
                    return False
            return True

        wait_for(
            all_reachable,
            timeout=45,
            interval=0.5,
            what=lambda: f"every queue resumed after the Secret changed:\n{operator.tail(3000)}",
        )
