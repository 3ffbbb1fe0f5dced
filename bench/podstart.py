"""A worker pod's start on the local cluster, as figures: from the pod's creation to the
first task claimed, and where the time goes.

    make bench-podstart           # cluster, images and operator first (e2e/cluster/prepare.sh)

A TaskQueue at zero replicas with one task pending is scaled to one; a watch on its pods
timestamps each step on the host's clock as the API reports it, and Redis (same machine,
same clock) gives the worker's registration and the task's claim. Then the queue goes back
to zero and the next start begins, BENCH_PODSTART_RUNS times (5) after one warm-up
start that is not counted. Phases:

- scale -> pod created: the operator and the Deployment/ReplicaSet controllers;
- pod created -> worker registered: scheduling, sandbox and container start (kubelet,
  containerd, runc; the image is already on the node), then the interpreter, the worker's
  imports, its connection and registration (the cold start `make bench` measures);
- worker registered -> first task claimed;
- and the sum this issue cares about: pod created -> first task claimed.

Figures, never pass/fail; every task is accounted for at the end.
"""

from __future__ import annotations

import json
import os
import secrets
import statistics
import threading
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

from e2e.lib.fixtures import deploy_redis
from e2e.lib.fleet import Fleet, taskqueue_manifest
from e2e.lib.kube import CLUSTER_ERRORS, Kube
from tests.polling import wait_for

RUNS = int(os.environ.get("BENCH_PODSTART_RUNS", "5"))
RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class Start:
    scaled: float
    created: float | None = None
    registered: float | None = None
    claimed: float | None = None

    def phases(self) -> dict[str, float | None]:
        def span(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else round(b - a, 3)

        return {
            "scale -> pod created": span(self.scaled, self.created),
            "pod created -> worker registered": span(self.created, self.registered),
            "worker registered -> first task claimed": span(self.registered, self.claimed),
            "pod created -> first task claimed": span(self.created, self.claimed),
        }


class PodWatch:
    """A thread on the pods' watch: when each pod was first seen.

    (When the kubelet reports a container running is no measure of its start: the status
    update comes after the worker inside has often registered already.)"""

    def __init__(self, namespace: str, selector: str) -> None:
        self.created: dict[str, float] = {}
        self._namespace = namespace
        self._selector = selector
        self._watch = watch.Watch()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._watch.stop()

    def _run(self) -> None:
        core = client.CoreV1Api()
        while not self._stopped.is_set():
            # a watch the API server ends is opened again (first times are kept)
            try:
                for event in self._watch.stream(
                    core.list_namespaced_pod,
                    self._namespace,
                    label_selector=self._selector,
                    timeout_seconds=300,
                ):
                    self._saw(event["object"], time.time())
            except Exception:  # ended or broken: open it again
                time.sleep(0.05)

    def _saw(self, pod: Any, now: float) -> None:
        name = pod.metadata.name
        self.created.setdefault(name, now)


def _redis_now_s(fleet: Fleet) -> float:
    seconds, micros = fleet.forward.call(lambda c: c.time())
    return float(seconds) + micros / 1e6


def measure_one(kube: Kube, fleet: Fleet, pods: PodWatch) -> Start:
    [task_id] = fleet.queue.enqueue_sleepers(1, seconds=0.0)
    # Redis and the host share a clock; the offset is measured anyway (it is ~0 here).
    offset = _redis_now_s(fleet) - time.time()
    start = Start(scaled=time.time())
    fleet.scale(1)
    key = fleet.queue.keys.task(task_id)

    def claimed() -> float | None:
        raw = fleet.forward.call(lambda c: c.hget(key, "started_at"))
        return int(raw) / 1000 - offset if raw else None

    def registered() -> tuple[str, float] | None:
        # the first record a worker writes carries its registration time (heartbeat_ms,
        # until its first heartbeat rewrites it, seconds later)
        records = fleet.forward.call(lambda c: c.hgetall(fleet.queue.keys.workers))
        for name, raw in records.items():
            record = json.loads(raw)
            if isinstance(record, dict) and "heartbeat_ms" in record:
                return (name.decode() if isinstance(name, bytes) else name), int(
                    record["heartbeat_ms"]
                ) / 1000 - offset
        return None

    worker, start.registered = wait_for(
        registered, timeout=180, interval=0.01, what="the worker registered"
    )
    start.claimed = wait_for(claimed, timeout=60, interval=0.02, what="the task claimed")
    pod = worker.partition("#")[0]
    start.created = pods.created.get(pod)
    fleet.queue.wait_settled([task_id], timeout=60)
    fleet.scale(0)
    wait_for(
        lambda: not fleet.pods(),
        timeout=120,
        interval=0.2,
        what="the queue back at zero pods",
        ignoring=CLUSTER_ERRORS,
    )
    wait_for(
        lambda: not fleet.forward.call(lambda c: c.hlen(fleet.queue.keys.workers)),
        timeout=60,
        interval=0.2,
        what="the worker deregistered",
    )
    return start


def main() -> int:
    namespace = f"bench-podstart-{secrets.token_hex(2)}"
    kube = Kube().restricted_namespace(namespace)
    forward = deploy_redis(kube)
    config.load_kube_config()
    starts: list[Start] = []
    try:
        spec: dict[str, Any] = {
            "replicas": 0,
            "concurrency": 1,
            "maxTaskDurationSeconds": 30,
            "resources": {"requests": {"cpu": "10m", "memory": "48Mi"}},
        }
        kube.apply(taskqueue_manifest("podstart", namespace, **spec))
        fleet = Fleet(kube, "podstart", forward)
        wait_for(
            lambda: fleet.deployment()["spec"]["replicas"] == 0,
            timeout=120,
            interval=0.5,
            what="the worker Deployment at zero",
            ignoring=CLUSTER_ERRORS,
        )
        pods = PodWatch(namespace, fleet.selector)
        pods.start()
        measure_one(kube, fleet, pods)  # a warm-up start (the watch settles), not counted
        for _ in range(RUNS):
            starts.append(measure_one(kube, fleet, pods))
        pods.stop()
    finally:
        forward.stop()
        Kube().run("delete", "namespace", namespace, "--wait=false", check=False)
    report(starts)
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H%MZ")
    out = RESULTS / f"podstart-{stamp}.json"
    out.write_text(json.dumps({"runs": [asdict(s) | s.phases() for s in starts]}, indent=2))
    print(f"\nwritten {out.relative_to(RESULTS.parent.parent)}")
    return 0


def report(starts: list[Start]) -> None:
    print(f"\nworker pod start on the local cluster, {len(starts)} starts (median, min..max s):")
    names = list(starts[0].phases())
    for name in names:
        values = [v for s in starts if (v := s.phases()[name]) is not None]
        if not values:
            print(f"  {name:<42} n/a")
            continue
        print(
            f"  {name:<42} {statistics.median(values):6.2f}  "
            f"({min(values):.2f}..{max(values):.2f}, n={len(values)})"
        )


if __name__ == "__main__":
    raise SystemExit(main())
