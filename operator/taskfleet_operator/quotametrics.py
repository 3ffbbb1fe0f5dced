"""Every ProviderQuota's use, read from Redis when Prometheus scrapes the operator.

The operator is where the quotas are declared, so it reads each once per scrape (one
script call per quota); a worker knows only the quotas its tasks name, and every worker
exporting them would multiply the reads and the series. A quota whose Redis does not
answer gives ``taskfleet_quota_redis_up 0`` and no other series (a gap, not a false 0).

Labels: ``quota`` (its name on Redis, as tasks name it), the resource's
``providerquota_namespace`` and ``providerquota``, and ``unit`` for per-unit series.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import redis

from taskfleet_operator import kube
from taskfleet_operator.providerquotas import QuotaLinks

__all__ = ["QuotaCollector"]


class QuotaCollector:
    """The ``taskfleet_quota_*`` series (on the metrics thread), while this replica leads."""

    def __init__(self, links: QuotaLinks, leads: Callable[[], bool]) -> None:
        self._links = links
        self._leads = leads

    def describe(self) -> list[Any]:
        return []  # nothing to check at registration: collect() reads Redis

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        labels = ["quota", "providerquota_namespace", "providerquota"]
        up = GaugeMetricFamily(
            "taskfleet_quota_redis_up",
            "1 when the quota's Redis answered this scrape.",
            labels=labels,
        )
        limit = GaugeMetricFamily(
            "taskfleet_quota_limit", "Units allowed per period.", labels=[*labels, "unit"]
        )
        used = GaugeMetricFamily(
            "taskfleet_quota_used",
            "Units used in the current window: settled use and unsettled estimates.",
            labels=[*labels, "unit"],
        )
        debt = GaugeMetricFamily(
            "taskfleet_quota_debt",
            "Units used above the limit: the next windows start with them.",
            labels=[*labels, "unit"],
        )
        reserved = GaugeMetricFamily(
            "taskfleet_quota_reserved",
            "Runs holding a concurrency reservation of the quota now.",
            labels=labels,
        )
        paused = GaugeMetricFamily(
            "taskfleet_quota_paused",
            "1 while the quota is paused (a 429, report_quota, or spec.pause).",
            labels=labels,
        )
        if self._leads():
            for namespace, name, spec, quota in self._links.known():
                values = [quota, namespace, name]
                try:
                    use = self._links.read(namespace, name, spec, quota)
                except (redis.RedisError, kube.SecretUnavailable):
                    use = None
                up.add_metric(values, 0.0 if use is None else 1.0)
                if use is None:
                    continue
                for unit, u in use.units.items():
                    limit.add_metric([*values, unit], float(u.limit))
                    used.add_metric([*values, unit], float(u.used))
                    over = max(0, u.used - u.limit) if u.limit else 0
                    debt.add_metric([*values, unit], float(over))
                reserved.add_metric(values, float(use.reserved))
                paused.add_metric(values, 1.0 if use.paused_until_ms else 0.0)
        yield from (up, limit, used, debt, reserved, paused)
