"""A TaskQueue from `kubectl apply` to a working, honest fleet; bad manifests turned away."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest

from e2e.lib.fleet import Fleet, Operator, taskqueue_manifest
from e2e.lib.kube import CLUSTER_ERRORS, CLUSTER_INTERVAL_S, Kube, KubectlError
from e2e.lib.portforward import PortForward
from tests.polling import wait_for

pytest_plugins = ["e2e.lib.fixtures"]

SHELLS = {"sh", "/bin/sh", "bash", "/bin/bash", "/usr/bin/env"}


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions", []) if c.get("type") == kind), None)


def test_an_applied_taskqueue_becomes_a_draining_deployment_that_works_and_reports_the_truth(
    make_fleet: Callable[..., Fleet],
) -> None:
    fleet = make_fleet(
        "lifecycle", replicas=2, concurrency=2, maxTaskDurationSeconds=20, maxAttempts=2
    )

    deployment = fleet.deployment()
    pod_spec = deployment["spec"]["template"]["spec"]
    container = fleet.container()
    # The drain deadline is the longest a task may run; the grace period must cover it.
    assert pod_spec["terminationGracePeriodSeconds"] > 20
    # Exec form, no shell: SIGTERM reaches the worker itself.
    command = [*container.get("command", []), *container.get("args", [])]
    assert command, "the worker container must name its command"
    assert command[0] not in SHELLS, command
    pre_stop = container["lifecycle"]["preStop"]["exec"]["command"]
    assert "drain" in pre_stop, pre_stop
    assert deployment["spec"]["replicas"] == 2
    assert (
        deployment["spec"]["template"]["metadata"]["labels"]["taskfleet.dev/queue"] == "lifecycle"
    )

    pods = fleet.wait_ready(2)
    # PID 1 of the container is the worker (no shell or init in between).
    cmdline = fleet.kube.exec(pods[0], "cat", "/proc/1/cmdline").replace("\0", " ")
    assert "taskfleet" in cmdline and "worker" in cmdline, cmdline

    ids = fleet.queue.enqueue_sleepers(24, seconds=3)
    # A payload the handler refuses: retried, then dead with a reason the status counts.
    bad = fleet.queue.enqueue_sleepers(1, seconds=-1)

    busy = fleet.wait_status(
        "pending and running tasks while the fleet works",
        lambda s: (s.get("pending") or 0) > 0 and (s.get("running") or 0) > 0,
        timeout=45,
    )
    assert busy["running"] <= 4, f"more tasks running than 2 pods x 2 slots: {busy}"

    accounting = fleet.queue.wait_settled(ids + bad, timeout=120)
    accounting.assert_nothing_lost(allow_dead=True)
    assert set(accounting.dead) == set(bad), accounting.summary()
    assert accounting.done == set(ids)
    ran_on = {r["pod"] for r in fleet.queue.executions()}
    assert ran_on <= set(pods), f"executions on pods outside the fleet: {ran_on - set(pods)}"

    status = fleet.wait_status(
        "a settled fleet: 2 ready, nothing pending or running, one dead",
        lambda s: (
            s.get("replicas") == 2
            and s.get("readyReplicas") == 2
            and s.get("pending") == 0
            and s.get("running") == 0
            and s.get("dead") == 1
            and s.get("livePods") == 2
        ),
        timeout=60,
    )
    ready = _condition(status, "Ready")
    assert ready is not None and ready["status"] == "True", status
    redis_ok = _condition(status, "RedisReachable")
    assert redis_ok is not None and redis_ok["status"] == "True", status

    columns = fleet.printer_columns()
    assert columns.get("REPLICAS") == "2", columns
    assert columns.get("READY") == "2", columns
    assert columns.get("PENDING") == "0", columns
    assert columns.get("RUNNING") == "0", columns
    assert columns.get("DEAD") == "1", columns


INVALID_SPECS: list[tuple[str, dict[str, Any], str]] = [
    ("negative-replicas", {"replicas": -1}, "replicas"),
    ("bad-handler", {"handler": "not a handler"}, "handler"),
    (
        "two-redis-sources",
        {"redis": {"url": "redis://r:6379/0", "secretRef": {"name": "s"}}},
        "set exactly one of redis.url or redis.secretRef",
    ),
    (
        "password-in-url",
        {"redis": {"url": "redis://:hunter2@redis:6379/0"}},
        "must not contain a password",
    ),
    (
        "short-heartbeat-ttl",
        {"heartbeat": {"intervalSeconds": 10, "ttlSeconds": 15}},
        "at least 2x heartbeat.intervalSeconds",
    ),
    ("reserved-env", {"env": [{"name": "TASKFLEET_QUEUE", "value": "x"}]}, "TASKFLEET_QUEUE"),
    ("unknown-field", {"replica": 3}, "replica"),
]


@pytest.mark.parametrize(
    ("spec", "message"),
    [pytest.param(spec, message, id=case) for case, spec, message in INVALID_SPECS],
)
def test_kubectl_apply_rejects_an_invalid_taskqueue_with_a_message_saying_what_to_fix(
    namespace: Kube, spec: dict[str, Any], message: str
) -> None:
    # The apiserver alone refuses these (CRD schema and CEL): no operator involved.
    assert namespace.namespace is not None
    manifest = taskqueue_manifest("invalid", namespace.namespace, **spec)
    with pytest.raises(KubectlError) as failure:
        namespace.apply(manifest)
    assert message in failure.value.stderr, failure.value.stderr
    assert "hunter2" not in failure.value.stderr, "the error echoes a password"
    assert namespace.get("taskqueue", "invalid") is None


def test_a_taskqueue_whose_redis_secret_is_missing_says_so_and_recovers_once_it_exists(
    namespace: Kube, redis_forward: PortForward, operator: Operator
) -> None:
    assert namespace.namespace is not None
    secret_name = "queue-redis"
    namespace.apply(
        taskqueue_manifest(
            "needs-secret",
            namespace.namespace,
            replicas=1,
            redis={"secretRef": {"name": secret_name, "key": "url"}},
        )
    )
    fleet = Fleet(namespace, "needs-secret", redis_forward)

    def blocked_on_secret(status: dict[str, Any]) -> bool:
        ready = _condition(status, "Ready") or {}
        naming = [
            c
            for c in status.get("conditions", [])
            if c.get("status") == "False" and secret_name in c.get("message", "")
        ]
        return ready.get("status") == "False" and bool(naming)

    fleet.wait_status(f"Ready=False and a condition naming Secret {secret_name}", blocked_on_secret)
    wait_for(
        lambda: [
            e for e in namespace.events("needs-secret") if secret_name in e.get("message", "")
        ],
        timeout=60,
        interval=CLUSTER_INTERVAL_S,
        what=f"an event on the TaskQueue naming Secret {secret_name}",
        ignoring=CLUSTER_ERRORS,
    )

    url = f"redis://redis.{namespace.namespace}.svc:6379/0"
    namespace.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": secret_name},
            "type": "Opaque",
            "data": {"url": base64.b64encode(url.encode()).decode()},
        }
    )
    fleet.wait_ready(1)
    fleet.wait_status(
        "Ready=True once the Secret exists",
        lambda s: (_condition(s, "Ready") or {}).get("status") == "True",
        timeout=90,
    )
    ids = fleet.queue.enqueue_sleepers(4, seconds=1)
    fleet.queue.wait_settled(ids, timeout=60).assert_nothing_lost()
    # The URL from the Secret never surfaces in the resource the users read.
    shown = namespace.run("get", "taskqueue", "needs-secret", "-o", "yaml").stdout
    assert url not in shown
