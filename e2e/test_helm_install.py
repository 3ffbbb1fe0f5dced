"""The Helm chart on the local cluster: install, run tasks, uninstall, and what stays.

The release gets its own namespace and serves only the test's namespace (watchNamespaces),
with its own peering. The operator that manifests/ deployed for the rest of the suite
serves every namespace, so two operators would share the test's TaskQueue: it is scaled to
zero for the test and scaled back (and checked to work) afterwards, whatever the outcome.
The queue's Redis is the test's own, outside the release, as a production Redis would be.
"""

from __future__ import annotations

import json
import secrets
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from e2e.lib.fleet import Fleet, Operator
from e2e.lib.kube import CLUSTER_ERRORS, CLUSTER_INTERVAL_S, VERSIONS, Kube
from e2e.lib.outcome import failed
from tests.helm import CHART, helm
from tests.polling import wait_for

pytest_plugins = ["e2e.lib.fixtures"]
#: The suite's operator is scaled to zero while the release's serves: run alone
#: (make e2e-local runs it after the others).
pytestmark = pytest.mark.exclusive

RELEASE = "e2e-helm"
OPERATOR_IMAGE = VERSIONS.get("OPERATOR_IMAGE", "localhost/taskfleet-operator:dev")


def _image_values() -> dict[str, str]:
    """registry/repository/tag of the operator image the suite built (versions.env)."""
    reference, _, tag = OPERATOR_IMAGE.rpartition(":")
    registry, _, repository = reference.rpartition("/")
    return {
        "registry": registry,
        "repository": repository,
        "tag": tag,
        "pullPolicy": "IfNotPresent",
    }


@pytest.fixture
def suite_operator_paused(operator: Operator) -> Iterator[Operator]:
    """The suite's operator scaled to zero for the test, then back, ready, whatever happens."""
    replicas = int(operator.deployment()["spec"]["replicas"])
    operator.kube.run("scale", f"deployment/{operator.name}", "--replicas=0")
    wait_for(
        lambda: not operator.kube.pods(operator.selector),
        timeout=90,
        interval=CLUSTER_INTERVAL_S,
        what="the suite's operator pods to stop",
        ignoring=CLUSTER_ERRORS,
    )
    try:
        yield operator
    finally:
        operator.kube.run("scale", f"deployment/{operator.name}", f"--replicas={replicas}")
        operator.kube.run(
            "rollout", "status", f"deployment/{operator.name}", "--timeout=180s", timeout=200
        )


@pytest.fixture
def release_namespace(request: pytest.FixtureRequest) -> Iterator[Kube]:
    name = f"e2e-helm-release-{secrets.token_hex(2)}"
    kube = Kube().restricted_namespace(name, **{"app.kubernetes.io/part-of": "taskfleet-e2e"})
    try:
        yield kube
    finally:
        if failed(request):
            _dump_release(kube)
        helm("uninstall", RELEASE, "--namespace", name, "--wait", check=False)
        Kube().run("delete", "namespace", name, "--wait=false", check=False)
        # Uninstall keeps the release's peering object (the test checks it); leave the
        # cluster as the suite found it.
        Kube().run(
            "delete",
            "clusterkopfpeering",
            f"{RELEASE}-taskfleet",
            "--ignore-not-found",
            check=False,
        )


def _dump_release(kube: Kube) -> None:
    """The release's side of a failure: its pods, events, peering and operator logs."""
    print(f"\n==== diagnostics for release namespace {kube.namespace} ====")
    print(
        kube.report(
            ("get", "deployments,pods", "-o", "wide"), ("get", "events", "--sort-by=.lastTimestamp")
        )
    )
    print(Kube().report(("get", "clusterkopfpeering", f"{RELEASE}-taskfleet", "-o", "yaml")))
    operator = Operator(kube.namespace or "", f"{RELEASE}-taskfleet-operator")
    print(f"--- release operator logs\n{operator.logs()}")


