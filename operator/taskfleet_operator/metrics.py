"""The operator's Prometheus endpoint: its own work, and every queue (``queuemetrics``).

The counters and histograms here count what this operator process did since it started
(tasks it put back and why, schedules it fired, how long sweeps and reconciles took, what
failed); the queues' own figures, which outlive any operator, come from Redis at scrape
time. Served from a thread (``taskfleet.protocol.metricsendpoint``: it sleeps until scraped) on
``TASKFLEET_METRICS_PORT`` (9101; 0 = off), beside kopf's liveness endpoint.
"""

from __future__ import annotations

import contextlib
import threading

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
)
from taskfleet._version import __version__
from taskfleet.protocol import metricsendpoint

from taskfleet_operator.connections import Connections
from taskfleet_operator.leadership import Leadership
from taskfleet_operator.providerquotas import QuotaLinks
from taskfleet_operator.queuemetrics import QueueCollector
from taskfleet_operator.quotametrics import QuotaCollector

__all__ = ["DEFAULT_PORT", "OperatorMetrics"]

DEFAULT_PORT = 9101

#: Sweeps and reconciles: a few Redis and API round trips, slower when either is.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class OperatorMetrics:
    """The operator's own series, in a registry of their own (tests make several)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        # process_resident_memory_bytes and the rest: an operator's size against the
        # TaskQueues it serves (docs/operator.md, sharding).
        ProcessCollector(registry=registry)
        # Which release serves this endpoint: during an upgrade, old and new side by side.
        Gauge(
            "taskfleet_operator_info",
            "The operator's version (always 1).",
            ["version"],
            registry=registry,
        ).labels(__version__).set(1)
        self.requeued = Counter(
            "taskfleet_operator_requeued_tasks",
            "Tasks the operator put back in pending: reason pod_gone (the worker's pod was "
            "deleted or failed) or lease_expired (no heartbeat within the lease TTL).",
            ["queue", "reason"],
            registry=registry,
        )
        self.schedules_fired = Counter(
            "taskfleet_operator_schedules_fired",
            "Cron schedule slots the operator fired (one task each).",
            ["queue"],
            registry=registry,
        )
        self.sweep_errors = Counter(
            "taskfleet_operator_sweep_errors",
            "Sweeps that could not reach the queue: reason RedisUnreachable, "
            "SecretUnavailable, or error (an unexpected exception).",
            ["queue", "reason"],
            registry=registry,
        )
        self.reconcile_errors = Counter(
            "taskfleet_operator_reconcile_errors",
            "TaskQueue changes the operator could not apply, by reason (InvalidSpec, "
            "DeploymentRejected, NotOwned, error).",
            ["reason"],
            registry=registry,
        )
        self.sweep_seconds = Histogram(
            "taskfleet_operator_sweep_seconds",
            "How long one sweep of one queue took (Redis and API round trips).",
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        # Each queue's series of the counters above (`count`), for `forget`.
        self._series: dict[str, set[tuple[Counter, tuple[str, ...]]]] = {}
        self._series_lock = threading.Lock()
        self.reconcile_seconds = Histogram(
            "taskfleet_operator_reconcile_seconds",
            "How long applying one TaskQueue change took.",
            buckets=DURATION_BUCKETS,
            registry=registry,
        )

    def count(self, counter: Counter, queue: str, *labels: str, amount: float = 1) -> None:
        """Add ``amount`` to ``counter``'s series of ``queue`` (and ``labels``), noting the
        series for `forget`: called from the sweeps' threads and the event loop alike."""
        series = (queue, *labels)
        with self._series_lock:
            self._series.setdefault(queue, set()).add((counter, series))
        counter.labels(*series).inc(amount)

    def forget(self, queue: str) -> None:
        """Drop the deleted queue's series: a thousand queues created and deleted in turn
        leave none behind, in memory or on the endpoint. Only its own are touched: a
        listing of every series (prometheus-client's ``collect()``) took 67 ms a queue with
        1,000 queues' series."""
        with self._series_lock:
            series = self._series.pop(queue, set())
        for counter, labels in series:
            with contextlib.suppress(KeyError):  # never counted, or removed already
                counter.remove(*labels)

    def lead(self, leadership: Leadership) -> None:
        """Export ``taskfleet_operator_leader``, read from ``leadership`` at each scrape."""
        Gauge(
            "taskfleet_operator_leader",
            "1 while this replica leads (kopf's peering lets it serve the TaskQueues), 0 "
            "while it waits paused for another replica. Summed over replicas: 1.",
            registry=self.registry,
        ).set_function(lambda: float(leadership.leads()))

    def watch(self, connections: Connections) -> None:
        """Add every connected queue's figures, read from Redis at each scrape."""
        self.registry.register(QueueCollector(connections))

    def watch_quotas(self, links: QuotaLinks, leadership: Leadership) -> None:
        """Add every ProviderQuota's use, read from Redis at each scrape while this
        replica leads (the one that handles the ProviderQuotas)."""
        self.registry.register(QuotaCollector(links, leadership.leads))

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        """Serve on ``port`` from a daemon thread (an ``OSError`` if it is taken)."""
        metricsendpoint.serve(port, addr, self.registry)
