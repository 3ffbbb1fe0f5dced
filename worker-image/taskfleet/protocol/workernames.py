"""Worker names and the pods they run in.

A worker's name keys what it holds (``pod:<name>``, ``wake:<name>``, its ``workers``
record). A pod running one worker process names it after the pod; a pod running
``--processes N`` names each process ``<pod>#<i>`` (i = 1..N), stable across re-forks,
so a re-forked process takes back exactly what its predecessor in that slot held. ``#``
never appears in a Kubernetes pod name, so the pod of any worker name is unambiguous:
the operator asks the API about ``pod_of(name)`` and takes back every process of a pod
that is gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["PROCESS_SEPARATOR", "per_pod", "pod_of", "process_name", "workers_of"]

PROCESS_SEPARATOR = "#"


def process_name(pod: str, index: int) -> str:
    """The worker name of process ``index`` (1-based) of ``pod``."""
    return f"{pod}{PROCESS_SEPARATOR}{index}"


def pod_of(worker: str) -> str:
    """The pod a worker name belongs to (the name itself for a one-process pod)."""
    return worker.partition(PROCESS_SEPARATOR)[0]


def workers_of(pod: str, workers: Iterable[str]) -> list[str]:
    """The worker names among ``workers`` that run in ``pod``."""
    return [name for name in workers if pod_of(name) == pod]


def per_pod(counts: Mapping[str, int]) -> dict[str, int]:
    """Counts by worker name summed by pod."""
    out: dict[str, int] = {}
    for worker, count in counts.items():
        pod = pod_of(worker)
        out[pod] = out.get(pod, 0) + count
    return out
