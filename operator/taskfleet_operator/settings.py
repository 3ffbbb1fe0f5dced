"""Operator settings: ours from the environment, kopf's in one startup function.

Every knob has a comment saying why it has its value; tests shorten intervals through
the same environment variables the Deployment would use.
"""

from __future__ import annotations

import functools
import logging
import os
import random
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import kopf

from taskfleet_operator import quotaspec
from taskfleet_operator.models import GROUP, KIND

FINALIZER = f"{GROUP}/finalizer"


class SettingsError(ValueError):
    """An operator environment variable has a value the operator cannot use."""


def _port(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    if not (raw.isascii() and raw.isdigit()) or int(raw) > 65535:
        raise SettingsError(f"{name} must be a port number 0..65535 (0 = off), got {raw!r}")
    return int(raw)


def _float(env: Mapping[str, str], name: str, default: float, low: float, high: float) -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        if not raw.isascii() or "_" in raw:  # float() also reads other digits and 1_0
            raise ValueError(raw)
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not a number") from None
    if not low <= value <= high:
        raise SettingsError(f"{name}={raw!r} must be between {low} and {high}")
    return value


_DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _peering_name(env: Mapping[str, str]) -> str:
    raw = env.get("TASKFLEET_PEERING", "").strip()
    if raw and (len(raw) > 253 or not _DNS_NAME.fullmatch(raw)):
        raise SettingsError(
            f"TASKFLEET_PEERING={raw!r} must be an object name (lowercase letters, digits, "
            "'-' and '.'), or empty to run one replica standalone"
        )
    return raw


def seniority_priority(now_ns: int | None = None) -> int:
    """kopf's peering priority for a replica starting now: the older a replica, the higher,
    so the replica that works keeps working when another starts (a rollout, a restart)
    and a newcomer waits. The random low digits break a tie between replicas started in
    the same millisecond (equal priorities would pause both)."""
    started_ms = (time.time_ns() if now_ns is None else now_ns) // 1_000_000
    return -(started_ms * 1000 + random.randrange(1000))


@dataclass(frozen=True)
class OperatorSettings:
    """What the taskfleet handlers need to know, read once at import of the handlers."""

    # How often each TaskQueue is swept: the slow path for orphaned tasks (a pod deleted
    # while the operator was down), expired leases, cron schedules and status.
    sweep_interval_s: float = 2.0
    # How often a TaskQueue with nothing to do is swept (no task pending, delayed or
    # running, no schedules, its fleet as asked); pod, Deployment and spec events and an
    # enqueue (the demand poll) wake it at once.
    idle_sweep_interval_s: float = 60.0
    # How often the idle queues' demand lists are read (one round trip per Redis).
    demand_poll_interval_s: float = 1.0
    # Threads for the sweeps' and autoscalers' round trips (the loops wait without one).
    sweep_threads: int = 16
    # Redis socket connect/read timeout: a dead Redis must not stall a sweep for long.
    redis_timeout_s: float = 2.0
    # Where Prometheus scrapes the operator (docs/metrics.md); 0 = no metrics endpoint.
    metrics_port: int = 9101
    # High availability: the ClusterKopfPeering the replicas meet in ("" = one replica,
    # standalone), and how long a replica's keep-alive counts before the others take over.
    peering: str = ""
    peering_lifetime_s: float = 15.0
    # How often each ProviderQuota's use is read into its status: one script call per
    # quota, and a status patch only when the use changed.
    quota_status_interval_s: float = 15.0
    # Connections to the Kubernetes API for requests, beside one per watch stream
    # (`apisession`): without a bound, a burst of TaskQueues opened one per request in
    # flight, each with its TLS state and read buffer. 0: no bound (kopf's own session).
    api_connections: int = 32
    # How often the garbage collector's frozen objects are collected and frozen again
    # (`collector`): what lives long is kept out of its full collections. 0: off, the
    # collector as Python sets it.
    gc_refreeze_interval_s: float = 300.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> OperatorSettings:
        env = os.environ if env is None else env
        return cls(
            sweep_interval_s=_float(env, "TASKFLEET_SWEEP_INTERVAL", 2.0, 0.1, 3600),
            idle_sweep_interval_s=_float(env, "TASKFLEET_IDLE_SWEEP_INTERVAL", 60.0, 0.1, 3600),
            demand_poll_interval_s=_float(env, "TASKFLEET_DEMAND_POLL_INTERVAL", 1.0, 0.05, 60),
            sweep_threads=int(_float(env, "TASKFLEET_SWEEP_THREADS", 16, 1, 256)),
            redis_timeout_s=_float(env, "TASKFLEET_REDIS_TIMEOUT", 2.0, 0.1, 60),
            metrics_port=_port(env, "TASKFLEET_METRICS_PORT", 9101),
            peering=_peering_name(env),
            peering_lifetime_s=_float(env, "TASKFLEET_PEERING_LIFETIME", 15.0, 5, 300),
            quota_status_interval_s=_float(env, "TASKFLEET_QUOTA_STATUS_INTERVAL", 15.0, 0.5, 3600),
            api_connections=int(_float(env, "TASKFLEET_API_CONNECTIONS", 32, 0, 1024)),
            gc_refreeze_interval_s=_float(env, "TASKFLEET_GC_REFREEZE_INTERVAL", 300.0, 0, 86400),
        )


@functools.cache
def process_settings() -> OperatorSettings:
    """This process's settings, read from its environment once: the handler modules
    (`handlers`, `quotahandlers`) share one reading."""
    return OperatorSettings.from_env()


def watched_namespaces(env: Mapping[str, str] | None = None) -> list[str]:
    """The namespaces the operator serves (TASKFLEET_WATCH_NAMESPACES; `__main__` puts
    its --namespace options there); empty: all namespaces."""
    raw = (os.environ if env is None else env).get("TASKFLEET_WATCH_NAMESPACES", "")
    return [ns.strip() for ns in raw.split(",") if ns.strip()]


def exact_names(namespaces: Iterable[str]) -> bool:
    """Whether every namespace is a name, not a pattern (`team-*`, `!kube-*`)."""
    return all(not set(ns) & set("*?[]!") for ns in namespaces)


#: Where kopf keeps its record of a TaskQueue (`configure_kopf`): the status, which the
#: create handler's own fields go to anyway, so handling a new TaskQueue costs one write.
KOPF_STATUS = "kopf"
#: The annotation that held the diff-base before it moved to the status: still read.
LEGACY_DIFF_BASE = f"{GROUP}/last-handled-configuration"


class LeanDiffBaseStorage(kopf.StatusDiffBaseStorage):
    """kopf's diff-base, in ``status.kopf.last-handled-configuration``, built without
    copying what it throws away.

    In the status, kopf's record of a handled TaskQueue is written with the handler's own
    status fields in one patch of the status subresource; in an annotation, it took a
    second patch (of the object) and a second watch event per handling.

    kopf builds an object's essence on every event of it: a deep copy of the whole body,
    then all of metadata but labels and annotations deleted, and status. A TaskQueue's
    managedFields and status are most of its body, so here kopf builds from the body
    without them: the same essence (a ProviderQuota's too). Other kinds' (Deployments,
    pods: the operator has no
    create/update handler for them, so nothing reads it) is empty. With extra fields (a
    handler's ``field=``, which may point anywhere), kopf's own way.

    A TaskQueue handled before the move has its diff-base in the annotation
    `LEGACY_DIFF_BASE`: read from there until the next handling writes the status."""

    _KEPT_META = ("name", "namespace", "labels", "annotations", "ownerReferences")

    def __init__(self) -> None:
        super().__init__(name=KOPF_STATUS)
        self._legacy = kopf.AnnotationsDiffBaseStorage(
            prefix=GROUP, key="last-handled-configuration"
        )

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None
    ) -> kopf.BodyEssence:
        fields = list(extra_fields or ())
        if fields:
            essence = super().build(body=body, extra_fields=fields)
        elif body.get("kind", KIND) not in (KIND, quotaspec.KIND):
            return kopf.BodyEssence()
        else:
            meta = body.get("metadata") or {}
            lean: dict[str, Any] = {
                k: v for k, v in body.items() if k not in ("metadata", "status")
            }
            lean["metadata"] = {k: meta[k] for k in self._KEPT_META if k in meta}
            essence = super().build(body=kopf.Body(lean))  # type: ignore[arg-type]
        annotations = essence.get("metadata", {}).get("annotations", {})
        if LEGACY_DIFF_BASE in annotations:  # kopf's annotation storage left itself out
            del annotations[LEGACY_DIFF_BASE]
            self.remove_empty_stanzas(essence)
        return essence

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        essence = super().fetch(body=body)
        return essence if essence is not None else self._legacy.fetch(body=body)


