"""Two operator replicas through kopf's peering: the older one works, the other waits
doing nothing, and takes over when the working one is SIGKILLed (real operator processes
against a real apiserver, with the RBAC of manifests/rbac)."""

from __future__ import annotations

import os
import secrets
import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from taskfleet_operator.settings import OperatorSettings, SettingsError, seniority_priority

from tests.fixtures_kube import KubeApiserver
from tests.fixtures_operator import (
    APISERVER_INTERVAL_S,
    APISERVER_TIMEOUT_S,
    GROUP,
    PLURAL,
    REPO,
    VERSION,
    OperatorProcess,
    base_spec,
    kubectl,
    running_operator,
    wait_established,
)
from tests.fixtures_redis import free_port
from tests.polling import wait_for

pytestmark = pytest.mark.apiserver

LIFETIME_S = 5  # the replicas' keep-alive lifetime here (the Deployment uses 15)
RESUMED = "Resuming operations after the pause"


@pytest.fixture
def ha_namespace(kube_apiserver: KubeApiserver) -> Iterator[str]:
    kubectl(kube_apiserver, "apply", "-f", str(REPO / "manifests/operator/peering.yaml"))
    wait_established(kube_apiserver, "clusterkopfpeerings.kopf.dev")
    name = f"ha-{secrets.token_hex(3)}"
    with kube_apiserver.api_client() as api:
        client.CoreV1Api(api).create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=name))
        )
    yield name


def _wait_leading(replica: OperatorProcess, who: str, timeout: float = APISERVER_TIMEOUT_S) -> None:
    """Wait until ``replica`` has resumed: it leads."""
    wait_for(
        lambda: RESUMED in replica.tail(10**6),
        timeout=timeout,
        interval=APISERVER_INTERVAL_S,
        what=lambda: f"{who} to lead:\n{replica.tail(3000)}",
    )


def _sweeps_of(namespace: str) -> str:
    """What a replica's log says when it sweeps the queue ``q`` of ``namespace``."""
    return f"sweeps of {namespace}/q "


def _create_queue(
    custom: client.CustomObjectsApi,
    namespace: str,
    redis_url: str,
    *,
    served_by: OperatorProcess,
    who: str,
) -> None:
    """TaskQueue ``q`` with no pods (only its sweeps show which replica serves it), once
    ``served_by``'s log shows it sweeping the queue."""
    served = _sweeps_of(namespace)
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "TaskQueue",
        "metadata": {"name": "q"},
        "spec": base_spec(redis_url, replicas=0),
    }
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
    wait_for(
        lambda: served in served_by.tail(10**6),
        timeout=APISERVER_TIMEOUT_S,
        interval=APISERVER_INTERVAL_S,
        what=lambda: f"{who} to sweep the queue:\n{served_by.tail(3000)}",
    )


