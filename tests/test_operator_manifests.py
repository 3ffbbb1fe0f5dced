"""The kustomize manifests build, and say what the install needs (no cluster required)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from taskfleet_operator import crdgen
from taskfleet_operator.models import TaskQueueSpec

from tests.fixtures_kube import KubeApiserver
from tests.fixtures_operator import kubectl

REPO = Path(__file__).resolve().parents[1]
MANIFESTS = REPO / "manifests"

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")


def kustomize(path: Path) -> list[dict[str, Any]]:
    result = subprocess.run(
        ["kubectl", "kustomize", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind(docs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(doc["kind"], doc["metadata"]["name"]): doc for doc in docs}


def test_the_install_holds_the_crd_rbac_operator_and_redis_in_taskfleet_system() -> None:
    docs = by_kind(kustomize(MANIFESTS))

    assert docs[("CustomResourceDefinition", crdgen.CRD_NAME)] == crdgen.build_crd()
    for key in [
        ("Namespace", "taskfleet-system"),
        ("ServiceAccount", "taskfleet-operator"),
        ("ClusterRole", "taskfleet-operator"),
        ("ClusterRoleBinding", "taskfleet-operator"),
        ("Deployment", "taskfleet-operator"),
        ("Deployment", "redis"),
        ("Service", "redis"),
    ]:
        assert key in docs, key
    for doc in docs.values():
        if doc["kind"] in ("ServiceAccount", "Deployment", "Service"):
            assert doc["metadata"]["namespace"] == "taskfleet-system", doc["metadata"]["name"]


def test_the_operator_runs_restricted_with_a_liveness_probe_on_its_own_account() -> None:
    operator = by_kind(kustomize(MANIFESTS))[("Deployment", "taskfleet-operator")]
    pod = operator["spec"]["template"]["spec"]
    container = pod["containers"][0]

    assert operator["spec"]["replicas"] == 1
    assert operator["spec"]["strategy"] == {"type": "Recreate"}
    assert pod["serviceAccountName"] == "taskfleet-operator"
    assert container["image"] == "localhost/taskfleet-operator:dev"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }


def test_the_sample_redis_image_is_local_and_never_pulled_when_present() -> None:
    redis = by_kind(kustomize(MANIFESTS / "redis"))[("Deployment", "redis")]
    container = redis["spec"]["template"]["spec"]["containers"][0]
    base = yaml.safe_load((MANIFESTS / "redis" / "deployment.yaml").read_text())

    assert base["spec"]["template"]["spec"]["containers"][0]["image"] == (
        "localhost/taskfleet-redis:dev"
    )
    # The tag is the kustomization's to choose (the local builds produce a versioned one).
    assert container["image"].startswith("localhost/taskfleet-redis:")
    assert container["imagePullPolicy"] == "IfNotPresent"


def test_every_rbac_rule_is_commented() -> None:
    text = (MANIFESTS / "rbac" / "cluster_role.yaml").read_text()
    blocks = text.split("rules:", 1)[1].strip().split("\n\n")
    assert len(blocks) >= 8
    for block in blocks:
        assert block.lstrip().startswith("#"), block


def test_every_sample_taskqueue_is_a_valid_spec() -> None:
    docs = kustomize(MANIFESTS / "samples")
    queues = [doc for doc in docs if doc["kind"] == "TaskQueue"]

    assert queues
    for queue in queues:
        TaskQueueSpec.model_validate(queue["spec"])


def test_the_whole_install_passes_server_side_validation(
    kube_apiserver: KubeApiserver, taskqueue_crd: str
) -> None:
    kubectl(kube_apiserver, "apply", "-f", str(MANIFESTS / "namespace.yaml"))

    result = kubectl(kube_apiserver, "apply", "-k", str(MANIFESTS), "--dry-run=server")

    assert "deployment.apps/taskfleet-operator" in result.stdout
    assert "clusterrole.rbac.authorization.k8s.io/taskfleet-operator" in result.stdout
    samples = kubectl(kube_apiserver, "apply", "-k", str(MANIFESTS / "samples"), "--dry-run=server")
    assert "taskqueue.taskfleet.dev/" in samples.stdout
