"""A TaskQueue under test: its manifest, the Deployment the operator made, its pods and queue."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from e2e.lib.kube import (
    CLUSTER_ERRORS,
    CLUSTER_INTERVAL_S,
    VERSIONS,
    Kube,
    KubectlError,
    is_ready,
    names,
)
from e2e.lib.ledger import SAMPLE_HANDLER, QueueView
from e2e.lib.portforward import PortForward
from tests.polling import wait_for

__all__ = [
    "OPERATOR_IMAGE_HINT",
    "WORKER_IMAGE",
    "Fleet",
    "Operator",
    "taskqueue_manifest",
]

WORKER_IMAGE = os.environ.get("TASKFLEET_WORKER_IMAGE") or VERSIONS.get(
    "WORKER_IMAGE", "localhost/taskfleet-worker:dev"
)
#: How the suite finds the operator's Deployment without knowing its namespace or name.
OPERATOR_IMAGE_HINT = "taskfleet-operator"
#: Time for a fleet to come up on a busy 2-core node (image already imported).
READY_TIMEOUT = 120.0


def taskqueue_manifest(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    """A TaskQueue for the sample handler; ``spec`` entries override the defaults."""
    base: dict[str, Any] = {
        "image": WORKER_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "handler": SAMPLE_HANDLER,
        "redis": {"url": f"redis://redis.{namespace}.svc:6379/0"},
        "replicas": 2,
        "concurrency": 2,
        "maxTaskDurationSeconds": 30,
        # Short beats keep the suite quick; a TTL well above the operator's fast path makes
        # the two ways back for a task (pod gone vs. lease expired) tell apart.
        "heartbeat": {"intervalSeconds": 2, "ttlSeconds": 60},
        "backoff": {"baseSeconds": 1, "maxSeconds": 5},
        "resources": {"requests": {"cpu": "20m", "memory": "48Mi"}, "limits": {"memory": "256Mi"}},
    }
    base.update(spec)
    return {
        "apiVersion": "taskfleet.dev/v1alpha1",
        "kind": "TaskQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": base,
    }


class Fleet:
    """One applied TaskQueue and everything the operator derived from it."""

    def __init__(self, kube: Kube, name: str, forward: PortForward):
        self.kube = kube
        self.name = name
        self.forward = forward
        self._deployment_name: str | None = None
        self._queue: QueueView | None = None

    # --- the objects ------------------------------------------------------------------

    def taskqueue(self) -> dict[str, Any]:
        obj = self.kube.get("taskqueue", self.name)
        assert obj is not None, f"TaskQueue {self.name} is gone"
        return obj

    def deployment(self) -> dict[str, Any]:
        if self._deployment_name is None:
            self._deployment_name = wait_for(
                self._find_deployment,
                timeout=60,
                interval=CLUSTER_INTERVAL_S,
                what=f"the Deployment of TaskQueue {self.name}",
                ignoring=CLUSTER_ERRORS,
            )
        obj = self.kube.get("deployment", self._deployment_name)
        assert obj is not None, f"Deployment {self._deployment_name} is gone"
        return obj

    def _find_deployment(self) -> str | None:
        for dep in self.kube.items("deployments"):
            for owner in dep["metadata"].get("ownerReferences", []):
                if owner["kind"] == "TaskQueue" and owner["name"] == self.name:
                    name: str = dep["metadata"]["name"]
                    return name
        return None

    @property
    def selector(self) -> str:
        labels = self.deployment()["spec"]["selector"]["matchLabels"]
        return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))

    def container(self) -> dict[str, Any]:
        containers = self.deployment()["spec"]["template"]["spec"]["containers"]
        assert len(containers) == 1, f"expected one worker container, got {len(containers)}"
        container: dict[str, Any] = containers[0]
        return container

    def env(self) -> dict[str, str]:
        return {e["name"]: e.get("value", "") for e in self.container().get("env", [])}

    @property
    def queue(self) -> QueueView:
        if self._queue is None:
            args = [*self.container().get("command", []), *self.container().get("args", [])]
            assert "--queue" in args, f"worker command names no queue: {args}"
            queue_name = args[args.index("--queue") + 1]
            self._queue = QueueView(self.forward, queue_name, f"e2e:{self.name}:executions")
        return self._queue

    def pods(self) -> list[dict[str, Any]]:
        return self.kube.pods(self.selector)

    def ready_pods(self) -> list[dict[str, Any]]:
        return [p for p in self.pods() if is_ready(p)]

    # --- waiting ----------------------------------------------------------------------

    def wait_ready(self, replicas: int, timeout: float = READY_TIMEOUT) -> list[str]:
        """Exactly ``replicas`` pods, all ready, none terminating, each registered in Redis."""

        def probe() -> list[str] | None:
            pods = self.pods()
            ready = [p for p in pods if is_ready(p)]
            if len(pods) != replicas or len(ready) != replicas:
                return None
            registered = self.queue.workers()
            pod_names = names(ready)
            if not all(p in registered for p in pod_names):
                return None
            return pod_names or ["<none>"]

        result = wait_for(
            probe,
            timeout=timeout,
            interval=CLUSTER_INTERVAL_S,
            what=f"{replicas} ready worker pods of {self.name}",
            ignoring=CLUSTER_ERRORS,
        )
        return [] if result == ["<none>"] else result

    def wait_pod_gone(self, pod: str, timeout: float) -> None:
        wait_for(
            lambda: self.kube.get("pod", pod) is None,
            timeout=timeout,
            interval=CLUSTER_INTERVAL_S,
            what=f"pod {pod} to be gone",
            ignoring=CLUSTER_ERRORS,
        )

    def wait_status(self, what: str, check: Any, timeout: float = 60) -> dict[str, Any]:
        """Wait until ``check(status)`` holds for the TaskQueue's status."""

        def probe() -> dict[str, Any] | None:
            status: dict[str, Any] = self.taskqueue().get("status") or {}
            return status if check(status) else None

        return wait_for(
            probe,
            timeout=timeout,
            interval=CLUSTER_INTERVAL_S,
            what=f"TaskQueue {self.name} status: {what}",
            ignoring=CLUSTER_ERRORS,
        )

    def printer_columns(self) -> dict[str, str]:
        """``kubectl get tq NAME`` as the user sees it: header -> value."""
        out = self.kube.run("get", "taskqueue", self.name).stdout.splitlines()
        assert len(out) == 2, out
        return table_row(out[0], out[1])

    def scale(self, replicas: int) -> None:
        self.kube.run("scale", f"taskqueue/{self.name}", f"--replicas={replicas}")

    @contextmanager
    def timed(self, label: str) -> Iterator[None]:
        start = time.monotonic()
        yield
        print(f"[{self.name}] {label}: {time.monotonic() - start:.1f}s")