def test_the_older_replica_works_the_other_waits_and_takes_over_when_it_is_killed(  # noqa: PLR0917
    kube_apiserver: KubeApiserver,
    taskqueue_crd: str,
    operator_kubeconfig: Path,
    ha_namespace: str,
    redis_url: str,
    tmp_path: Path,
) -> None:
    peering = f"ha-{secrets.token_hex(4)}"
    env = {
        "TASKFLEET_WATCH_NAMESPACES": ha_namespace,
        "TASKFLEET_PEERING": peering,
        "TASKFLEET_PEERING_LIFETIME": str(LIFETIME_S),
    }
    served = _sweeps_of(ha_namespace)
    with running_operator(
        kube_apiserver, operator_kubeconfig, tmp_path / "a.log", POD_ID="replica-a", **env
    ) as first:
        _wait_leading(first, "the first replica")
        with (
            running_operator(
                kube_apiserver, operator_kubeconfig, tmp_path / "b.log", POD_ID="replica-b", **env
            ) as second,
            kube_apiserver.api_client() as api,
        ):
            custom = client.CustomObjectsApi(api)
            _create_queue(
                custom,
                ha_namespace,
                redis_url,
                served_by=first,
                who="the working replica",
            )

            def both_peers() -> dict[str, Any] | None:
                found: Any = custom.get_cluster_custom_object(
                    "kopf.dev", "v1", "clusterkopfpeerings", peering
                )
                status: dict[str, Any] = found.get("status") or {}
                return status if set(status) == {"replica-a", "replica-b"} else None

            # the younger replica writes its keep-alive once it has started, which a busy
            # machine may delay past the queue's first sweep
            peers = wait_for(
                both_peers,
                timeout=APISERVER_TIMEOUT_S,
                interval=APISERVER_INTERVAL_S,
                what=lambda: f"both replicas in the peering object:\n{second.tail(3000)}",
            )
            assert peers["replica-a"]["priority"] > peers["replica-b"]["priority"]
            # the younger replica, started paused, never resumed nor touched the queue
            assert RESUMED not in second.tail(10**6)
            assert served not in second.tail(10**6)

            first.process.kill()  # SIGKILL: no goodbye in the peering object
            killed = time.monotonic()
            first.process.wait()
            wait_for(
                lambda: served in second.tail(10**6) and RESUMED in second.tail(10**6),
                timeout=LIFETIME_S + 20,
                interval=APISERVER_INTERVAL_S,
                what=lambda: f"the waiting replica to take over:\n{second.tail(3000)}",
            )
            print(
                f"operator handover: the standby swept the queue {time.monotonic() - killed:.1f}s"
                f" after the active replica's SIGKILL (peering lifetime {LIFETIME_S}s)"
            )
            custom.delete_namespaced_custom_object(GROUP, VERSION, ha_namespace, PLURAL, "q")


def test_a_replica_that_exits_cleanly_hands_over_at_once(
    kube_apiserver: KubeApiserver,
    taskqueue_crd: str,
    operator_kubeconfig: Path,
    ha_namespace: str,
    tmp_path: Path,
) -> None:
    """A rollout: SIGTERM makes kopf remove its keep-alive, so the other replica does not
    wait out the lifetime (set long here, so only the goodbye can explain a quick resume)."""
    env = {
        "TASKFLEET_WATCH_NAMESPACES": ha_namespace,
        "TASKFLEET_PEERING": f"ha-{secrets.token_hex(4)}",
        "TASKFLEET_PEERING_LIFETIME": "300",
    }
    with running_operator(
        kube_apiserver, operator_kubeconfig, tmp_path / "a.log", POD_ID="old", **env
    ) as old:
        _wait_leading(old, "the old replica")
        with running_operator(
            kube_apiserver, operator_kubeconfig, tmp_path / "b.log", POD_ID="new", **env
        ) as new:
            assert RESUMED not in new.tail(10**6)
            old.process.terminate()
            old.process.wait(timeout=30)
            _wait_leading(new, "the new replica", timeout=60)  # far below the 300 s lifetime


