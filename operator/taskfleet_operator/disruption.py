"""The disruption guard: a worker pod that holds a task tells cluster autoscalers so.

Karpenter's consolidation and the cluster-autoscaler's scale-down evict pods to empty a
node; neither knows that a worker pod is an hour into a task. While a pod holds a task
(the queue's own held-set records, the ones pod-deletion-cost is read from) it carries
``karpenter.sh/do-not-disrupt: "true"`` and
``cluster-autoscaler.kubernetes.io/safe-to-evict: "false"``; once it holds none they are
removed, so an idle pod's node can go. Each sweep compares what each pod carries (the
operator's pod index, kept current by the watch) with what it holds and patches only the
pods whose state changes: an idle queue costs no call at all, a busy one a Redis round
trip or two and a patch per pod that turned busy or idle since the last sweep.

A pod annotated a moment after its claim (within a sweep interval, 2 s) may be chosen for
disruption in that moment; it then drains like any deleted pod, and its tasks finish or
go back to pending (nothing is lost either way: docs/operator.md).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from taskfleet.producer.queue import Queue
from taskfleet.protocol.workernames import per_pod

from taskfleet_operator import kube
from taskfleet_operator.builders import DISRUPTION_GUARD_ANNOTATIONS, owns_worker_pod

Logger = logging.Logger | logging.LoggerAdapter[Any]

__all__ = ["PodGuard", "guard_changes", "pod_guard", "update_guards"]


@dataclass(frozen=True)
class PodGuard:
    """A worker pod as the guard sees it: who it is and which guard annotations it has."""

    name: str
    uid: str
    present: frozenset[str]  # the guard's keys it carries with the guard's values
    foreign: frozenset[str]  # the guard's keys it carries with other values

    @property
    def guarded(self) -> bool:
        return self.present == frozenset(DISRUPTION_GUARD_ANNOTATIONS) and not self.foreign

    @property
    def clear(self) -> bool:
        return not self.present and not self.foreign


def pod_guard(pod: Mapping[str, Any], queue: str) -> PodGuard | None:
    """The guard's view of a pod body; None for a pod that is not one of the queue's
    workers (labelled like one, but no ReplicaSet of the queue's Deployment controls it)."""
    if not owns_worker_pod(dict(pod), queue):
        return None
    meta = pod.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    present = {k for k, v in DISRUPTION_GUARD_ANNOTATIONS.items() if annotations.get(k) == v}
    foreign = {k for k in DISRUPTION_GUARD_ANNOTATIONS if k in annotations} - present
    return PodGuard(meta["name"], meta["uid"], frozenset(present), frozenset(foreign))


def guard_changes(
    pods: Iterable[PodGuard], held: Mapping[str, int], *, enabled: bool
) -> list[tuple[PodGuard, dict[str, str | None]]]:
    """The annotation changes to make (None: remove that key), pod by pod, so that a pod
    is guarded exactly while it holds a task and the guard is enabled. Pure."""
    changes: list[tuple[PodGuard, dict[str, str | None]]] = []
    for pod in pods:
        busy = enabled and held.get(pod.name, 0) > 0
        if busy and not pod.guarded:
            changes.append((pod, dict(DISRUPTION_GUARD_ANNOTATIONS)))
        elif not busy and not pod.clear:
            changes.append((pod, dict.fromkeys(sorted(pod.present | pod.foreign))))
    return changes


def update_guards(
    queue: Queue,
    namespace: str,
    name: str,
    pods: Iterable[PodGuard],
    *,
    enabled: bool,
    running: int,
    logger: Logger,
) -> int:
    """Patch the pods of TaskQueue ``name`` whose guard must change; returns how many were
    patched. Reads Redis only when a task runs or a pod is guarded: an idle queue with
    bare pods costs nothing. Raises `redis.RedisError` and `ApiException` (the sweep
    logs them and tries again at its next turn)."""
    pods = list(pods)
    if not (enabled and running) and all(pod.clear for pod in pods):
        return 0
    held: dict[str, int] = {}
    if enabled and running:
        # From the queue's records, not the heartbeats, summed over a pod's processes.
        held = per_pod(queue.held_by(worker.pod for worker in queue.workers()))
    patched = 0
    for pod, change in guard_changes(pods, held, enabled=enabled):
        if kube.set_pod_annotations(
            pod.name, namespace, uid=pod.uid, queue=name, annotations=change
        ):
            patched += 1
    if patched:
        logger.debug("disruption guard changed on %d pods", patched)
    return patched