def table_row(header: str, row: str) -> dict[str, str]:
    """One row of kubectl's aligned table by the header's column positions, so an empty
    cell reads as "" instead of shifting the cells after it."""
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    names = header.split()
    ends = [*starts[1:], None]
    return {
        name: row[start:end].strip() for name, start, end in zip(names, starts, ends, strict=True)
    }


class Operator:
    """The operator's Deployment, found by its image wherever it was installed."""

    def __init__(self, namespace: str, name: str):
        self.kube = Kube(namespace)
        self.name = name

    @classmethod
    def find(cls) -> Operator:
        for dep in Kube().json("get", "deployments", "--all-namespaces")["items"]:
            images = [c["image"] for c in dep["spec"]["template"]["spec"]["containers"]]
            if any(OPERATOR_IMAGE_HINT in image for image in images):
                return cls(dep["metadata"]["namespace"], dep["metadata"]["name"])
        raise LookupError(
            "no operator Deployment (an image containing 'taskfleet-operator') in the cluster: "
            "deploy it with `kubectl apply -k manifests/` first"
        )

    def deployment(self) -> dict[str, Any]:
        obj = self.kube.get("deployment", self.name)
        assert obj is not None
        return obj

    @property
    def selector(self) -> str:
        labels = self.deployment()["spec"]["selector"]["matchLabels"]
        return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))

    def ready_pods(self) -> list[str]:
        return sorted(p["metadata"]["name"] for p in self.kube.pods(self.selector) if is_ready(p))

    def logs(self) -> str:
        """The last lines of every replica's log (and of its previous container, if one
        ended): the leader's and the standby's, for a failure's diagnostics."""
        try:
            pods = self.kube.pods(self.selector)
        except (AssertionError, KubectlError) as exc:
            return f"(no operator pods: {exc})"
        return "\n".join(self.kube.pod_logs(pod) for pod in pods) or "(no operator pods)"
