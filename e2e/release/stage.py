"""What a scenario of the release stage makes, and removes afterwards whatever its outcome:
namespaces, Helm releases of a chart package, the queues' Redis, TaskQueues."""

from __future__ import annotations

import os
import secrets
from typing import Any

from e2e.lib.fixtures import deploy_redis, dump_diagnostics
from e2e.lib.fleet import Fleet, taskqueue_manifest
from e2e.lib.kube import Kube
from e2e.lib.portforward import PortForward
from e2e.release.artefacts import Install, Release, tear_down

__all__ = ["Stage", "fleet", "install", "queue_data"]


class Stage:
    """Namespaces, Helm releases and Redis forwards a test makes, removed afterwards."""

    def __init__(self, test: str):
        self.test = test
        self.namespaces: dict[str, tuple[Kube, list[str]]] = {}
        self.forwards: list[PortForward] = []

    def namespace(self, role: str) -> Kube:
        name = f"e2e-{self.test}-{role}-{secrets.token_hex(2)}"
        kube = Kube().restricted_namespace(name, **{"app.kubernetes.io/part-of": "taskfleet-e2e"})
        self.namespaces[name] = (kube, [])
        return kube

    def install(self, kube: Kube, name: str) -> Install:
        """A Helm release to be (installed and) uninstalled in ``kube``'s namespace."""
        assert kube.namespace in self.namespaces
        self.namespaces[kube.namespace][1].append(name)
        return Install(name, kube)

    def redis(self, kube: Kube) -> PortForward:
        forward = deploy_redis(kube)
        self.forwards.append(forward)
        return forward

    def close(self, failed: bool) -> None:
        for kube, _ in self.namespaces.values():
            if failed:
                dump_diagnostics(kube)
        for forward in self.forwards:
            forward.stop()
        if os.environ.get("TASKFLEET_E2E_KEEP") == "1":
            return
        for kube, installs in self.namespaces.values():
            tear_down(kube, *installs)


def install(installed: Install, release: Release, served: Kube, replicas: int = 2) -> None:
    installed.install(
        release,
        {
            "image": release.image_values(),
            "watchNamespaces": [served.namespace],
            "operator": {"replicas": replicas, "settings": {"sweepInterval": 1}},
        },
    )
    installed.wait_ready(replicas)


def fleet(kube: Kube, forward: Any, name: str, release: Release, **spec: Any) -> Fleet:
    assert kube.namespace is not None
    spec = {
        "image": release.images["worker"].ref,
        "redis": {"url": f"redis://redis.{forward.namespace}.svc:6379/0"},
        **spec,
    }
    kube.apply(taskqueue_manifest(name, kube.namespace, **spec))
    return Fleet(kube, name, forward)


def queue_data(fleet: Fleet, task_ids: list[str]) -> dict[str, Any]:
    """What users keep in a queue: every task's record, the sets and the counters."""
    return {"stats": fleet.queue.stats(), "tasks": {t: fleet.queue.task(t) for t in task_ids}}
