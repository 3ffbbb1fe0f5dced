"""The chart on the oldest Kubernetes minor docs/compatibility.md claims (K8S_OLDEST_VERSION
in e2e/cluster/versions.env), against that version's own kube-apiserver and etcd.

A real ``helm install`` of charts/taskfleet: the CRDs established, the RBAC, the operator's
Deployment and the admission policy (served from 1.30) stored. Then the operator runs as the
chart's ServiceAccount, so the chart's rules are its only rights and the chart's admission
policy judges each of its writes there, and turns a TaskQueue into its Deployment; the CRD's
validation rules refuse a bad TaskQueue with their message. As in the rest of this tier no
kubelet runs: objects are stored and reconciled, no pod starts (the whole system runs on the
newest minor, e2e/). ``make k8s-bins`` builds that kube-apiserver (build-k8s.sh --oldest).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from taskfleet_operator.models import AUTOSCALE_ORDER_MESSAGE

from tests.fixtures_kube import KubeApiserver
from tests.fixtures_operator import (
    APISERVER_INTERVAL_S,
    APISERVER_TIMEOUT_S,
    base_spec,
    kubectl,
    manifest,
    running_operator,
    wait_established,
)
from tests.helm import CHART, VERSIONS_ENV, helm
from tests.needs import need
from tests.polling import wait_for

pytestmark = pytest.mark.apiserver
RELEASE = "taskfleet"  # names its objects as manifests/ does: taskfleet-operator, ...
NAMESPACE = "taskfleet-system"


def oldest_version() -> str:
    for line in VERSIONS_ENV.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "K8S_OLDEST_VERSION":
            return value.strip()
    raise LookupError(f"no K8S_OLDEST_VERSION in {VERSIONS_ENV}")


@pytest.fixture(scope="module")
def oldest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeApiserver]:
    """etcd + the oldest claimed minor's kube-apiserver (skipped when not built; CI fails)."""
    version = oldest_version()
    cache = Path(os.environ.get("TASKFLEET_CACHE") or Path.home() / ".cache" / "taskfleet")
    bin_dir = cache / "k8s" / version / "bin"
    if not (bin_dir / "kube-apiserver").is_file():
        reason = f"needs kube-apiserver {version} in {bin_dir} (make k8s-bins builds it)"
        need(False, reason)
    server = KubeApiserver(tmp_path_factory.mktemp("kube-oldest"), bin_dir=bin_dir)
    try:
        server.start()
        yield server
    finally:
        server.stop()


def operator_kubeconfig(server: KubeApiserver, into: Path) -> Path:
    """A kubeconfig for the chart's operator ServiceAccount: the chart's RBAC, nothing more."""
    token = kubectl(
        server, "-n", NAMESPACE, "create", "token", f"{RELEASE}-operator", "--duration=1h"
    ).stdout.strip()
    config = json.loads(server.kubeconfig.read_text())
    config["users"] = [{"name": "admin", "user": {"token": token}}]
    path = into / "kubeconfig"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


def test_the_chart_installs_and_its_operator_reconciles_on_the_oldest_claimed_kubernetes(
    oldest: KubeApiserver, redis_url: str, tmp_path: Path
) -> None:
    served = oldest.request("/version")["gitVersion"]
    assert served == oldest_version(), f"the fixture runs {served}"
    env = oldest.env()
    helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace", env=env)
    wait_established(oldest, "taskqueues.taskfleet.dev", "clusterkopfpeerings.kopf.dev")
    kubectl(oldest, "-n", NAMESPACE, "get", f"deployment/{RELEASE}-operator")
    # 1.30 serves ValidatingAdmissionPolicy v1: "auto" installed it, and it is in force below.
    kubectl(oldest, "get", f"validatingadmissionpolicy/{RELEASE}-operator-writes")
    kubectl(oldest, "get", f"validatingadmissionpolicybinding/{RELEASE}-operator-writes")

    namespace = "queues"
    kubectl(oldest, "create", "namespace", namespace)
    kubectl(oldest, "-n", namespace, "create", "serviceaccount", "default")
    kubeconfig = operator_kubeconfig(oldest, tmp_path)
    with running_operator(oldest, kubeconfig, tmp_path / "operator.log") as operator:
        spec = base_spec(redis_url, replicas=2)
        kubectl(oldest, "-n", namespace, "apply", "-f", "-", stdin=manifest("emails", spec))

        def deployment() -> dict[str, Any] | None:
            found = kubectl(
                oldest, "-n", namespace, "get", "deployments",
                "-l", "taskfleet.dev/queue=emails", "-o", "json",
            ).stdout  # fmt: skip
            items: list[dict[str, Any]] = json.loads(found)["items"]
            return items[0] if items else None

        made = wait_for(
            deployment,
            timeout=APISERVER_TIMEOUT_S * 2,
            interval=APISERVER_INTERVAL_S,
            what=lambda: f"the operator's Deployment on {oldest_version()}:\n{operator.tail()}",
        )
        assert made["spec"]["replicas"] == 2
        assert made["metadata"]["ownerReferences"][0]["name"] == "emails"
        assert operator.alive(), operator.tail()
        bad = base_spec(redis_url, autoscale={"minReplicas": 3, "maxReplicas": 1})
        refused = kubectl(
            oldest, "-n", namespace, "apply", "-f", "-", stdin=manifest("bad", bad), check=False
        )
        assert refused.returncode != 0
        assert AUTOSCALE_ORDER_MESSAGE in refused.stderr, refused.stderr
        kubectl(oldest, "-n", namespace, "delete", "taskqueue", "emails", "--timeout=60s")

    helm("uninstall", RELEASE, "--namespace", NAMESPACE, env=env)
    kubectl(oldest, "get", "crd/taskqueues.taskfleet.dev", "crd/clusterkopfpeerings.kopf.dev")


def test_the_oldest_claimed_kubernetes_is_the_one_docs_compatibility_names() -> None:
    """The matrix's floor and the version built and tested here are one value."""
    minor = ".".join(oldest_version().removeprefix("v").split(".")[:2])
    doc = (CHART.parents[1] / "docs" / "compatibility.md").read_text()
    assert f"**{minor}**" in doc and oldest_version() in doc, (
        f"docs/compatibility.md does not claim {minor} ({oldest_version()})"
    )