def _queue_data(fleet: Fleet, task_ids: list[str]) -> dict[str, Any]:
    """What users keep in the queue: every task's record, the sets and the counters."""
    return {"stats": fleet.queue.stats(), "tasks": {t: fleet.queue.task(t) for t in task_ids}}


def test_helm_install_runs_tasks_and_uninstall_keeps_crds_fleets_peering_and_redis_data(
    namespace: Kube,
    suite_operator_paused: Operator,
    release_namespace: Kube,
    make_fleet: Callable[..., Fleet],
) -> None:
    served, release_ns = namespace.namespace, release_namespace.namespace
    assert served is not None and release_ns is not None
    values = {
        "image": _image_values(),
        "watchNamespaces": [served],
        "operator": {"settings": {"sweepInterval": 1}},
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json") as file:
        json.dump(values, file)
        file.flush()
        helm(
            "install", RELEASE, str(CHART), "--namespace", release_ns, "--values", file.name,
            "--wait", "--timeout", "5m", timeout=330,
        )  # fmt: skip
    fullname = f"{RELEASE}-taskfleet"
    deployment = release_namespace.get("deployment", f"{fullname}-operator")
    assert deployment is not None and deployment["status"].get("readyReplicas") == 2
    # The cluster (1.34) serves ValidatingAdmissionPolicy: "auto" installed it.
    assert Kube().get("validatingadmissionpolicy", f"{fullname}-operator-writes") is not None

    # A fleet served by the release's operator, which also purges Redis when its TaskQueue
    # is deleted: if uninstall took the TaskQueue (by deleting its CRD), Redis would show it.
    fleet = make_fleet("helm", replicas=2, onDelete="Purge")
    fleet.wait_ready(2)
    done = fleet.queue.enqueue_sleepers(12, seconds=0.5)
    fleet.queue.wait_settled(done, timeout=120).assert_nothing_lost()
    # Tasks that stay pending across the uninstall: the fleet scaled to zero first.
    fleet.scale(0)
    wait_for(
        lambda: not fleet.pods(),
        timeout=120,
        interval=CLUSTER_INTERVAL_S,
        what="the fleet's pods to stop",
        ignoring=CLUSTER_ERRORS,
    )
    pending = fleet.queue.enqueue_sleepers(5, seconds=0.5)
    assert fleet.queue.stats()["pending"] == len(pending)
    peering = Kube().get("clusterkopfpeering", fullname)
    assert peering is not None, "the release's replicas meet in their own peering"
    suite_peering = Kube().get("clusterkopfpeering", "taskfleet")
    before = _queue_data(fleet, done + pending)

    helm("uninstall", RELEASE, "--namespace", release_ns, "--wait", timeout=200)

    assert release_namespace.get("deployment", f"{fullname}-operator") is None
    assert Kube().get("validatingadmissionpolicy", f"{fullname}-operator-writes") is None
    # Kept: both CRDs (so every TaskQueue and its fleet), and kopf's peering objects.
    for crd in ("taskqueues.taskfleet.dev", "clusterkopfpeerings.kopf.dev"):
        assert Kube().get("crd", crd) is not None, crd
    assert fleet.taskqueue()["metadata"].get("deletionTimestamp") is None
    assert fleet.deployment()["metadata"].get("deletionTimestamp") is None
    assert Kube().get("clusterkopfpeering", fullname) is not None
    if suite_peering is not None:
        assert Kube().get("clusterkopfpeering", "taskfleet") is not None
    assert _queue_data(fleet, done + pending) == before
    assert fleet.queue.stats()["pending"] == len(pending)

    # The other kopf operator (the suite's) takes the fleet over and drains what waited.
    suite_operator_paused.kube.run(
        "scale", f"deployment/{suite_operator_paused.name}", "--replicas=1"
    )
    wait_for(
        suite_operator_paused.ready_pods,
        timeout=180,
        interval=CLUSTER_INTERVAL_S,
        what="the suite's operator to be ready again",
        ignoring=CLUSTER_ERRORS,
    )
    fleet.scale(1)
    fleet.queue.wait_settled(pending, timeout=180).assert_nothing_lost()
