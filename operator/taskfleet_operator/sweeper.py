"""The per-TaskQueue sweep: orphaned tasks back to pending, Redis housekeeping, cron.

Every Redis operation it uses is one atomic, idempotent Lua script, so two sweepers
(an operator restart overlapping its predecessor) cannot double anything: a requeue
finds the pod's set already empty, a cron slot fires at most once.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import redis
from croniter import croniter
from taskfleet.producer.encoding import encode_payload
from taskfleet.producer.queue import Queue
from taskfleet.protocol.config import QueueConfig
from taskfleet.protocol.errors import InvalidPayload, TaskfleetError
from taskfleet.protocol.redisurl import InvalidRedisURL, parse_redis_url, redact_redis_url, scrub
from taskfleet.protocol.scripts import SWEEP_BOUND

from taskfleet_operator import builders, kube
from taskfleet_operator.models import TaskQueueSpec

UrlResolver = Callable[[str, TaskQueueSpec], str]

__all__ = ["Connections", "SweepReport", "describe_error", "redact_redis_url", "sweep_queue"]


def describe_error(exc: BaseException, url: str | None = None) -> str:
    """A one-line error text with every secret of ``url`` (userinfo or query, in any
    encoding) and any URL in it masked (`taskfleet.protocol.redisurl.scrub`)."""
    return scrub(f"{type(exc).__name__}: {exc}", url)


def _unusable_url(namespace: str, spec: TaskQueueSpec, problem: str) -> Exception:
    """The error for a URL taskfleet refuses; it never quotes the URL (it may hold a
    password), only what is wrong with it."""
    ref = spec.redis.secret_ref
    if ref is None:  # the model refuses such a redis.url; kept for a spec from an older CRD
        return ValueError(f"redis.url is not a usable Redis URL: {problem}")
    return kube.SecretUnavailable(
        f"key {ref.key!r} of Secret {namespace}/{ref.name} is not a usable Redis URL: {problem}"
    )


class Connections:
    """One `Queue` per TaskQueue, rebuilt when its Redis URL changes (e.g. a rotated Secret).

    Clients get short socket timeouts so an unreachable Redis fails a sweep quickly
    instead of stalling a handler thread. A resolved URL (a Secret read) is reused for
    ``url_ttl_s``, so sweeping does not GET every Secret every few seconds; `invalidate`
    drops it at once when Redis refuses (a rotated password).
    """

    def __init__(self, resolve_url: UrlResolver, timeout_s: float, url_ttl_s: float = 30.0):
        self._resolve_url = resolve_url
        self._timeout_s = timeout_s
        self._url_ttl_s = url_ttl_s
        self._lock = threading.Lock()
        self._queues: dict[tuple[str, str], tuple[str, Queue]] = {}
        self._urls: dict[tuple[str, str], tuple[float, str, str]] = {}

    def _url(self, key: tuple[str, str], spec: TaskQueueSpec) -> str:
        source = spec.redis.model_dump_json()
        now = time.monotonic()
        with self._lock:
            cached = self._urls.get(key)
        if cached is not None and cached[0] > now and cached[1] == source:
            return cached[2]
        url = self._resolve_url(key[0], spec)
        with self._lock:
            self._urls[key] = (now + self._url_ttl_s, source, url)
        return url

    def invalidate(self, namespace: str, name: str) -> None:
        """Forget the resolved URL: the next `get` reads the Secret again."""
        with self._lock:
            self._urls.pop((namespace, name), None)

    def get(self, namespace: str, name: str, spec: TaskQueueSpec) -> Queue:
        key = (namespace, name)
        url = self._url(key, spec)
        digest = hashlib.sha256(url.encode()).hexdigest()
        with self._lock:
            cached = self._queues.get(key)
            if cached is not None and cached[0] == digest:
                return cached[1]
            try:
                parse_redis_url(url)  # what redis-py would misread or refuse only later
                client = redis.Redis.from_url(
                    url,
                    socket_timeout=self._timeout_s,
                    socket_connect_timeout=self._timeout_s,
                    health_check_interval=30,
                )
            except InvalidRedisURL as exc:
                self._urls.pop(key, None)  # read the Secret again once it is fixed
                raise _unusable_url(namespace, spec, str(exc)) from None
            except ValueError:
                self._urls.pop(key, None)
                raise _unusable_url(namespace, spec, "redis-py refuses it") from None
            queue = Queue(builders.queue_name(namespace, name), client=client)
            self._queues[key] = (digest, queue)
        if cached is not None:
            cached[1].client.close()
        return queue

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._urls.pop((namespace, name), None)
            cached = self._queues.pop((namespace, name), None)
        if cached is not None:
            cached[1].client.close()

    def close(self) -> None:
        with self._lock:
            queues, self._queues = list(self._queues.values()), {}
        for _, queue in queues:
            queue.client.close()


def configure(queue: Queue, spec: TaskQueueSpec) -> None:
    """Write the spec's shared settings to the queue's config hash."""
    queue.configure(QueueConfig(**builders.queue_config_fields(spec)))


def due_slot(cron: str, now: datetime, not_before: datetime) -> int | None:
    """The latest cron slot at or before ``now`` (epoch seconds), if not before the bound.

    Only the latest slot is considered: after an outage a schedule fires once, not once
    per missed tick.
    """
    slot: datetime = croniter(cron, now + timedelta(microseconds=1)).get_prev(datetime)
    if slot < not_before:
        return None
    return int(slot.timestamp())


@dataclass
class SweepReport:
    """What one sweep did and saw, for status and events."""

    requeued: dict[str, int] = field(default_factory=dict)
    fired: list[str] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)
    suspects: set[str] = field(default_factory=set)
    # Schedules the queue refused this sweep, by name: the error says what to fix.
    schedule_errors: dict[str, str] = field(default_factory=dict)


def orphaned_pods(
    registered: Iterable[str],
    live_pods: Iterable[str],
    suspects: set[str],
    pod_gone: Callable[[str], bool],
) -> tuple[list[str], set[str]]:
    """Which registered workers' pods to requeue now, and which to suspect next sweep.

    A pod missing from the live set (the operator's pod index) is suspected first and
    requeued only if it is still missing a sweep later *and* the API itself answers that
    it is gone: the index can lag behind a pod that was just created, and requeueing a
    live worker's fresh claims would run them twice. A pod the API still has stays
    suspect, so it is checked again next sweep. A Terminating pod is still in the API,
    so it counts as live and keeps its tasks.
    """
    live = set(live_pods)
    requeue: list[str] = []
    suspect: set[str] = set()
    for pod in registered:
        if pod in live:
            continue
        if pod in suspects and pod_gone(pod):
            requeue.append(pod)
        else:
            suspect.add(pod)
    return requeue, suspect


def requeue_orphans(
    queue: Queue,
    live_pods: Iterable[str],
    suspects: set[str],
    report: SweepReport,
    pod_gone: Callable[[str], bool],
) -> None:
    """Take back the tasks of registered workers whose pod is gone (see `orphaned_pods`).

    The pod-deletion event is the fast path; this covers missed events and restarts.
    """
    registered = [worker.pod for worker in queue.workers()]
    requeue, report.suspects = orphaned_pods(registered, live_pods, suspects, pod_gone)
    for pod in requeue:
        count = queue.requeue_pod(pod)
        if count:
            report.requeued[pod] = count


def fire_schedules(
    queue: Queue, spec: TaskQueueSpec, now: datetime, not_before: datetime, report: SweepReport
) -> None:
    """Fire every due schedule; one the queue refuses (e.g. a payload over the queue's
    bound) is reported and skipped, so it cannot stop the others or the sweep."""
    max_bytes = QueueConfig(**builders.queue_config_fields(spec)).max_payload_bytes
    for schedule in spec.schedules:
        slot = due_slot(schedule.cron, now, not_before)
        if slot is None:
            continue
        try:
            # The fire script does not bound payloads as enqueue does: check here.
            size = len(encode_payload(dict(schedule.payload)).encode())
            if size > max_bytes:
                raise InvalidPayload(
                    f"payload is {size} bytes; the queue allows {max_bytes} (max_payload_bytes)"
                )
            task_id = queue.fire_schedule(
                schedule.name, slot, dict(schedule.payload), priority=schedule.priority
            )
        except TaskfleetError as error:
            report.schedule_errors[schedule.name] = str(error)
            continue
        if task_id is not None:
            report.fired.append(task_id)


def sweep_queue(
    queue: Queue,
    spec: TaskQueueSpec,
    *,
    live_pods: Iterable[str],
    suspects: set[str],
    pod_gone: Callable[[str], bool],
    created_at: datetime,
    catchup_s: float,
    now: datetime | None = None,
) -> SweepReport:
    """One sweep of one queue. Raises `redis.RedisError` when Redis is unreachable.

    ``pod_gone(pod)`` asks the API whether a suspect pod is really gone (see
    `orphaned_pods`).
    """
    now = now or datetime.now(UTC)
    report = SweepReport()
    configure(queue, spec)
    requeue_orphans(queue, live_pods, suspects, report, pod_gone)
    # The sweep script is bounded per call; a few calls catch up after a backlog.
    for _ in range(10):
        result = queue.sweep()
        counts = (result.promoted, result.expired, result.requeued, result.pruned_done)
        if max(*counts, result.pruned_dead) < SWEEP_BOUND:
            break
    not_before = max(created_at, now - timedelta(seconds=catchup_s))
    fire_schedules(queue, spec, now, not_before, report)
    report.stats = queue.stats()
    return report
