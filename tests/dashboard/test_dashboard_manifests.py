"""The dashboard's kustomize component builds on the install and keeps it safe: a
read-only pod under restricted pod security, its Redis URL from a Secret by reference,
a ClusterIP Service only, and the sample Redis's NetworkPolicy letting it (and it alone
more) through. No cluster required."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from tests.manifests import MANIFESTS, REPO, admitted, by_kind, kustomize
from tests.needs import unless

pytestmark = unless(shutil.which("kubectl"), reason="needs kubectl")


def overlay(tmp_path: Path, *resources: str) -> dict[tuple[str, str], dict[str, Any]]:
    """An overlay of ``resources`` (under manifests/) with the dashboard component."""
    rel = os.path.relpath(MANIFESTS, tmp_path)
    listed = "\n".join(f"  - {rel}/{r}".rstrip("/") for r in resources)
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources:\n{listed}\ncomponents:\n  - {rel}/dashboard\n"
    )
    return by_kind(kustomize(tmp_path))


def test_the_component_adds_a_restricted_read_only_dashboard_reached_through_a_cluster_ip(
    tmp_path: Path,
) -> None:
    docs = overlay(tmp_path, "")
    deployment = docs[("Deployment", "taskfleet-dashboard")]
    service = docs[("Service", "taskfleet-dashboard")]
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]

    assert deployment["metadata"]["namespace"] == service["metadata"]["namespace"]
    assert service["metadata"]["namespace"] == "taskfleet-system"
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert container["image"].startswith("localhost/taskfleet-worker:")
    assert container["command"][:2] == ["taskfleet", "dashboard"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    [url] = [e for e in container["env"] if e["name"] == "TASKFLEET_REDIS_URL"]
    assert url == {
        "name": "TASKFLEET_REDIS_URL",
        "valueFrom": {"secretKeyRef": {"name": "taskfleet-dashboard-redis", "key": "url"}},
    }
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}


def test_the_sample_redis_lets_the_dashboard_through_and_nobody_else_new(tmp_path: Path) -> None:
    docs = overlay(tmp_path, "")
    policy = docs[("NetworkPolicy", "redis")]
    dashboard_pod = docs[("Deployment", "taskfleet-dashboard")]["spec"]["template"]["metadata"][
        "labels"
    ]

    assert admitted(policy, dashboard_pod, "taskfleet-system")
    assert not admitted(policy, dashboard_pod, "default")
    assert not admitted(policy, {"app": "curious"}, "taskfleet-system")


def test_the_component_builds_without_the_sample_redis(tmp_path: Path) -> None:
    docs = overlay(tmp_path, "operator")
    assert ("Deployment", "taskfleet-dashboard") in docs
    assert ("NetworkPolicy", "redis") not in docs


def test_the_worker_image_installs_the_dashboard_extra() -> None:
    dockerfile = (REPO / "worker-image" / "Dockerfile").read_text()
    assert '"/src[metrics,dashboard]"' in dockerfile


def test_the_actions_token_comes_from_an_optional_secret_and_actions_stay_off_by_default(
    tmp_path: Path,
) -> None:
    docs = overlay(tmp_path, "")
    [container] = docs[("Deployment", "taskfleet-dashboard")]["spec"]["template"]["spec"][
        "containers"
    ]
    [token] = [e for e in container["env"] if e["name"] == "TASKFLEET_DASHBOARD_TOKEN"]
    assert token["valueFrom"]["secretKeyRef"] == {
        "name": "taskfleet-dashboard-token",
        "key": "token",
        "optional": True,
    }
    assert "--actions" not in container["command"]


def test_the_demos_overlay_renders_the_install_the_dashboard_and_its_url_secret() -> None:
    docs = by_kind(kustomize(REPO / "e2e" / "manifests" / "dashboard"))
    secret = docs[("Secret", "taskfleet-dashboard-redis")]
    assert secret["metadata"]["namespace"] == "taskfleet-system"
    assert ("Deployment", "taskfleet-dashboard") in docs
    assert ("Deployment", "taskfleet-operator") in docs
    policy = docs[("NetworkPolicy", "redis")]
    labels = docs[("Deployment", "taskfleet-dashboard")]["spec"]["template"]["metadata"]["labels"]
    assert admitted(policy, labels, "taskfleet-system")
