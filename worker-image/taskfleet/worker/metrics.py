"""The worker's Prometheus metrics: what it did, read when scraped, and two timings per task.

Counts of outcomes are the worker's own ``Counters`` (kept anyway for its log), read at
scrape time by a collector: nothing is added to a task's path for them. What must be
recorded per task (run time, queue wait) and per claim (round trip) goes into the
worker's ``Timings`` (``timings``), read here as a copy.

What is read of the worker is declared here (``Observed``), so this module depends on
no part of the worker's loops: the worker hands itself to ``serve``.

prometheus-client (the ``metrics`` extra) is imported only by ``serve``: a worker without
a metrics port never loads it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, Protocol

from taskfleet._version import __version__
from taskfleet.protocol.serverprobe import SAFE_EVICTION_POLICY
from taskfleet.worker.gate import RedisGate
from taskfleet.worker.named import HandlerSet
from taskfleet.worker.runs import Counters
from taskfleet.worker.settings import WorkerSettings
from taskfleet.worker.timings import CLAIM_BUCKETS, TIME_BUCKETS, Histogram, Timings

__all__ = [
    "CLAIM_BUCKETS",
    "DEFAULT_PORT",
    "TIME_BUCKETS",
    "Histogram",
    "MetricsUnavailable",
    "Observed",
    "Timings",
    "serve",
]

#: The port the operator gives worker pods (``taskfleet worker`` serves none by default:
#: several workers on one host would fight over one port).
DEFAULT_PORT = 9100

#: The outcomes of ``taskfleet_worker_tasks_total``, each a ``Counters`` field.
OUTCOMES = ("done", "retried", "dead", "released", "stale", "lost", "rate_limited")


class Observed(Protocol):
    """What a scrape reads of a worker (``core.Worker``)."""

    @property
    def settings(self) -> WorkerSettings: ...
    @property
    def handler(self) -> HandlerSet: ...
    @property
    def counters(self) -> Counters: ...
    @property
    def timings(self) -> Timings: ...
    @property
    def inflight(self) -> int: ...
    @property
    def held_slots(self) -> int: ...
    @property
    def draining(self) -> bool: ...
    @property
    def gate(self) -> RedisGate: ...
    @property
    def eviction_policy(self) -> str | None: ...


class MetricsUnavailable(Exception):  # noqa: N818 - one clear error for the CLI
    """A metrics port was asked for but cannot be served (missing extra, port taken)."""


class _Collector:
    """Reads one worker's state when Prometheus scrapes (on the HTTP server's thread:
    plain reads of ints and a copy of each histogram's list, safe under the GIL)."""

    def __init__(self, worker: Observed, version: str) -> None:
        self._worker = worker
        self._version = version

    def describe(self) -> list[Any]:
        return []  # unchecked: the registry does not call collect() at registration

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        worker = self._worker
        queue = worker.settings.queue
        labels = [queue]
        info = GaugeMetricFamily(
            "taskfleet_worker_info",
            "The worker's queue, handler and version (always 1).",
            labels=["queue", "handler", "version"],
        )
        info.add_metric([queue, worker.handler.ref, self._version], 1)
        yield info
        counters = worker.counters
        tasks = CounterMetricFamily(
            "taskfleet_worker_tasks",
            "Tasks this worker finished with each outcome (failed = retried + dead).",
            labels=["queue", "outcome"],
        )
        for outcome in OUTCOMES:
            tasks.add_metric([queue, outcome], getattr(counters, outcome))
        yield tasks
        repairs = CounterMetricFamily(
            "taskfleet_worker_flow_repairs",
            "Waiting tasks this worker's housekeeping resolved: their dependencies had all "
            "ended without waking them (an older worker, a lost write).",
            labels=["queue"],
        )
        repairs.add_metric(labels, counters.flow_repairs)
        yield repairs
        for name, doc, histogram in (
            (
                "taskfleet_worker_task_run_seconds",
                "How long handlers ran, per finished attempt.",
                worker.timings.run,
            ),
            (
                "taskfleet_worker_task_wait_seconds",
                "How long tasks waited in the queue: from when they were ready (enqueued, "
                "due or retried) to their claim.",
                worker.timings.wait,
            ),
            (
                "taskfleet_worker_claim_seconds",
                "Round trip of the worker's claim calls.",
                worker.timings.claim,
            ),
        ):
            buckets, total = histogram.cumulative()
            family = HistogramMetricFamily(name, doc, labels=["queue"])
            family.add_metric(labels, buckets, total)
            yield family
        held = worker.inflight
        for name, doc, value in (
            ("taskfleet_worker_inflight", "Tasks the worker holds now.", held),
            ("taskfleet_worker_slots", "Tasks the worker runs at once (--concurrency).",
             worker.settings.concurrency),
            ("taskfleet_worker_slots_held",
             "Slots held by calls the worker gave up on (timed out, lease lost) that still run.",
             worker.held_slots),
            ("taskfleet_worker_draining", "1 once the worker drains.", int(worker.draining)),
            ("taskfleet_worker_redis_up", "1 while Redis answers the worker.",
             int(worker.gate.open.is_set())),
            ("taskfleet_worker_redis_refusing_writes",
             "1 while Redis refuses the worker's writes (full: OOM under maxmemory).",
             int(worker.gate.refusing_writes)),
            ("taskfleet_worker_redis_evicting",
             "1 if Redis's maxmemory-policy may delete keys (started with --allow-eviction).",
             int(worker.eviction_policy not in (None, SAFE_EVICTION_POLICY))),
        ):  # fmt: skip
            gauge = GaugeMetricFamily(name, doc, labels=["queue"])
            gauge.add_metric(labels, value)
            yield gauge
        gate = worker.gate
        for name, doc, count in (
            (
                "taskfleet_worker_redis_outage_seconds",
                "Time Redis was unreachable for this worker, the current outage included.",
                gate.outage_seconds(time.monotonic()),
            ),
            (
                "taskfleet_worker_redis_reconnects",
                "Outages that ended with Redis answering again.",
                gate.reconnects,
            ),
            (
                "taskfleet_worker_redis_refused_writes",
                "Calls Redis refused as writes (OOM, MISCONF, NOREPLICAS); each was retried "
                "once Redis took writes again.",
                gate.refused_writes,
            ),
        ):
            counter = CounterMetricFamily(name, doc, labels=["queue"])
            counter.add_metric(labels, count)
            yield counter


def serve(worker: Observed, port: int, *, addr: str = "0.0.0.0") -> object:
    """Serve ``worker``'s metrics on ``port`` (all interfaces by default) from a daemon
    thread; returns the server. ``MetricsUnavailable`` says why it can't."""
    try:
        from prometheus_client import CollectorRegistry
    except ImportError:
        raise MetricsUnavailable(
            "a metrics port needs prometheus-client: pip install 'taskfleet[metrics]'"
        ) from None
    from prometheus_client import ProcessCollector

    from taskfleet.protocol import metricsendpoint

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(worker, __version__))
    ProcessCollector(registry=registry)  # process_cpu_seconds_total, memory, open fds
    try:
        server = metricsendpoint.serve(port, addr, registry)
    except OSError as exc:
        raise MetricsUnavailable(f"metrics port {port}: {exc.strerror or exc}") from None
    worker.timings.enabled = True
    return server