def _leader(port: int) -> float | None:
    """The replica's taskfleet_operator_leader, as scraped."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    for line in text.splitlines():
        if line.startswith("taskfleet_operator_leader "):
            return float(line.split()[1])
    return None


def test_exactly_one_replica_reports_it_leads_and_the_standby_does_when_it_takes_over(
    kube_apiserver: KubeApiserver,
    taskqueue_crd: str,
    operator_kubeconfig: Path,
    ha_namespace: str,
    tmp_path: Path,
) -> None:
    env = {
        "TASKFLEET_WATCH_NAMESPACES": ha_namespace,
        "TASKFLEET_PEERING": f"ha-{secrets.token_hex(4)}",
        "TASKFLEET_PEERING_LIFETIME": str(LIFETIME_S),
    }
    first_port, second_port = free_port(), free_port()
    with running_operator(
        kube_apiserver,
        operator_kubeconfig,
        tmp_path / "a.log",
        POD_ID="lead-a",
        TASKFLEET_METRICS_PORT=str(first_port),
        **env,
    ) as first:
        _wait_leading(first, "the first replica")
        with running_operator(
            kube_apiserver,
            operator_kubeconfig,
            tmp_path / "b.log",
            POD_ID="lead-b",
            TASKFLEET_METRICS_PORT=str(second_port),
            **env,
        ) as second:
            wait_for(
                lambda: (_leader(first_port), _leader(second_port)) == (1.0, 0.0),
                timeout=APISERVER_TIMEOUT_S,
                interval=APISERVER_INTERVAL_S,
                what="the first replica alone reporting that it leads",
            )
            first.process.kill()
            first.process.wait()
            wait_for(
                lambda: _leader(second_port) == 1.0,
                timeout=LIFETIME_S + 20,
                interval=APISERVER_INTERVAL_S,
                what=lambda: f"the standby to report that it leads:\n{second.tail(3000)}",
            )


def _queue_series(port: int, queue: str) -> bool:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    return f'queue="{queue}"' in text


def test_a_woken_older_replica_leads_again_and_the_paused_one_stops_exporting_its_queues(  # noqa: PLR0917
    kube_apiserver: KubeApiserver,
    taskqueue_crd: str,
    operator_kubeconfig: Path,
    ha_namespace: str,
    redis_url: str,
    tmp_path: Path,
) -> None:
    """The active replica frozen (SIGSTOP: a node hung, then back): the other takes over,
    then pauses when the older one wakes and renews its keep-alive. Paused, it drops the
    queues it served, so Prometheus never sums one queue's series from two replicas."""
    env = {
        "TASKFLEET_WATCH_NAMESPACES": ha_namespace,
        "TASKFLEET_PEERING": f"ha-{secrets.token_hex(4)}",
        "TASKFLEET_PEERING_LIFETIME": str(LIFETIME_S),
    }
    served = _sweeps_of(ha_namespace)
    queue = f"{ha_namespace}.q"
    older_port, younger_port = free_port(), free_port()
    with running_operator(
        kube_apiserver,
        operator_kubeconfig,
        tmp_path / "a.log",
        POD_ID="older",
        TASKFLEET_METRICS_PORT=str(older_port),
        **env,
    ) as older:
        _wait_leading(older, "the older replica")
        with (
            running_operator(
                kube_apiserver,
                operator_kubeconfig,
                tmp_path / "b.log",
                POD_ID="younger",
                TASKFLEET_METRICS_PORT=str(younger_port),
                **env,
            ) as younger,
            kube_apiserver.api_client() as api,
        ):
            custom = client.CustomObjectsApi(api)
            _create_queue(
                custom,
                ha_namespace,
                redis_url,
                served_by=older,
                who="the older replica",
            )
            assert not _queue_series(younger_port, queue)

            os.kill(older.process.pid, signal.SIGSTOP)
            try:
                wait_for(
                    lambda: served in younger.tail(10**6) and _queue_series(younger_port, queue),
                    timeout=LIFETIME_S + 20,
                    interval=APISERVER_INTERVAL_S,
                    what=lambda: f"the younger replica to take over:\n{younger.tail(3000)}",
                )
            finally:
                os.kill(older.process.pid, signal.SIGCONT)
            wait_for(
                lambda: (
                    "Pausing operations in favour of" in younger.tail(10**6)
                    and not _queue_series(younger_port, queue)
                ),
                timeout=LIFETIME_S + 20,
                interval=APISERVER_INTERVAL_S,
                what=lambda: (
                    f"the younger replica to pause and drop the queue:\n{younger.tail(3000)}"
                ),
            )
            assert _queue_series(older_port, queue), "the woken older replica serves the queue"
            custom.delete_namespaced_custom_object(GROUP, VERSION, ha_namespace, PLURAL, "q")


def test_peering_settings_are_checked_and_older_replicas_rank_higher() -> None:
    assert OperatorSettings.from_env({}).peering == ""
    settings = OperatorSettings.from_env(
        {"TASKFLEET_PEERING": "taskfleet", "TASKFLEET_PEERING_LIFETIME": "20"}
    )
    assert (settings.peering, settings.peering_lifetime_s) == ("taskfleet", 20.0)
    with pytest.raises(SettingsError, match="TASKFLEET_PEERING='Bad_Name'"):
        OperatorSettings.from_env({"TASKFLEET_PEERING": "Bad_Name"})
    with pytest.raises(SettingsError, match="TASKFLEET_PEERING_LIFETIME"):
        OperatorSettings.from_env({"TASKFLEET_PEERING": "x", "TASKFLEET_PEERING_LIFETIME": "1"})
    older = seniority_priority(1_000_000_000_000_000)
    younger = seniority_priority(1_000_000_001_000_000)  # one millisecond later
    assert older > younger
