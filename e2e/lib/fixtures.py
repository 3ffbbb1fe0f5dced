"""Fixtures of the e2e suite: a namespace per test, its own Redis, TaskQueues, figures.

Loaded as a plugin (``pytest_plugins`` in the test modules) so its hooks can see test
outcomes: a failed test leaves its diagnostics (pods, events, logs) in the report.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.lib.fleet import Fleet, Operator, taskqueue_manifest
from e2e.lib.kube import (
    CLUSTER_ERRORS,
    CLUSTER_INTERVAL_S,
    VERSIONS,
    FrozenNodes,
    Kube,
    KubectlError,
    is_ready,
)
from e2e.lib.outcome import FIGURE, OUTCOME, failed
from e2e.lib.portforward import PortForward
from tests.polling import wait_for

MANIFESTS = Path(__file__).resolve().parent.parent / "manifests"
REDIS_IMAGE = os.environ.get("TASKFLEET_REDIS_IMAGE") or VERSIONS.get(
    "REDIS_IMAGE", "localhost/taskfleet-redis:7.0"
)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call" or (report.when == "setup" and report.failed):
        item.stash[OUTCOME] = report
    return report


@pytest.fixture(scope="session")
def operator() -> Operator:
    """The deployed operator, ready; the suite cannot say anything without it."""
    Kube().run("get", "crd", "taskqueues.taskfleet.dev", namespaced=False)
    found = Operator.find()
    wait_for(
        found.ready_pods,
        timeout=120,
        interval=CLUSTER_INTERVAL_S,
        what="a ready operator pod",
        ignoring=CLUSTER_ERRORS,
    )
    return found


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """Record a measured figure: printed now and repeated in the run's summary (by
    e2e/conftest.py, from the test's report, so it reaches the summary from an xdist worker)."""

    def record(line: str) -> None:
        print(line)
        request.node.user_properties.append((FIGURE, line))

    return record


def _slug(name: str) -> str:
    words = re.sub(r"[^a-z0-9]+", "-", name.lower().removeprefix("test_")).strip("-")
    return words[:40].strip("-")


@pytest.fixture
def namespace(request: pytest.FixtureRequest) -> Iterator[Kube]:
    """A fresh namespace enforcing restricted pod security; deleted after the test."""
    name = f"e2e-{_slug(request.node.name)}-{secrets.token_hex(2)}"
    kube = Kube().restricted_namespace(name, **{"app.kubernetes.io/part-of": "taskfleet-e2e"})
    yield kube
    if failed(request):
        dump_diagnostics(kube)
    if os.environ.get("TASKFLEET_E2E_KEEP") == "1":
        return
    # TaskQueues first, while their Redis still runs, so a finalizer never waits on a
    # vanished Redis; then the namespace, without waiting (the next test does not need it).
    kube.run(
        "delete", "taskqueues", "--all", "--wait=true", "--timeout=60s", check=False, timeout=90
    )
    Kube().run("delete", "namespace", name, "--wait=false", check=False)


def dump_diagnostics(kube: Kube) -> None:
    """Print the namespace's objects, events and pod logs (and the operator's) to the report."""
    print(f"\n==== diagnostics for namespace {kube.namespace} ====")
    print(
        kube.report(
            ("get", "taskqueues,deployments,replicasets,pods", "-o", "wide"),
            ("get", "events", "--sort-by=.lastTimestamp"),
            ("get", "taskqueues", "-o", "yaml"),
        )
    )
    for pod in kube.items("pods"):
        print(kube.pod_logs(pod))
    try:
        print(f"--- operator logs\n{Operator.find().logs()}")
    except (LookupError, KubectlError) as exc:
        print(f"--- no operator logs: {exc}")


def deploy_redis(kube: Kube) -> PortForward:
    """A throwaway Redis in ``kube``'s namespace (append-only, restartable), ready, and a
    started port-forward to it (the e2e tests' and the cluster benchmarks')."""
    text = (
        (MANIFESTS / "redis.yaml").read_text().replace("localhost/taskfleet-redis:7.0", REDIS_IMAGE)
    )
    kube.apply_yaml(text)
    wait_for(
        lambda: is_ready(kube.get("pod", "redis") or {"metadata": {}}),
        timeout=90,
        interval=CLUSTER_INTERVAL_S,
        what=f"the Redis of namespace {kube.namespace} to be ready",
        ignoring=CLUSTER_ERRORS,
    )
    assert kube.namespace is not None
    forward = PortForward(kube.namespace, "svc/redis")
    forward.start()
    return forward


@pytest.fixture
def redis_forward(namespace: Kube) -> Iterator[PortForward]:
    """The test's own Redis and a port-forward to it."""
    forward = deploy_redis(namespace)
    yield forward
    forward.stop()


@pytest.fixture
def make_fleet(
    namespace: Kube, redis_forward: PortForward, operator: Operator
) -> Callable[..., Fleet]:
    """``make_fleet(name, **spec)``: apply a TaskQueue for the sample handler, return its Fleet."""

    def make(name: str = "work", **spec: Any) -> Fleet:
        assert namespace.namespace is not None
        namespace.apply(taskqueue_manifest(name, namespace.namespace, **spec))
        return Fleet(namespace, name, redis_forward)

    return make


@pytest.fixture
def frozen_nodes() -> Iterator[FrozenNodes]:
    """Nodes a test freezes; whatever the outcome, each is unpaused and Ready afterwards."""
    nodes = FrozenNodes()
    yield nodes
    if nodes.frozen:
        nodes.thaw()


__all__ = [
    "deploy_redis",
    "dump_diagnostics",
    "failed",
    "figures",
    "frozen_nodes",
    "make_fleet",
    "namespace",
    "operator",
    "redis_forward",
]
