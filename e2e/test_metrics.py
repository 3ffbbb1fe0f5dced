"""A real Prometheus on the node scrapes the operator and the workers, found by their
pods' prometheus.io annotations (file-based discovery kept current from the API: Debian's
prometheus is built without Kubernetes discovery), and PromQL tells the truth: every task
enqueued is done, pending drops to 0, and a force-deleted pod's tasks show as requeued
because their pod was gone."""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.lib.fleet import Fleet, Operator
from e2e.lib.kube import CLUSTER_ERRORS, CLUSTER_INTERVAL_S, Kube
from tests.polling import wait_for
from tests.prometheus import Prometheus

pytest_plugins = ["e2e.lib.fixtures"]

#: Scrapes every second; a scrape, a sweep and a rule evaluation fit in this.
PROMQL_TIMEOUT_S = 60.0


class PodTargets:
    """Pod discovery for a Prometheus built without Kubernetes service discovery (Debian's
    package leaves it out): every second, the pods of ``namespaces`` that carry the
    prometheus.io/scrape annotation and run are written as a file_sd target file (pod IP
    and prometheus.io/port, labels pod and namespace), which Prometheus re-reads. The same
    selection a ``kubernetes_sd_configs`` job with the usual relabelling makes."""

    def __init__(self, path: Path, namespaces: list[str]) -> None:
        self.path, self.namespaces = path, namespaces
        self._stop = threading.Event()
        self.write()
        self._thread = threading.Thread(target=self._run, name="pod-targets", daemon=True)
        self._thread.start()

    def job(self) -> dict[str, Any]:
        return {
            "job_name": "kubernetes-pods",
            "file_sd_configs": [{"files": [str(self.path)], "refresh_interval": "1s"}],
            "honor_labels": True,  # the operator's queue series carry their own labels
        }

    def write(self) -> None:
        groups = []
        for namespace in self.namespaces:
            for pod in Kube(namespace).items("pods"):
                notes = pod["metadata"].get("annotations") or {}
                status = pod.get("status") or {}
                if notes.get("prometheus.io/scrape") != "true" or status.get("phase") != "Running":
                    continue
                if not status.get("podIP"):
                    continue
                # Without prometheus.io/port (a pod of several worker processes), pod
                # discovery makes a target of every declared container port.
                ports = (
                    [notes["prometheus.io/port"]]
                    if notes.get("prometheus.io/port")
                    else [
                        str(port["containerPort"])
                        for c in pod["spec"]["containers"]
                        for port in c.get("ports") or []
                    ]
                )
                groups.append(
                    {
                        "targets": [f"{status['podIP']}:{port}" for port in ports],
                        "labels": {"pod": pod["metadata"]["name"], "namespace": namespace},
                    }
                )
        partial = self.path.with_suffix(".tmp")
        partial.write_text(json.dumps(groups))
        partial.replace(self.path)  # Prometheus never reads half a file

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            with contextlib.suppress(*CLUSTER_ERRORS):
                self.write()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


@pytest.fixture
def prometheus(
    tmp_path: Path, make_fleet: Callable[..., Fleet], operator: Operator
) -> Iterator[Callable[[Fleet], Prometheus]]:
    if shutil.which("prometheus") is None:
        pytest.fail("the e2e suite needs the prometheus binary (make deps)", pytrace=False)
    started: list[tuple[PodTargets, Prometheus]] = []

    def start(fleet: Fleet) -> Prometheus:
        assert fleet.kube.namespace is not None
        namespaces = [fleet.kube.namespace, operator.kube.namespace or ""]
        targets = PodTargets(tmp_path / "targets.json", namespaces)
        server = Prometheus(tmp_path, [targets.job()], every="1s")
        started.append((targets, server))
        return server

    yield start
    for targets, server in started:
        server.close()
        targets.close()


def test_prometheus_sees_every_task_done_pending_at_zero_and_a_force_deleted_pods_requeue(
    make_fleet: Callable[..., Fleet],
    prometheus: Callable[[Fleet], Prometheus],
    figures: Callable[[str], None],
) -> None:
    fleet = make_fleet("metrics", replicas=2, concurrency=2)
    pods = fleet.wait_ready(2)
    server = prometheus(fleet)
    queue = fleet.queue.queue  # <namespace>.<name>, the queue label of every series
    sel = f'queue="{queue}"'

    def promql(expr: str, check: Callable[[float | None], bool], what: str) -> float | None:
        def probe() -> tuple[float | None] | None:
            got = server.scalar(expr)
            return (got,) if check(got) else None

        return wait_for(
            probe,
            timeout=PROMQL_TIMEOUT_S,
            interval=1.0,
            what=lambda: f"{what}: {expr} is {server.scalar(expr)}",
            ignoring=(OSError, *CLUSTER_ERRORS),
        )[0]

    for pod in pods:  # both workers scraped, through discovery, at their pod IPs
        promql(f'up{{pod="{pod}"}}', lambda v: v == 1, f"{pod} scraped")
    promql(f"taskfleet_queue_redis_up{{{sel}}}", lambda v: v == 1, "the operator reads the queue")

    ids = fleet.queue.enqueue_sleepers(16, seconds=2)
    victim = wait_for(
        lambda: next((p for p, n in fleet.queue.holders().most_common() if n >= 2), None),
        timeout=45,
        interval=CLUSTER_INTERVAL_S,
        what="a pod holding 2 tasks",
        ignoring=CLUSTER_ERRORS,
    )
    promql(
        f'taskfleet_queue_tasks{{{sel},state="running"}}', lambda v: (v or 0) >= 2, "tasks running"
    )
    fleet.kube.run("delete", "pod", victim, "--grace-period=0", "--force")

    accounting = fleet.queue.wait_settled(ids, timeout=180)
    accounting.assert_nothing_lost()
    enqueued = promql(
        f"taskfleet_queue_enqueued_total{{{sel}}}", lambda v: v == len(ids), "all enqueued"
    )
    promql(f"taskfleet_queue_completed_total{{{sel}}}", lambda v: v == enqueued, "all completed")
    promql(f'taskfleet_queue_tasks{{{sel},state="pending"}}', lambda v: v == 0, "pending at 0")
    promql(f'taskfleet_queue_tasks{{{sel},state="running"}}', lambda v: v == 0, "running at 0")
    requeued = promql(
        f'sum(taskfleet_operator_requeued_tasks_total{{{sel},reason="pod_gone"}})',
        lambda v: (v or 0) >= 2,
        "the victim's tasks requeued because its pod was gone",
    )
    promql(f"taskfleet_queue_requeued_total{{{sel}}}", lambda v: (v or 0) >= 2, "queue requeued")
    # The workers' own counts: each pod's last value (the victim's stays at its last scrape,
    # so up to its concurrency of completions may fall after it): never more than done.
    by_workers = promql(
        f'sum(max_over_time(taskfleet_worker_tasks_total{{{sel},outcome="done"}}[10m]))',
        lambda v: v is not None and len(ids) - 2 <= v <= len(ids),
        "the workers' done counts add up",
    )
    figures(
        f"metrics: {len(ids)} tasks enqueued, {enqueued:g} completed by PromQL, "
        f"{requeued:g} requeued (pod gone) after force-deleting {victim}; workers counted "
        f"{by_workers:g} done"
    )
