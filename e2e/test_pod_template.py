"""A TaskQueue with a pod template on a real cluster: its pods carry the template's volume
and mount, envFrom ConfigMap, native sidecar, labels and annotations, in a namespace that
enforces restricted pod security, and run their tasks; changing the template rolls the
fleet without losing a task."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from e2e.lib.fleet import WORKER_IMAGE, Fleet
from e2e.lib.kube import CLUSTER_ERRORS, CLUSTER_INTERVAL_S, Kube, is_ready
from tests.polling import wait_for

pytest_plugins = ["e2e.lib.fixtures"]

#: A sidecar that only waits, and exits at once on SIGTERM (the pod's grace bounds it).
SIDECAR_COMMAND = [
    "python",
    "-c",
    "import signal, sys; signal.signal(signal.SIGTERM, lambda *_: sys.exit(0)); signal.pause()",
]


def template(label: str) -> dict[str, Any]:
    return {
        "metadata": {
            "labels": {"e2e.taskfleet.dev/team": label},
            "annotations": {"e2e.taskfleet.dev/owner": "pod-template-test"},
        },
        "spec": {
            "volumes": [{"name": "settings", "configMap": {"name": "app-settings"}}],
            "initContainers": [
                {
                    "name": "sidecar",
                    "image": WORKER_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "restartPolicy": "Always",
                    "command": SIDECAR_COMMAND,
                    "resources": {
                        "requests": {"cpu": "5m", "memory": "16Mi"},
                        "limits": {"memory": "64Mi"},
                    },
                }
            ],
        },
        "worker": {
            "volumeMounts": [{"name": "settings", "mountPath": "/etc/app", "readOnly": True}],
            "envFrom": [{"configMapRef": {"name": "app-settings"}}],
        },
    }


def settings_map(kube: Kube) -> None:
    assert kube.namespace is not None
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "app-settings", "namespace": kube.namespace},
            "data": {"APP_MODE": "from-configmap"},
        }
    )


def sidecar_running(pod: dict[str, Any]) -> bool:
    statuses = pod.get("status", {}).get("initContainerStatuses") or []
    return any(
        s["name"] == "sidecar" and s.get("started") and "running" in s.get("state", {})
        for s in statuses
    )


def test_a_templated_fleet_carries_its_volume_envfrom_sidecar_labels_and_runs_its_tasks(
    namespace: Kube, make_fleet: Callable[..., Fleet], figures: Callable[[str], None]
) -> None:
    settings_map(namespace)
    fleet = make_fleet("templated", replicas=1, template=template("blue"))
    (pod_name,) = fleet.wait_ready(1)
    pod = fleet.kube.get("pod", pod_name)
    assert pod is not None

    assert pod["metadata"]["labels"]["e2e.taskfleet.dev/team"] == "blue"
    assert pod["metadata"]["labels"]["taskfleet.dev/queue"] == "templated"
    assert pod["metadata"]["annotations"]["e2e.taskfleet.dev/owner"] == "pod-template-test"
    assert sidecar_running(pod), pod.get("status", {}).get("initContainerStatuses")
    read = fleet.kube.exec(
        pod_name,
        "python",
        "-c",
        "import os; print(open('/etc/app/APP_MODE').read(), os.environ['APP_MODE'])",
        container="worker",
    )
    assert read.split() == ["from-configmap", "from-configmap"]

    ids = fleet.queue.enqueue_sleepers(6, seconds=0.5)
    accounting = fleet.queue.wait_settled(ids, timeout=120)
    accounting.assert_nothing_lost()
    figures(f"templated fleet: {accounting.summary()}")


def test_changing_the_template_rolls_the_fleet_and_no_task_is_lost(
    namespace: Kube, make_fleet: Callable[..., Fleet], figures: Callable[[str], None]
) -> None:
    settings_map(namespace)
    fleet = make_fleet("rolled", replicas=2, concurrency=2, template=template("blue"))
    old_pods = set(fleet.wait_ready(2))
    ids = fleet.queue.enqueue_sleepers(24, seconds=3)
    wait_for(
        lambda: fleet.queue.stats()["running"] > 0,
        timeout=60,
        interval=CLUSTER_INTERVAL_S,
        what="tasks running before the template changes",
        ignoring=CLUSTER_ERRORS,
    )

    fleet.kube.patch_merge(
        "taskqueue",
        "rolled",
        {"spec": {"template": {"metadata": {"labels": {"e2e.taskfleet.dev/team": "green"}}}}},
    )

    def rolled() -> bool:
        pods = fleet.pods()
        ready = [p for p in pods if is_ready(p) and not p["metadata"].get("deletionTimestamp")]
        return len(ready) == 2 and all(
            p["metadata"]["labels"].get("e2e.taskfleet.dev/team") == "green"
            and p["metadata"]["name"] not in old_pods
            for p in ready
        )

    wait_for(
        rolled,
        timeout=300,
        interval=CLUSTER_INTERVAL_S,
        what="the fleet rolled to green",
        ignoring=CLUSTER_ERRORS,
    )
    accounting = fleet.queue.wait_settled(ids, timeout=300)
    accounting.assert_nothing_lost()
    figures(f"template change rolled 2 pods under 24 x 3 s tasks: {accounting.summary()}")
