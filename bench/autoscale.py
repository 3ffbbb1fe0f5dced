"""Autoscaling on the local cluster, as figures: how fast a queue at zero wakes, and a
burst drained by an autoscaled fleet versus a fixed one, with the pod-seconds each used.

    make bench-autoscale          # cluster, images and operator first (e2e/cluster/prepare.sh)

Knobs (environment): BENCH_AUTOSCALE_TASKS (2000), BENCH_AUTOSCALE_SECONDS (1.0, each
task's sleep), BENCH_AUTOSCALE_PODS (8: maxReplicas, and the fixed fleet's size),
BENCH_AUTOSCALE_CONCURRENCY (4), BENCH_AUTOSCALE_WINDOW (30, scaleDownStabilizationSeconds),
BENCH_AUTOSCALE_PERIOD (600: the period one burst stands for, for pod-seconds),
BENCH_AUTOSCALE_ONLY (`together`: only the wake from zero with a new Redis).

What is measured (host wall clock and Redis server time: one machine, one clock):
- wake from zero with a new Redis: a TaskQueue (autoscaled from 0) and its Redis applied
  together, the first task enqueued as soon as Redis answers -> the Deployment's replicas
  >= 1 (the operator probes a server that is not up yet first; the goal is within 1 s);
- operator reaction: enqueue of the first task -> the Deployment's replicas raised (the
  Deployment is read every 20 ms; the figure is at most that much late);
- pod start: replicas raised -> the first worker registered in Redis;
- enqueue -> first task started, from zero (Redis `created_at` -> `started_at`);
- drain: first enqueue -> last task finished, for each fleet;
- pod-seconds: pods that exist (Pending, Running or Terminating) integrated every 0.5 s
  from the enqueue until the last task finished (both fleets) and until the autoscaled
  fleet is back at zero; over a PERIOD with one burst, the fixed fleet pays PODS x PERIOD.

Every task is accounted for at the end (done, dead, lost); figures, never pass/fail.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from e2e.lib.fixtures import MANIFESTS, REDIS_IMAGE, deploy_redis
from e2e.lib.fleet import Fleet, taskqueue_manifest
from e2e.lib.kube import CLUSTER_ERRORS, Kube, is_ready
from e2e.lib.portforward import PortForward
from tests.polling import wait_for

TASKS = int(os.environ.get("BENCH_AUTOSCALE_TASKS", "2000"))
SECONDS = float(os.environ.get("BENCH_AUTOSCALE_SECONDS", "1.0"))
PODS = int(os.environ.get("BENCH_AUTOSCALE_PODS", "8"))
CONCURRENCY = int(os.environ.get("BENCH_AUTOSCALE_CONCURRENCY", "4"))
WINDOW_S = int(os.environ.get("BENCH_AUTOSCALE_WINDOW", "30"))
PERIOD_S = float(os.environ.get("BENCH_AUTOSCALE_PERIOD", "600"))
RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class Watcher:
    """A thread reading the Deployment every 20 ms and the pods every 0.5 s."""

    apps: client.AppsV1Api
    core: client.CoreV1Api
    namespace: str
    name: str
    raised_at: float | None = None
    pod_seconds: float = 0.0
    samples: list[tuple[float, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def pods_now(self) -> int:
        listed = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"taskfleet.dev/queue={self.name}"
        )
        return len(listed.items)

    def _run(self) -> None:
        last_count_at = time.time()
        pods = self.pods_now()
        while not self._stop.wait(0.02):
            now = time.time()
            if self.raised_at is None:
                try:
                    deployment = self.apps.read_namespaced_deployment(self.name, self.namespace)
                except ApiException as exc:
                    if exc.status != 404:  # not created by the operator yet
                        raise
                else:
                    if (deployment.spec.replicas or 0) > 0:
                        self.raised_at = now
            if now - last_count_at >= 0.5:
                self.pod_seconds += pods * (now - last_count_at)
                pods, last_count_at = self.pods_now(), now
                self.samples.append((now, pods))


@dataclass
class Run:
    fleet: str
    tasks: int
    done: int
    lost: int
    drain_s: float
    pod_seconds_drain: float
    pod_seconds_period: float
    max_pods: int
    reaction_s: float | None = None
    pod_start_s: float | None = None
    first_start_s: float | None = None
    back_to_zero_s: float | None = None


def _times(fleet: Fleet, ids: list[str]) -> tuple[int, int, int]:
    """(first created_at, first started_at, last finished_at) in Redis ms."""
    keys = fleet.queue.keys

    def read(c: Any) -> list[Any]:
        pipe = c.pipeline(transaction=False)
        for task_id in ids:
            pipe.hmget(keys.task(task_id), "created_at", "started_at", "finished_at")
        return list(pipe.execute())

    rows = [r for r in fleet.forward.call(read) if all(r)]
    return (
        min(int(r[0]) for r in rows),
        min(int(r[1]) for r in rows),
        max(int(r[2]) for r in rows),
    )


def measure(kube: Kube, forward: PortForward, *, autoscaled: bool) -> Run:
    name = "auto" if autoscaled else "fixed"
    assert kube.namespace is not None
    spec: dict[str, Any] = {
        "concurrency": CONCURRENCY,
        "maxTaskDurationSeconds": 30,
        "resources": {"requests": {"cpu": "10m", "memory": "48Mi"}, "limits": {"memory": "256Mi"}},
    }
    if autoscaled:
        spec["autoscale"] = {
            "minReplicas": 0,
            "maxReplicas": PODS,
            "scaleDownStabilizationSeconds": WINDOW_S,
        }
    else:
        spec["replicas"] = PODS
    kube.apply(taskqueue_manifest(name, kube.namespace, **spec))
    fleet = Fleet(kube, name, forward)
    if autoscaled:
        wait_for(
            lambda: fleet.deployment()["spec"]["replicas"] == 0 and not fleet.pods(),
            timeout=120,
            interval=0.5,
            what="the autoscaled fleet at zero",
            ignoring=CLUSTER_ERRORS,
        )
    else:
        fleet.wait_ready(PODS, timeout=300)
    config.load_kube_config()
    watcher = Watcher(client.AppsV1Api(), client.CoreV1Api(), kube.namespace, name)
    watcher.start()
    enqueued_at = time.time()
    ids = fleet.queue.enqueue_sleepers(TASKS, seconds=SECONDS)
    registered_at = None
    if autoscaled:
        registered_at = wait_for(
            lambda: time.time() if fleet.queue.stats()["workers"] else None,
            timeout=180,
            interval=0.05,
            what="the first worker registered",
            ignoring=CLUSTER_ERRORS,
        )
    accounting = fleet.queue.wait_settled(ids, timeout=TASKS * SECONDS + 600)
    pod_seconds_drain = watcher.pod_seconds
    back_to_zero_s = None
    if autoscaled:
        wait_for(
            lambda: fleet.deployment()["spec"]["replicas"] == 0 and not fleet.pods(),
            timeout=WINDOW_S + 300,
            interval=0.5,
            what="the autoscaled fleet back at zero",
            ignoring=CLUSTER_ERRORS,
        )
        back_to_zero_s = time.time() - enqueued_at
    watcher.stop()
    created, first_start, last_finish = _times(fleet, ids)
    lost = len(accounting.missing) + len(accounting.unfinished)
    run = Run(
        fleet=f"autoscale 0..{PODS}" if autoscaled else f"fixed {PODS}",
        tasks=TASKS,
        done=len(accounting.done),
        lost=lost,
        drain_s=(last_finish - created) / 1000,
        pod_seconds_drain=pod_seconds_drain,
        pod_seconds_period=watcher.pod_seconds if autoscaled else PODS * PERIOD_S,
        max_pods=max((n for _, n in watcher.samples), default=0),
        back_to_zero_s=back_to_zero_s,
    )
    if autoscaled and watcher.raised_at is not None and registered_at is not None:
        run.reaction_s = watcher.raised_at - enqueued_at
        run.pod_start_s = registered_at - watcher.raised_at
        run.first_start_s = (first_start - created) / 1000
    kube.run("delete", "taskqueue", name, "--wait=true", "--timeout=120s", check=False, timeout=150)
    return run


@dataclass
class Together:
    """A TaskQueue applied together with its Redis: the first enqueue -> replicas >= 1."""

    redis_ready_s: float
    reaction_s: float
    done: int


def measure_together(kube: Kube) -> tuple[Together, PortForward]:
    """The TaskQueue and its Redis applied at once (as a demo does); the first task enqueued
    as soon as Redis answers. Returns the figures and a port-forward to that Redis."""
    name = "together"
    assert kube.namespace is not None
    redis_yaml = (MANIFESTS / "redis.yaml").read_text()
    redis_yaml = redis_yaml.replace("localhost/taskfleet-redis:7.0", REDIS_IMAGE)
    spec: dict[str, Any] = {
        "concurrency": CONCURRENCY,
        "resources": {"requests": {"cpu": "10m", "memory": "48Mi"}, "limits": {"memory": "256Mi"}},
        "autoscale": {"minReplicas": 0, "maxReplicas": 1, "scaleDownStabilizationSeconds": 5},
    }
    applied = time.time()
    kube.apply_yaml(redis_yaml)
    kube.apply(taskqueue_manifest(name, kube.namespace, **spec))
    wait_for(
        lambda: is_ready(kube.get("pod", "redis") or {"metadata": {}}),
        timeout=90,
        interval=0.05,
        what=f"the Redis of namespace {kube.namespace} to be ready",
        ignoring=CLUSTER_ERRORS,
    )
    forward = PortForward(kube.namespace, "svc/redis")
    forward.start()
    forward.call(lambda c: c.ping())
    redis_ready_s = time.time() - applied
    config.load_kube_config()
    watcher = Watcher(client.AppsV1Api(), client.CoreV1Api(), kube.namespace, name)
    watcher.start()
    fleet = Fleet(kube, name, forward)
    enqueued_at = time.time()
    ids = fleet.queue.enqueue_sleepers(1, seconds=0.1)
    wait_for(
        lambda: watcher.raised_at,
        timeout=120,
        interval=0.02,
        what="the Deployment's replicas raised from zero",
    )
    watcher.stop()
    assert watcher.raised_at is not None
    accounting = fleet.queue.wait_settled(ids, timeout=180)
    kube.run("delete", "taskqueue", name, "--wait=true", "--timeout=120s", check=False, timeout=150)
    together = Together(
        redis_ready_s=redis_ready_s,
        reaction_s=watcher.raised_at - enqueued_at,
        done=len(accounting.done),
    )
    return together, forward


def main() -> int:
    namespace = f"bench-autoscale-{secrets.token_hex(2)}"
    kube = Kube().restricted_namespace(namespace)
    forward: PortForward | None = None
    try:
        together, forward = measure_together(kube)
        print(
            f"TaskQueue applied with its Redis (Redis answering {together.redis_ready_s:.1f} s "
            f"later): first enqueue -> replicas >= 1 in {together.reaction_s:.2f} s"
        )
        if os.environ.get("BENCH_AUTOSCALE_ONLY") == "together":
            return 0 if together.done == 1 else 1
        forward.stop()
        forward = deploy_redis(kube)  # the same Redis, ready; a fresh port-forward
        auto = measure(kube, forward, autoscaled=True)
        fixed = measure(kube, forward, autoscaled=False)
    finally:
        if forward is not None:
            forward.stop()
        Kube().run("delete", "namespace", namespace, "--wait=false", check=False)
    report(auto, fixed)
    print(
        f"  with a new Redis: first enqueue -> replicas >= 1 in {together.reaction_s:.2f} s "
        f"(Redis answering {together.redis_ready_s:.1f} s after both were applied)"
    )
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H%MZ")
    out = RESULTS / f"autoscale-{stamp}.json"
    settings = {
        "tasks": TASKS,
        "seconds": SECONDS,
        "pods": PODS,
        "concurrency": CONCURRENCY,
        "window_s": WINDOW_S,
        "period_s": PERIOD_S,
    }
    out.write_text(
        json.dumps(
            {
                "settings": settings,
                "together": asdict(together),
                "runs": [asdict(auto), asdict(fixed)],
            },
            indent=2,
        )
    )
    print(f"\nwritten {out.relative_to(RESULTS.parent.parent)}")
    return 0 if auto.lost == 0 and fixed.lost == 0 and together.done == 1 else 1


def report(auto: Run, fixed: Run) -> None:
    print(
        f"\n{TASKS} tasks x {SECONDS:g} s, {CONCURRENCY} slots/pod, "
        f"scale-down window {WINDOW_S} s, one burst per {PERIOD_S:g} s"
    )
    if auto.reaction_s is not None:
        print(f"  operator reaction, enqueue -> replicas raised:  {auto.reaction_s:.2f} s")
        print(f"  pod start, replicas raised -> worker registered: {auto.pod_start_s:.2f} s")
        print(f"  enqueue -> first task started, from zero:        {auto.first_start_s:.2f} s")
    header = ("drain s", 9), ("pod-s drain", 13), ("pod-s period", 14), ("max pods", 10)
    print(f"  {'fleet':<16}" + "".join(f"{h:>{w}}" for h, w in header) + f"{'lost':>6}")
    for run in (auto, fixed):
        print(
            f"  {run.fleet:<16}{run.drain_s:>9.1f}{run.pod_seconds_drain:>13.0f}"
            f"{run.pod_seconds_period:>14.0f}{run.max_pods:>10}{run.lost:>6}"
        )
    if fixed.drain_s > 0 and fixed.pod_seconds_period > 0:
        slower = (auto.drain_s / fixed.drain_s - 1) * 100
        saved = (1 - auto.pod_seconds_period / fixed.pod_seconds_period) * 100
        print(
            f"  autoscaled drain {slower:+.0f}% vs fixed; {saved:.0f}% fewer pod-seconds per period"
        )
    if auto.back_to_zero_s is not None:
        print(f"  autoscaled fleet back at zero {auto.back_to_zero_s:.0f} s after the enqueue")


if __name__ == "__main__":
    sys.exit(main())
