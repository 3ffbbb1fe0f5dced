"""spec.template through the operator on a real kube-apiserver: the Deployment it applies
carries the template and is accepted (the apiserver checks the merged pod as core/v1),
a change of the template changes the pod template (a rollout), and a mistake in a part
the CRD keeps as given is reported on the TaskQueue."""

from __future__ import annotations

from typing import Any

import pytest

from tests.fixtures_cluster import Cluster
from tests.fixtures_operator import APISERVER_INTERVAL_S, APISERVER_TIMEOUT_S, base_spec
from tests.polling import wait_for

pytestmark = pytest.mark.apiserver

TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"team": "media"}},
    "spec": {
        "imagePullSecrets": [{"name": "registry"}],
        "volumes": [{"name": "ca", "configMap": {"name": "redis-ca", "optional": True}}],
        "initContainers": [
            {
                "name": "proxy",
                "image": "localhost/proxy:dev",
                "restartPolicy": "Always",
                "startupProbe": {"tcpSocket": {"port": 5432}},
            }
        ],
    },
    "worker": {
        "volumeMounts": [{"name": "ca", "mountPath": "/etc/redis-ca", "readOnly": True}],
        "envFrom": [{"configMapRef": {"name": "app"}}],
    },
}


def deployment_of(cluster: Cluster, name: str, check: Any = bool) -> Any:
    def probe() -> Any:
        deployment = cluster.deployment(name)
        return deployment if deployment is not None and check(deployment) else None

    return wait_for(
        probe, timeout=APISERVER_TIMEOUT_S, interval=APISERVER_INTERVAL_S, what=f"{name} Deployment"
    )


def test_the_operator_applies_a_templated_deployment_the_apiserver_accepts(
    cluster: Cluster, redis_url: str
) -> None:
    cluster.create_tq("tpl", base_spec(redis_url, template=TEMPLATE))

    pod = deployment_of(cluster, "tpl").spec.template
    assert pod.metadata.labels["team"] == "media"
    assert pod.metadata.labels["taskfleet.dev/queue"] == "tpl"
    (proxy,) = pod.spec.init_containers
    assert (proxy.name, proxy.restart_policy) == ("proxy", "Always")
    assert proxy.security_context.allow_privilege_escalation is False
    assert proxy.security_context.capabilities.drop == ["ALL"]
    assert [s.name for s in pod.spec.image_pull_secrets] == ["registry"]
    worker = pod.spec.containers[0]
    assert worker.command == ["taskfleet", "worker"]
    assert [m.mount_path for m in worker.volume_mounts] == ["/tmp", "/etc/redis-ca"]
    assert worker.env_from[0].config_map_ref.name == "app"


def test_changing_the_template_changes_the_pod_template_so_the_fleet_rolls(
    cluster: Cluster, redis_url: str
) -> None:
    cluster.create_tq("roll", base_spec(redis_url, template=TEMPLATE))
    first = deployment_of(cluster, "roll").spec.template.metadata.annotations
    first_hash = first["taskfleet.dev/spec-hash"]

    cluster.patch_tq("roll", {"template": {"metadata": {"labels": {"team": "search"}}}})

    rolled = deployment_of(
        cluster, "roll", lambda d: d.spec.template.metadata.labels.get("team") == "search"
    )
    assert rolled.spec.template.metadata.annotations["taskfleet.dev/spec-hash"] != first_hash


def test_a_mistake_in_a_part_kept_as_given_is_reported_on_the_taskqueue(
    cluster: Cluster, redis_url: str
) -> None:
    bad = {"spec": {"volumes": [{"name": "ca", "configMap": {"name": "x", "defaultMode": "rw"}}]}}
    cluster.create_tq("badvol", base_spec(redis_url, template=bad))

    def rejected() -> Any:
        condition = cluster.condition("badvol", "Ready")
        return condition if condition and condition["reason"] == "DeploymentRejected" else None

    condition = wait_for(rejected, timeout=APISERVER_TIMEOUT_S, interval=APISERVER_INTERVAL_S)
    assert "defaultMode" in condition["message"]