def configure_kopf(
    settings: kopf.OperatorSettings,
    namespaces: Sequence[str] = (),
    peering: str = "",
    peering_lifetime_s: float = 15.0,
) -> None:
    """kopf's settings, one comment per choice."""
    # Our finalizer lives under the project's group. kopf adds it to every TaskQueue (the
    # per-queue sweep loop must stop before the object goes) and removes it on deletion
    # once the Purge handler, when onDelete is Purge, has cleaned Redis.
    settings.persistence.finalizer = FINALIZER
    # Handler progress and the last-handled spec go to status.kopf (the CRD keeps that
    # field's contents as kopf writes them): with the create/update handler's own status
    # fields, one patch of the status subresource per handling. In annotations, kopf
    # patched the object as well, and each patch is a write and a watch event more per
    # TaskQueue (LeanDiffBaseStorage: also without a deep copy of the whole body per event).
    settings.persistence.progress_storage = kopf.StatusProgressStorage(name=KOPF_STATUS)
    settings.persistence.diffbase_storage = LeanDiffBaseStorage()
    # High availability (docs/operator.md, "Two replicas"): with a peering name the
    # replicas meet in that ClusterKopfPeering; the oldest live one works, the others
    # start paused (kopf runs no watch, handler or daemon of theirs) and resume when its
    # keep-alives stop for `lifetime` seconds, or at once when it exits cleanly. Without
    # one, a single replica runs standalone. Either way an overlap (a replica resuming
    # while a frozen one wakes) is safe: the sweeper's Redis operations are atomic and
    # idempotent and cron slots fire at most once.
    if peering:
        settings.peering.standalone = False
        settings.peering.mandatory = True
        settings.peering.clusterwide = True
        settings.peering.name = peering
        settings.peering.lifetime = int(peering_lifetime_s)
        settings.peering.priority = seniority_priority()
        settings.peering.stealth = True  # no log line per keep-alive
    else:
        settings.peering.standalone = True
        settings.peering.mandatory = False
    # The apiserver closes each watch after server_timeout; the client gives up slightly
    # later, so a silently dead connection (no events, no close) is noticed and reopened.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 10
    # A single API request never hangs a handler for long.
    settings.networking.request_timeout = 30
    settings.networking.connect_timeout = 10
    # Only warnings and errors from handler loggers become Kubernetes events; the
    # requeue/recovery events are posted explicitly with kopf.event (which, unlike
    # kopf.info, is not filtered by this level).
    settings.posting.level = logging.WARNING
    # Retry delays after an API error while processing an event: quick first, then calm.
    settings.queueing.error_delays = (1, 2, 5, 10, 30, 60)
    # Exact namespace names need no list or watch of namespaces (the RBAC grants none):
    # without this kopf would first retry a forbidden list for half a minute. The CRD is
    # still discovered at start; a CRD installed later needs an operator restart.
    if namespaces and exact_names(namespaces):
        settings.scanning.disabled = True
    # A deleted TaskQueue waits for its daemons to stop. The sweep may be mid-round-trip in
    # its thread when `stopped` is raised; give it this long to finish and exit, else kopf
    # looks again only once the cancellation backoff (15 s) has passed, and the deletion
    # waits that long for a sweep that ended a moment later.
    settings.background.instant_exit_timeout = 3.0
    # Sync handlers run in these threads; the sweeps' and autoscalers' round trips in the
    # operator's own pool (TASKFLEET_SWEEP_THREADS), their waits on the event loop.
    settings.execution.max_workers = 16
